"""Resume at another size: a FAILED run continues on more or fewer replicas, as one MLflow run.

Each run fails on purpose as its third epoch begins (tests/integration/resize_callbacks.py),
after its second epoch's checkpoint; it is resumed at another size with the same config,
and ends with the weights of a run trained without interruption at the same global batch.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import psutil
import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
ENV = {"PYTHONPATH": f"{REPO}{os.pathsep}{HERE}"}
# Real data and a model with hidden layers; Adam, so that the optimizer's slots are restored too.
COMMON = ["dataset=digits", "model=mlp", "optimizer=adam", "dataset.per_replica_batch_size=16", "trainer.epochs=3"]


def fail_once(marker: Path) -> list:
    return ["callbacks=[custom]", "callbacks.custom._target_=resize_callbacks.FailOnce",
            "+callbacks.custom.kwargs.epoch=3", f"+callbacks.custom.kwargs.marker={marker}"]


def failed_run(xpdist, overrides: list) -> str:
    """Trains until the planned failure; returns the FAILED run's id. Later runs train on."""
    proc = xpdist.run(*overrides, env=ENV, timeout=400)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = xpdist.runs()
    assert run.info.status == "FAILED"
    assert "planned failure at epoch 3" in run.data.tags["xpdist.error"]
    (xpdist.workdir / "trained-once").touch()
    return run.info.run_id


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("xpdist: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return lines[0]


def weights(job_dir: str) -> dict:
    """Every float variable of the job's last checkpoint (model and optimizer), by name."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(Path(job_dir) / "checkpoints")))
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    return {k: v for k, v in values.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"}


def assert_resized(xpdist, run_id: str, replicas: list, change: str) -> None:
    """One FINISHED run, every epoch logged once, the replica count per epoch, the change tagged."""
    run = xpdist.client().get_run(run_id)
    assert run.info.status == "FINISHED" and "xpdist.error" not in run.data.tags
    for metric in ("loss", "epoch_time_s", "learning_rate"):
        assert [m.step for m in xpdist.client().get_metric_history(run_id, metric)] == [1, 2, 3], metric
    history = sorted((m.step, m.value) for m in xpdist.client().get_metric_history(run_id, "num_replicas"))
    assert history == [(epoch, float(n)) for epoch, n in enumerate(replicas, 1)]
    assert run.data.tags["xpdist.resized"].startswith(f"from epoch 3: {change}"), run.data.tags["xpdist.resized"]
    assert run.data.tags["xpdist.resumed_from_epoch"] == "2"
    assert "xpdist.resized_data_order" not in run.data.tags  # in-memory data: the same global batches


def assert_same_weights(resized: dict, reference: dict) -> None:
    assert resized.keys() == reference.keys() and len(resized) > 4
    worst = max(float(np.max(np.abs(resized[k] - reference[k]))) for k in resized)
    assert worst < 1e-5, worst  # float32: what the order of a sum over replicas may change


def assert_nothing_left(xpdist) -> None:
    """No run RUNNING, and no task process of this test's job directories left."""
    assert all(r.info.status != "RUNNING" for r in xpdist.runs())
    left = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        where = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["cwd"] or "")
        if proc.pid != os.getpid() and str(xpdist.workdir) in where:
            left.append(proc)
    assert not left, left


def test_mirrored_run_resumed_on_more_replicas(xpdist):
    # Over 60 s: three trainings (failed, resumed on 4 replicas of 2 cores, the reference) and two refusals.
    overrides = ["strategy=mirrored", *COMMON, *fail_once(xpdist.workdir / "trained-once")]
    run_id = failed_run(xpdist, [*overrides, "devices.logical_cpus=2"])

    # 32 examples a global batch cannot go to 3 replicas; another model cannot continue the run.
    odd = xpdist.run(*overrides, "devices.logical_cpus=3", f"tracking.resume={run_id}", env=ENV)
    assert odd.returncode == 2
    assert one_line_error(odd) == (
        "xpdist: error: devices.logical_cpus=3: the run's global batch 32 cannot be split over 3 replicas. "
        "Resume on 2 or 4 replicas, or keep the per-replica batch (tracking.resize_keep=per_replica_batch).")
    other = xpdist.run(*overrides, "devices.logical_cpus=4", "model=cnn", f"tracking.resume={run_id}", env=ENV)
    assert other.returncode == 2
    assert one_line_error(other).startswith(f"xpdist: error: model=cnn: run {run_id} was trained with model=mlp")
    assert [r.info.status for r in xpdist.runs()] == ["FAILED"]

    resumed = xpdist.run(*overrides, "devices.logical_cpus=4", f"tracking.resume={run_id}", env=ENV)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (f"xpdist: resuming run {run_id} at epoch 3 at another size: 2 -> 4 replicas, devices.logical_cpus "
            "2 -> 4, global batch 32 kept, per-replica batch 16 -> 8, learning rate 0.001 kept") in resumed.stderr
    assert_resized(xpdist, run_id, [2, 2, 4], "2 -> 4 replicas")

    reference = xpdist.run(*overrides, "devices.logical_cpus=2", env=ENV)
    assert reference.returncode == 0, reference.stdout + reference.stderr
    first, second = xpdist.runs()
    assert_same_weights(weights(first.data.tags["xpdist.job_dir"]), weights(second.data.tags["xpdist.job_dir"]))
    assert_nothing_left(xpdist)


@pytest.mark.cluster
def test_multi_worker_run_resumed_on_one_worker(xpdist):
    # Over 60 s: three trainings, two of them clusters of two workers.
    overrides = ["strategy=multi_worker_mirrored", "cluster=localhost", "trainer=ctl", *COMMON,
                 *fail_once(xpdist.workdir / "trained-once")]
    run_id = failed_run(xpdist, [*overrides, "cluster.workers=2"])
    resumed = xpdist.run(*overrides, "cluster.workers=1", f"tracking.resume={run_id}", env=ENV, timeout=400)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "2 -> 1 replicas, cluster.workers 2 -> 1, global batch 32 kept, per-replica batch 16 -> 32" in resumed.stderr
    assert_resized(xpdist, run_id, [2, 2, 1], "2 -> 1 replicas")

    reference = xpdist.run(*overrides, "cluster.workers=2", env=ENV, timeout=400)
    assert reference.returncode == 0, reference.stdout + reference.stderr
    first, second = xpdist.runs()
    assert_same_weights(weights(first.data.tags["xpdist.job_dir"]), weights(second.data.tags["xpdist.job_dir"]))
    assert_nothing_left(xpdist)


def test_per_replica_batch_kept_scales_the_learning_rate(xpdist):
    """tracking.resize_keep=per_replica_batch: the global batch doubles with the replicas, the
    learning rate follows optimizer.lr_scaling=linear, reached over the stated warmup steps."""
    overrides = ["strategy=mirrored", *COMMON, "optimizer.lr_scaling=linear", *fail_once(xpdist.workdir / "trained-once")]
    run_id = failed_run(xpdist, [*overrides, "devices.logical_cpus=1"])
    resumed = xpdist.run(*overrides, "devices.logical_cpus=2", "tracking.resize_keep=per_replica_batch",
                         "tracking.resize_warmup_steps=10", f"tracking.resume={run_id}", env=ENV)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    change = ("1 -> 2 replicas, devices.logical_cpus 1 -> 2, global batch 16 -> 32, per-replica batch 16 kept, "
              "learning rate 0.001 -> 0.002 (warmup over 10 steps)")
    assert change in resumed.stderr
    assert_resized(xpdist, run_id, [1, 1, 2], change)
    rates = sorted((m.step, m.value) for m in xpdist.client().get_metric_history(run_id, "learning_rate"))
    assert [round(rate, 6) for _, rate in rates] == [0.001, 0.001, 0.002]
    assert_nothing_left(xpdist)


@pytest.mark.cluster
def test_parameter_server_run_resumed_on_fewer_parameter_servers(xpdist):
    """Variables sharded over 2 parameter servers (min_size shards of 4 bytes: every kernel and
    bias is split) continue on 1: a tf.train.Checkpoint saves a ShardedVariable as slices of
    one whole variable, which TensorFlow restores into however many shards the new cluster has.

    Over 60 s: two clusters of a chief, two workers and parameter servers, each importing TensorFlow.
    """
    overrides = ["strategy=parameter_server", "strategy.variable_partitioner=min_size", "strategy.min_shard_bytes=4",
                 "cluster=localhost", "cluster.workers=2", *COMMON, *fail_once(xpdist.workdir / "trained-once")]
    overrides[overrides.index("callbacks.custom._target_=resize_callbacks.FailOnce")] += "Legacy"  # tf-keras' fit
    run_id = failed_run(xpdist, [*overrides, "cluster.ps=2"])
    resumed = xpdist.run(*overrides, "cluster.ps=1", f"tracking.resume={run_id}", env=ENV, timeout=400)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    change = "1 -> 1 replicas, cluster.ps 2 -> 1, global batch 16 kept"
    assert change in resumed.stderr
    assert_resized(xpdist, run_id, [1, 1, 1], change)
    # Training went on from the restored weights and Adam's moments: asynchronous updates differ
    # from run to run, but a model started again would be back near ln(10) = 2.30 at its first epoch.
    losses = [m.value for m in sorted(xpdist.client().get_metric_history(run_id, "loss"), key=lambda m: m.step)]
    assert losses[2] < losses[1] < losses[0], losses
    assert_nothing_left(xpdist)


def test_streamed_source_says_its_batches_change(xpdist):
    """A user's dataset function makes each replica's batches itself: after a resize they are
    not the ones the run would have seen, which the resumed run says in one line and tags."""
    custom = ["dataset=custom", "dataset._target_=tests.userpkg.data.blobs", "dataset.num_classes=3",
              "dataset.num_examples=256", "dataset.num_validation_examples=64", "model=mlp",
              "model.hidden_units=[8]", "dataset.per_replica_batch_size=16"]
    overrides = ["strategy=mirrored", *custom, *fail_once(xpdist.workdir / "trained-once")]
    overrides[overrides.index("+callbacks.custom.kwargs.epoch=3")] = "+callbacks.custom.kwargs.epoch=1"
    proc = xpdist.run(*overrides, "devices.logical_cpus=1", env=ENV)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = xpdist.runs()
    (xpdist.workdir / "trained-once").touch()
    resumed = xpdist.run(*overrides, "devices.logical_cpus=2", f"tracking.resume={run.info.run_id}", env=ENV)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    note = ("dataset=custom streams its data: after the resize its batches are not the ones the run would "
            "have seen")
    assert [line for line in resumed.stderr.splitlines() if line.startswith("xpdist: note:")] == [f"xpdist: note: {note}"]
    run = xpdist.client().get_run(run.info.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["xpdist.resized_data_order"] == note
    assert run.data.tags["xpdist.resized"].startswith("from epoch 1: 1 -> 2 replicas")
    assert_nothing_left(xpdist)
