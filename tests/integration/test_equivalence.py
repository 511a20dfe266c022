"""scripts/equivalence.py runs a cell of docs/equivalence.md again and finds the page's verdict."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, xpdist_env

pytestmark = pytest.mark.slow

CELLS = ("linear|mirrored, cross_ops=hierarchical|ctl|float32", "batchnorm|mirrored, cross_ops=auto|ctl|float32")


@pytest.mark.parametrize("key", CELLS)
def test_a_cell_run_again_has_the_page_verdict(tmp_path, key):
    results = tmp_path / "equivalence.json"
    shutil.copy(REPO / "docs" / "figures" / "equivalence.json", results)
    published = json.loads(results.read_text())[key]
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "equivalence.py"), "--only", key,
                           "--results", str(results), "--page", str(tmp_path / "page.md")],
                          cwd=tmp_path, env=xpdist_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    again = json.loads(results.read_text())[key]
    assert again["verdict"] == published["verdict"]
    if again["verdict"] == "differs":
        assert again["worst"].split("/")[-2:-1] == published["worst"].split("/")[-2:-1]  # the same layer
    assert f"| {key.split('|')[1]} |" in (tmp_path / "page.md").read_text()
