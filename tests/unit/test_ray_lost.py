"""cluster=ray after a lost node, the driver's side, without Ray or TensorFlow: the job made
smaller (cluster.min_workers) and a lost chief's unlogged checkpoint forgotten."""

from __future__ import annotations

import json

from tests.unit.unit_helpers import plain
from xpdist.core import plan as planning
from xpdist.core.protocol.jobdir import JobDir, JobSpec, MetricFile, checkpoint_epoch
from xpdist.driver.engines import _ray_lost

RAY = ["strategy=multi_worker_mirrored", "cluster=ray", "cluster.workers=2", "dataset.per_replica_batch_size=8",
       "dataset.num_examples=400", "cluster.min_workers=1", "cluster.max_restarts=1"]


def index(folder, *epochs: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f'model_checkpoint_path: "ckpt-{epochs[-1]}"'] + [f'all_model_checkpoint_paths: "ckpt-{e}"' for e in epochs]
    (folder / "checkpoint").write_text("\n".join(lines) + "\n")


def logged(path, *epochs: int) -> None:
    metrics = MetricFile(path)
    for epoch in epochs:
        metrics.add({"loss": 1.0, "epoch_time_s": 0.5, "learning_rate": 0.01 * epoch}, step=epoch)
    metrics.flush()


def test_a_checkpoint_whose_epoch_never_came_back_is_forgotten(tmp_path):
    index(tmp_path / "checkpoints", 1, 2, 3)
    logged(tmp_path / "metrics.jsonl", 1, 2)
    _ray_lost.forget_unlogged(tmp_path / "checkpoints", tmp_path / "metrics.jsonl")
    assert checkpoint_epoch(tmp_path / "checkpoints") == 2
    assert '"ckpt-3"' not in (tmp_path / "checkpoints" / "checkpoint").read_text()


def test_checkpoints_of_logged_epochs_stay_and_none_logged_starts_over(tmp_path):
    index(tmp_path / "kept", 1, 2)
    logged(tmp_path / "metrics.jsonl", 1, 2)
    before = (tmp_path / "kept" / "checkpoint").read_text()
    _ray_lost.forget_unlogged(tmp_path / "kept", tmp_path / "metrics.jsonl")
    assert (tmp_path / "kept" / "checkpoint").read_text() == before
    index(tmp_path / "early", 1)
    _ray_lost.forget_unlogged(tmp_path / "early", tmp_path / "none.jsonl")
    assert checkpoint_epoch(tmp_path / "early") == 0


def test_shrink_keeps_the_global_batch_and_leaves_the_run_files(tmp_path):
    cfg = plain(*RAY)
    job = JobDir(tmp_path / "job")
    plan = planning.make_plan(cfg, tmp_path)
    JobSpec(dict(cfg), plan, "sqlite:///x.db", str(tmp_path)).write(job)
    job.run_ready.write_text("{}")
    logged(job.metrics, 1, 2)
    index(job.checkpoints, 2)
    note = _ray_lost.shrink(cfg, job, 1, job.checkpoints)
    spec = JobSpec.read(job)
    assert (spec.plan.num_workers, spec.plan.num_replicas, spec.plan.global_batch_size,
            spec.plan.per_replica_batch_size) == (1, 1, 16, 16)
    assert spec.config["cluster"]["workers"] == 1
    assert spec.plan.resize.at_epoch == 2 and spec.plan.resize.from_replicas == 2
    assert spec.plan.resize.warmup_from_rate == 0.02  # the rate of the checkpoint's epoch, as logged
    assert job.run_ready.exists() and job.metrics.exists(), "the run goes on: run.json and the metric file stay"
    assert note.change == "from epoch 3: 2 -> 1 replicas, cluster.workers 2 -> 1, global batch 16 kept, " \
                          "per-replica batch 8 -> 16, learning rate 0.01 kept"
    assert note.size["params"]["cluster.workers"] == "1" and json.dumps(note.size)
    assert (note.replicas_before, note.at_epoch) == (2, 2)
