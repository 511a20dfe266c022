"""`python -m xpdist --help` names the app and lists every group and option of conf/."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers import REPO, xpdist_env

CONF = REPO / "conf"


def test_help_names_the_app_and_lists_every_group_and_option(tmp_path):
    done = subprocess.run([sys.executable, "-m", "xpdist", "--help"], cwd=tmp_path, env=xpdist_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
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
