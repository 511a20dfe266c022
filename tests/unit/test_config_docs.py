"""docs/configuration.md lists every key of every option, and is what scripts/config_docs.py writes."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import REPO, compose, script_module
from xpdist.core import schema

PAGE = (REPO / "docs" / "configuration.md").read_text()


def _keys():
    for group, options in schema.OPTIONS.items():
        for name, cls in options.items():
            for f in dataclasses.fields(cls):
                yield f"{group}={name}", f"{group}.{f.name}"
    for group, options in schema.MULTI_GROUPS.items():
        for name, cls in options.items():
            for f in dataclasses.fields(cls):
                yield f"{group}={name}", f"{group}.{name}.{f.name}"
    for key, cls in (("devices", schema.DevicesConfig), ("tracking", schema.TrackingConfig)):
        for f in dataclasses.fields(cls):
            yield "other", f"{key}.{f.name}"
    for f in dataclasses.fields(schema.Config):
        if f.name not in schema.GROUPS + ("devices", "tracking"):
            yield "other", f.name


@pytest.mark.parametrize("section, key", sorted(set(_keys())))
def test_every_schema_key_is_in_the_docs(section, key):
    heading = f"### {section}\n" if section != "other" else "## Other keys\n"
    assert heading in PAGE, f"docs/configuration.md has no section {heading.strip()}"
    block = PAGE.split(heading, 1)[1].split("\n#", 1)[0]
    row = next((line for line in block.splitlines() if line.startswith(f"| `{key}` |")), None)
    assert row is not None, f"{key} is missing from {heading.strip()} in docs/configuration.md"
    assert row.rstrip(" |").split("|")[-1].strip(), f"{key} has no meaning: add a comment above the field"


def test_the_page_is_up_to_date():
    """What `python scripts/config_docs.py` would write, rendered here from the compositions
    test_config.py makes of every option (the same xdist group: tests/conftest.py)."""
    config_docs = script_module("config_docs.py")
    assert config_docs.render(compose) == PAGE, "docs/configuration.md is out of date: run python scripts/config_docs.py"
