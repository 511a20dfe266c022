"""docs/equivalence.md is current: its results hold exactly the cells scripts/equivalence.py
enumerates, every one with a verdict, and the page is what the script renders from them.
(tests/integration/test_equivalence.py runs a cell again and finds the page's verdict.)"""

from __future__ import annotations

import json

from tests.helpers import script_module


def test_the_page_holds_every_cell_of_the_matrix_and_nothing_else():
    script = script_module("equivalence.py")
    results = json.loads(script.RESULTS.read_text())
    assert sorted(results) == sorted(key for key, *_ in script.cells())
    assert not [key for key, r in results.items() if r["verdict"] == "pending"], \
        "a cell has no verdict: run python scripts/equivalence.py --missing"
    assert all(r.get("why") for r in results.values() if r["verdict"] in ("failed", "refused"))


def test_the_page_is_what_the_script_renders():
    script = script_module("equivalence.py")
    assert script.PAGE.read_text() == script.render(json.loads(script.RESULTS.read_text())), \
        "docs/equivalence.md is stale: python scripts/equivalence.py --render"


def test_gpu_only_cells_are_listed_as_not_run_here_with_the_script_that_runs_them():
    script = script_module("equivalence.py")
    results = json.loads(script.RESULTS.read_text())
    gpu = [key for key, _, row, *_ in script.cells() if row.not_run == "gpu"]
    assert gpu and all(results[key]["verdict"] in ("gpu", "equal", "differs", "nonfinite") for key in gpu)
    assert "scripts/gpu_check.sh" in script.PAGE.read_text()
    assert "scripts/equivalence.py --gpu" in (script.REPO / "scripts" / "gpu_check.sh").read_text()
