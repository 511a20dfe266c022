"""Smoke test of scripts/bench.py: one strategy, one repetition, tiny workload; and, without
running anything, how it compares the cluster=ray rows with cluster=localhost and where it
writes them in docs/benchmark.md, the one page of measured figures.

It checks what the benchmark writes, never how fast anything ran (the machine is shared).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.helpers import REPO, script_module, xpdist_env

# Quick mode compares xpdist with the hand-written script without MLflow.
WAYS = {"xpdist", "script"}
FIGURES = {"wall_s", "first_step_s", "training_s", "after_training_s", "steady_examples_per_sec", "peak_rss_mb",
           "peak_total_rss_mb", "runs", "failed"}
CASE = "linear/one_device/2ep"
# The guide's parameter_server Model.fit both ways: a chief, 2 workers and a ps task each.
PS_CASE = "linear/parameter_server/2ep"


# Over 60 s (2 min on a quiet machine here, 5 under load): 8 runs, two repetitions of two strategies, one of them a 4-process
# cluster both ways, the least that shows a spread and the parameter_server script's servers stopped.
@pytest.mark.slow
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


def bench_module():
    return script_module("bench.py")


def test_ray_rows_are_compared_with_localhost_and_their_differences_reported():
    bench = bench_module()
    measures = []
    for strategy, rate, first_step in (("multi_worker_mirrored", 1000.0, 9.0),
                                       ("multi_worker_mirrored-ray", 960.0, 10.5),
                                       ("multi_worker_mirrored-ray_local", 900.0, 14.0)):
        for rep in range(2):
            measures.append(bench.Measure("xpdist", "cnn", strategy, rep, 128, epochs=5, ok=True, wall_s=first_step + 5,
                                          first_step_s=first_step, training_s=2.0, after_training_s=3.0,
                                          steady_examples_per_sec=rate, peak_rss_mb=700, peak_total_rss_mb=1500))
    table = bench.summarize(measures)
    targets = {(t["case"], t["target"].split(" against")[0].split(" >=")[0]): t for t in bench.checks(table)}
    steady = targets[("cnn/multi_worker_mirrored-ray/5ep", "steady examples/sec")]
    assert (steady["figure"], steady["met"]) == ("0.96x", True) and "0.95x cluster=localhost" in steady["target"]
    assert targets[("cnn/multi_worker_mirrored-ray_local/5ep", "steady examples/sec")]["met"] is False
    start = targets[("cnn/multi_worker_mirrored-ray/5ep", "start-up")]
    assert (start["figure"], start["met"]) == ("+1.50 s", None)  # reported, no target
    assert not [t for t in targets if t[0].startswith("cnn/multi_worker_mirrored/")]  # no script: nothing to compare
    markdown = bench.markdown(table, list(targets.values()), {"reps": 2, "machine": "m", "command": "c",
                                                              "ray_head_start_s": 3.2})
    row = "| cnn/multi_worker_mirrored-ray/5ep | start-up against cluster=localhost (medians) | +1.50 s | - |"
    assert row in markdown
    assert "took 3.2 s to start" in markdown


def test_the_script_that_logs_its_model_is_reported_beside_the_targets_without_one():
    bench = bench_module()
    measures = []
    for way, first_step, after in (("xpdist", 3.0, 2.0), ("script", 4.0, 1.2), ("script+model", 4.0, 2.6)):
        measures.append(bench.Measure(way, "cnn", "default", 0, 64, epochs=5, ok=True, wall_s=first_step + 0.5 + after,
                                      first_step_s=first_step, training_s=0.5, after_training_s=after,
                                      steady_examples_per_sec=1000.0, peak_rss_mb=700, peak_total_rss_mb=700))
    targets = {t["target"]: t for t in bench.checks(bench.summarize(measures))}
    after = targets["after training against the script that logs its model too (medians)"]
    wall = targets["wall time against the script that logs its model too (medians)"]
    assert (after["figure"], after["met"]) == ("-0.60 s", None) and (wall["figure"], wall["met"]) == ("-1.60 s", None)
    # The target stays the plain script's.
    assert targets["after training <= script's + 0.5 s (medians)"]["met"] is False


# Loads a model's artifacts with pyfunc and prints its predictions' shape: in a fresh interpreter,
# since pyfunc imports TensorFlow, and by the artifacts' location, since mlflow.set_tracking_uri
# would also set MLFLOW_TRACKING_URI for every later command of the test process.
PREDICT = """
import sys, numpy as np, mlflow
model = mlflow.pyfunc.load_model(sys.argv[1])
assert model.metadata.signature is not None
print("SHAPE", list(np.asarray(model.predict(np.zeros((3, 1), "float32"))).shape))
"""


@pytest.mark.slow
def test_the_script_logs_a_model_mlflow_loads_and_predicts_with(tmp_path):
    """scripts/bench_baseline.py --log-model, the script+model way: its model found with
    MlflowClient as the run's and predicted with through pyfunc."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_baseline.py"), "--strategy", "default",
                           "--epochs", "1", "--tracking-uri", uri, "--log-model"],
                          cwd=tmp_path, env=xpdist_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("baseline").experiment_id])
    assert run.info.status == "FINISHED"
    (model,) = client.search_logged_models([run.info.experiment_id])
    assert model.source_run_id == run.info.run_id
    predicted = subprocess.run([sys.executable, "-c", PREDICT, model.artifact_location], cwd=tmp_path,
                               env=xpdist_env(), capture_output=True, text=True, timeout=300)
    assert "SHAPE [3, 1]" in predicted.stdout, predicted.stdout + predicted.stderr


def test_the_ray_rows_need_asking_for_and_run_xpdist_only():
    bench = bench_module()
    found = bench.strategies()
    ray = [name for name, s in found.items() if "cluster=ray" in s.xpdist]
    assert sorted(ray) == ["multi_worker_mirrored-ray", "multi_worker_mirrored-ray_local"]
    assert not set(ray) & set(bench.parse_args([]).strategies)  # opt-in: they need the Ray extra
    assert found["multi_worker_mirrored-ray"].ray_head and "cluster.address=local" in found[ray[1]].xpdist
    assert all(found[name].script == [] and found[name].workers == 2 for name in ray)


def test_docs_part_writes_only_its_own_block_and_the_pages_command_parses(tmp_path):
    bench = bench_module()
    page = tmp_path / "page.md"
    (begin, end), (ray_begin, ray_end) = bench.markers(), bench.markers("ray")
    page.write_text(f"a\n{begin}\nmain\n{end}\nb\n{ray_begin}\nold\n{ray_end}\nc\n")
    bench.write_docs(page, "new\n", "ray")
    assert page.read_text() == f"a\n{begin}\nmain\n{end}\nb\n{ray_begin}\nnew\n{ray_end}\nc\n"
    results = (REPO / "docs" / "benchmark.md").read_text()
    assert results.count(ray_begin) == 1 and results.count(ray_end) == 1
    command = results.split(ray_begin, 1)[1].split("Command: `", 1)[1].split("`", 1)[0]
    args = bench.parse_args(shlex.split(command)[2:])  # python scripts/bench.py ...
    assert args.docs_part == "ray" and args.ways == ["xpdist"]
    assert {"multi_worker_mirrored", "multi_worker_mirrored-ray"} <= set(args.strategies) and args.reps >= 3


def test_the_results_page_is_the_skeleton_bench_writes_with_each_table_headed_once(tmp_path):
    """docs/benchmark.md outside its tables is what bench.py creates; each table names its machine,
    date and command once; the guide that explains it links it."""
    bench = bench_module()
    results = (REPO / "docs" / "benchmark.md").read_text()
    outside = results
    for part in bench.PARTS:
        begin, end = bench.markers(part)
        inside = results.split(begin, 1)[1].split(end, 1)[0]
        assert inside.count("Machine: ") == 1 and inside.count("Written: ") == 1, part
        assert inside.count("Command: `python scripts/bench.py") == 1, part
        outside = outside.replace(inside, "\n")
    assert outside == bench.page_skeleton()
    page = tmp_path / "benchmark.md"  # a missing page is created from the skeleton
    bench.write_docs(page, "table\n", "precision")
    assert page.read_text() == bench.page_skeleton().replace(
        bench.markers("precision")[0] + "\n", bench.markers("precision")[0] + "\ntable\n")
    assert "(benchmark.md)" in (REPO / "docs" / "performance.md").read_text()
