"""Smoke test of scripts/bench.py: one strategy, one repetition, tiny workload.

It checks what the benchmark writes, never how fast anything ran (the machine is shared).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, xpdist_env

pytestmark = pytest.mark.slow

# Quick mode compares xpdist with the hand-written script without MLflow.
WAYS = {"xpdist", "script"}
FIGURES = {"wall_s", "first_step_s", "training_s", "after_training_s", "steady_examples_per_sec", "peak_rss_mb",
           "peak_total_rss_mb", "runs", "failed"}
CASE = "linear/one_device/2ep"
# The guide's parameter_server Model.fit both ways: a chief, 2 workers and a ps task each.
PS_CASE = "linear/parameter_server/2ep"


# Over 60 s (2 min on a quiet machine here, 5 under load): 8 runs, two repetitions of two strategies, one of them a 4-process
# cluster both ways, the least that shows a spread and the parameter_server script's servers stopped.
def test_quick_bench_writes_json_and_markdown(tmp_path):
    out = tmp_path / "results"
    cmd = [sys.executable, str(REPO / "scripts" / "bench.py"), "--quick", "--workloads", "linear", "--reps", "2",
           "--strategies", "one_device", "parameter_server", "--epochs", "2", "--log-cost-cases", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=xpdist_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = json.loads((out / "bench.json").read_text())
    assert report["meta"]["reps"] == 2 and report["meta"]["quick"] is True
    for case in (CASE, PS_CASE):
        summary = report["summary"][case]
        assert set(summary) == WAYS
        for way, row in summary.items():
            assert FIGURES <= set(row), way
            assert row["runs"] == 2 and row["failed"] == 0, (case, way)
            assert row["wall_s"] > 0 and row["steady_examples_per_sec"] > 0 and row["peak_rss_mb"] > 0, way
            assert row["wall_s_min"] <= row["wall_s"] <= row["wall_s_max"], (case, way)  # the spread
            assert row["after_training_s_min"] <= row["after_training_s_max"], (case, way)
            if case == CASE:  # both xpdist and the script report when their first step ended
                assert row["first_step_s"] > 0, way
    assert len(report["runs"]) == 8 and all(r["ok"] for r in report["runs"])
    targets = {t["target"] for t in report["targets"] if t["case"] == CASE}
    assert any("steady examples/sec" in t for t in targets) and any("wall time" in t for t in targets)
    assert any("after training" in t for t in targets) and any("first step" in t for t in targets)

    markdown = (out / "bench.md").read_text()
    assert f"| {CASE} | xpdist |" in markdown
    assert f"| {CASE} | script |" in markdown
    assert f"| {PS_CASE} | script |" in markdown
    assert "median (min-max)" in markdown.lower()
    assert any("(maxima)" in t["target"] for t in report["targets"])
    assert "python scripts/bench.py" in markdown
