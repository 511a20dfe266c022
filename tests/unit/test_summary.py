"""The sweep summary, built from real runs in a real MLflow store (no TensorFlow)."""

from __future__ import annotations

import csv

from xpdist.report import summary
from xpdist.tracking import store as tracking


def _sweep(uri):
    """A parent run with three children as xpdist.job leaves them: finished, finished, failed."""
    parent = tracking.create_run(uri, "xpdist", "sweep", {}, {"xpdist.sweep": "true"})
    specs = [(1, "one_device", 1, 0.5, 900.0, "FINISHED"), (0, "mirrored", 2, 0.25, 1500.0, "FINISHED"),
             (2, "central_storage", 2, None, None, "FAILED")]
    for job, strategy, replicas, loss, speed, status in specs:
        run_id = tracking.create_run(uri, "xpdist", f"{job}-{strategy}-{replicas}r",
                                     {"strategy": strategy, "num_replicas": str(replicas),
                                      "global_batch_size": str(5 * replicas)},
                                     {"xpdist.job": str(job), "xpdist.overrides": f"strategy={strategy} trainer.epochs=1",
                                      "xpdist.wall_time_s": "12.50"}, parent)
        if loss is not None:
            from mlflow.entities import Metric

            tracking.client(uri).log_batch(run_id, metrics=[
                Metric("loss", loss * 2, 0, 1), Metric("examples_per_sec", speed / 2, 0, 1),
                Metric("loss", loss, 0, 2), Metric("examples_per_sec", speed, 0, 2),
                Metric("steady_examples_per_sec", speed, 0, 2)])
        tracking.terminate(uri, run_id, status, None if status == "FINISHED" else "boom | it broke")
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name("xpdist").experiment_id
    return client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'")


def test_rows_tables_and_files(tmp_path, store_uri):
    rows = summary.rows(_sweep(store_uri))

    assert [r["job"] for r in rows] == [0, 1, 2]
    first = rows[0]
    assert (first["status"], first["strategy"], first["replicas"], first["global_batch"]) == \
        ("FINISHED", "mirrored", 2, 10)
    assert (first["final_loss"], first["examples_per_sec"], first["wall_time_s"]) == (0.25, 1500.0, 12.5)
    assert (first["overrides"], first["job_overrides"]) == ("strategy=mirrored trainer.epochs=1", "strategy=mirrored")
    assert rows[2]["status"] == "FAILED" and rows[2]["final_loss"] is None and "boom" in rows[2]["error"]

    text = summary.format_text(rows).splitlines()
    assert text[0].split() == ["job", "overrides", "status", "replicas", "global", "batch", "final", "loss",
                               "steady", "examples/sec", "wall", "time", "(s)"]
    assert text[2].split() == ["0", "strategy=mirrored", "FINISHED", "2", "10", "0.25", "1500", "12.5"]
    assert text[4].split()[:3] == ["2", "strategy=central_storage", "FAILED"] and text[4].split()[-1] == "12.5"

    paths = summary.write_all(rows, tmp_path / "out", "a sweep")
    assert [p.name for p in paths] == ["summary.csv", "summary.md", "examples_per_sec.png"]
    with open(paths[0]) as f:
        read = list(csv.DictReader(f))
    assert [r["status"] for r in read] == ["FINISHED", "FINISHED", "FAILED"]
    assert read[0]["run_id"] == rows[0]["run_id"] and float(read[1]["examples_per_sec"]) == 900.0
    markdown = paths[1].read_text().splitlines()
    assert markdown[0] == "# a sweep" and markdown[2].startswith("| job | overrides | status |")
    assert len(markdown) == 2 + 2 + 3
    png = paths[2].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_chart_of_a_large_sweep_shows_groups(tmp_path):
    """200 jobs: one bar per strategy (median and range), not 200 bars (once 24,000 px wide)."""
    from PIL import Image

    rows = [dict.fromkeys(summary.ROW_KEYS) | {"job": i, "run_id": f"{i:032x}", "run_name": f"{i}-job",
                                               "status": "FINISHED", "examples_per_sec": 100.0 + i,
                                               "strategy": ("one_device", "mirrored")[i % 2]} for i in range(200)]
    paths = summary.write_all(rows, tmp_path, "sweep of 200")
    with Image.open(paths[-1]) as image:
        assert image.width < 2000 and image.height < 600
