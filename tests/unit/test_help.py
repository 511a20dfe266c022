"""`python -m xpdist --help` names the app and lists every group and option of conf/."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO, xpdist_env

CONF = REPO / "conf"


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> str:
    """What `python -m xpdist --help` prints, run once for the module's tests (they only read it)."""
    done = subprocess.run([sys.executable, "-m", "xpdist", "--help"], cwd=tmp_path_factory.mktemp("help"),
                          env=xpdist_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_names_the_app_and_lists_every_group_and_option(out):
    assert out.startswith("xpdist: declarative tf.distribute experiments"), out[:200]
    assert "powered by Hydra" not in out and "== Config ==" not in out  # no config dump
    groups = sorted(d.name for d in CONF.iterdir() if d.is_dir() and d.name not in ("hydra", "__pycache__"))
    assert groups, CONF
    for group in groups:
        listed = re.search(rf"^  {group} +(.+(?:\n {{10,}}.+)*)", out, re.M)
        assert listed, f"group {group} missing from --help:\n{out}"
        words = set(re.findall(r"[a-z_0-9]+", listed.group(1)))
        missing = [f.stem for f in (CONF / group).glob("*.yaml") if f.stem not in words]
        assert not missing, f"{group} options missing from --help: {missing}"
    for doc in ("docs/configuration.md", "docs/sweeps.md", "docs/clusters.md", "docs/tracking.md"):
        assert doc in out
    assert out.count("python -m xpdist ") >= 2  # the example commands


def test_help_names_the_check_the_docs_command_and_the_tutorial(out):
    assert "python -m xpdist --check [overrides]" in out
    assert "python -m xpdist docs [PAGE]" in out and "python -m xpdist docs PAGE" in out
    for page in ("docs/tutorial.md", "docs/concepts.md"):
        assert page in out and (REPO / page).is_file(), page


def test_help_lists_each_groups_default_first_and_the_launchers_and_sweeper(out):
    defaults = {}
    for entry in yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]:
        if isinstance(entry, dict):
            defaults.update({k: v for k, v in entry.items() if "/" not in k and not k.startswith("override")})
    assert defaults.pop("recipe") is None  # a recipe is never chosen by default...
    assert defaults.pop("callbacks") == []  # several callbacks at once, none by default: a part of their own
    assert re.search(r"^Callbacks \(callbacks=\[NAME,\.\.\.\]; several at once, none by default", out, re.M)
    groups_part = out.split("Groups (", 1)[1].split("\n\n", 1)[0]
    assert "default" in groups_part.splitlines()[0]
    for group, default in defaults.items():
        first = re.search(rf"^  {group} +([a-z_0-9]+)", groups_part, re.M)
        assert first and first.group(1) == default, f"{group}: the default {default} is not listed first"
    assert not re.search(r"^  recipe ", groups_part, re.M)  # ...so it is not listed under "default first"
    assert re.search(r"recipe=NAME; none by default", out)
    for launcher in sorted((CONF / "hydra" / "launcher").glob("*.yaml")):
        assert f"hydra/launcher={launcher.stem}" in out
    assert "hydra/sweeper=optuna" in out
