"""What the docs promise a newcomer: every recipe listed, commands that work outside a clone."""

from __future__ import annotations

import re

from tests.helpers import REPO

RECIPES = sorted(p.relative_to(REPO / "recipes").with_suffix("").as_posix()
                 for p in (REPO / "recipes").rglob("*.yaml"))


def test_every_recipe_is_listed_in_the_docs_with_its_command():
    page = (REPO / "docs" / "recipes.md").read_text()
    listed = re.findall(r"^\| `([\w/]+)` \|", page, re.MULTILINE)
    assert sorted(listed) == RECIPES
    for name in RECIPES:
        assert f"`python -m xpdist recipe={name}`" in page
