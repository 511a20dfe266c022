"""Batch and learning-rate arithmetic of xpdist/plan.py, worked out without TensorFlow."""

from __future__ import annotations

import math
import time

import pytest

from tests.unit.unit_helpers import plain
from xpdist.core import plan as planning
from xpdist.core.errors import ConfigError
from xpdist.core.protocol.jobdir import JobDir, JobSpec, MetricFile, TaskResult, read_metrics


def make(tmp_path, *overrides):
    return planning.make_plan(plain(*overrides), tmp_path)


@pytest.mark.parametrize("overrides, replicas", [
    ([], 1),
    (["strategy=one_device", "devices.logical_cpus=4"], 1),
    (["strategy=mirrored"], 1),
    (["strategy=mirrored", "devices.logical_cpus=4"], 4),
    (["strategy=central_storage", "devices.logical_cpus=3"], 3),
    (["strategy=mirrored", "devices.logical_cpus=4", "strategy.devices=[/cpu:1,/cpu:3]"], 2),
    (["strategy=multi_worker_mirrored"], 1),
])
def test_global_batch_is_per_replica_batch_times_replicas(tmp_path, overrides, replicas):
    p = make(tmp_path, *overrides, "dataset.per_replica_batch_size=6", "dataset.num_examples=600")
    assert p.num_replicas == replicas
    assert p.per_replica_batch_size == 6
    assert p.global_batch_size == 6 * replicas
    assert p.steps_per_epoch == 600 // (6 * replicas)


def test_steps_and_split_follow_the_global_batch(tmp_path):
    p = make(tmp_path, "strategy=mirrored", "devices.logical_cpus=2", "dataset.per_replica_batch_size=4",
             "dataset.num_examples=103", "dataset.validation_split=0.2")
    assert (p.num_train, p.num_val) == (82, 21)
    assert (p.steps_per_epoch, p.validation_steps) == (82 // 8, 21 // 8)


def test_steps_per_epoch_overrides_the_data_size(tmp_path):
    assert make(tmp_path, "trainer.steps_per_epoch=3").steps_per_epoch == 3


def test_fixed_size_data_sets(tmp_path):
    p = make(tmp_path, "dataset=digits")
    assert p.num_examples == 1797 and p.num_val == round(1797 * 0.2)


@pytest.mark.parametrize("scaling, expected", [
    ("none", 0.01),
    ("linear", 0.01 * 4),  # reference batch: the per-replica batch, so x replicas
    ("sqrt", 0.01 * 2),
])
def test_learning_rate_scaling_from_the_per_replica_batch(tmp_path, scaling, expected):
    p = make(tmp_path, "strategy=mirrored", "devices.logical_cpus=4", "dataset.per_replica_batch_size=8",
             f"optimizer.lr_scaling={scaling}")
    assert p.global_batch_size == 32
    assert p.learning_rate == pytest.approx(expected)


@pytest.mark.parametrize("scaling, expected", [("linear", 0.1 * 32 / 128), ("sqrt", 0.1 * math.sqrt(32 / 128))])
def test_learning_rate_scaling_from_a_reference_batch(tmp_path, scaling, expected):
    p = make(tmp_path, "strategy=mirrored", "devices.logical_cpus=4", "dataset.per_replica_batch_size=8",
             "optimizer.learning_rate=0.1", "optimizer.reference_batch_size=128", f"optimizer.lr_scaling={scaling}")
    assert p.learning_rate == pytest.approx(expected)


def test_learning_rate_from_the_table(tmp_path):
    table = "++optimizer.lr_table={8: 0.05, 16: 0.1, 32: 0.15}"
    one = make(tmp_path, "optimizer.lr_scaling=table", table, "dataset.per_replica_batch_size=16")
    two = make(tmp_path, "optimizer.lr_scaling=table", table, "dataset.per_replica_batch_size=16",
               "strategy=mirrored", "devices.logical_cpus=2")
    assert (one.learning_rate, two.learning_rate) == (0.1, 0.15)


def test_learning_rate_table_without_the_global_batch(tmp_path):
    with pytest.raises(ConfigError) as err:
        make(tmp_path, "optimizer.lr_scaling=table", "++optimizer.lr_table={8: 0.05}")
    assert err.value.key == "optimizer.lr_table"
    assert "global batch 5" in str(err.value) and "++optimizer.lr_table={5: <rate>}" in str(err.value)


@pytest.mark.parametrize("overrides, name", [
    ([], "default-1r"),
    (["strategy=mirrored", "cross_ops=hierarchical", "devices.logical_cpus=4"], "mirrored-hierarchical-4r"),
    (["strategy=central_storage", "devices.logical_cpus=2", "trainer=ctl"], "central_storage-2r-ctl"),
    (["strategy=multi_worker_mirrored", "communication=ring"], "multi_worker_mirrored-ring-1r"),
    (["tracking.run_name=mine"], "mine"),
    # What differs from the defaults: the runs of an hour that were all `default-1r` before.
    (["model=custom"], "default-1r-custom"),
    (["model=cnn", "dataset=digits"], "default-1r-cnn-digits"),
    (["model=mlp", "optimizer=adam"], "default-1r-mlp-adam"),
    (["strategy=mirrored", "devices.logical_cpus=2", "trainer=ctl", "model=cnn", "dataset=synthetic_images",
      "optimizer=adam"], "mirrored-auto-2r-ctl-cnn-synthetic_images-adam"),
])
def test_run_names(tmp_path, overrides, name):
    assert make(tmp_path, *overrides).run_name == name


def test_run_names_leave_out_the_default_options():
    cfg = plain()
    assert {group: cfg[group].name for group in planning.DEFAULT_OPTIONS} == planning.DEFAULT_OPTIONS


@pytest.mark.parametrize("overrides, keras", [
    ([], "keras3"),
    (["strategy=multi_worker_mirrored"], "legacy"),  # Keras 3's fit cannot train under MWMS
    (["strategy=multi_worker_mirrored", "trainer=ctl"], "keras3"),
    (["strategy=central_storage"], "legacy"),  # Keras 3's fit reports wrong metrics there
    (["strategy=central_storage", "trainer=ctl"], "keras3"),
    (["strategy=central_storage", "keras=keras3"], "keras3"),
    (["keras=legacy"], "legacy"),
])
def test_keras_flavour(tmp_path, overrides, keras):
    assert make(tmp_path, *overrides).keras == keras


def test_options_that_do_not_apply_are_none(tmp_path):
    p = make(tmp_path, "strategy=one_device")
    assert (p.cross_ops, p.communication, p.devices) == ("none", "none", ["/cpu:0"])
    p = make(tmp_path)
    assert p.devices == []


@pytest.mark.parametrize("name, parsed", [
    ("/cpu:0", ("cpu", 0)), ("GPU:1", ("gpu", 1)), ("/job:worker/replica:0/task:1/device:CPU:2", ("cpu", 2)),
    ("/device:TPU:3", ("tpu", 3)), ("cpu", None), ("/xpu:0", None),
])
def test_parse_device(name, parsed):
    assert planning.parse_device(name) == parsed


def test_the_job_spec_round_trips_through_the_job_directory(tmp_path):
    p = make(tmp_path, "strategy=mirrored", "devices.logical_cpus=2")
    spec = JobSpec({"seed": 1, "dataset": {"name": "digits"}}, p, "sqlite:///x.db", str(tmp_path), ["seed=1"])
    spec.write(JobDir(tmp_path / "job"))
    assert JobSpec.read(JobDir(tmp_path / "job")) == spec


def test_a_task_result_is_none_until_written_and_a_cut_metric_line_is_skipped(tmp_path):
    job = JobDir(tmp_path)
    assert TaskResult.read(job) is None
    TaskResult("FAILED", "ValueError: boom", 12.5).write(job)
    assert TaskResult.read(job) == TaskResult("FAILED", "ValueError: boom", 12.5)
    metrics = MetricFile(job.metrics)
    before_ms = int(time.time() * 1000)
    metrics.add({"loss": 1.0}, step=1)
    after_ms = int(time.time() * 1000)
    metrics.flush()
    with open(job.metrics, "a") as out:
        out.write('{"step": 2, "timest')  # a task killed mid-write
    [(step, timestamp_ms, values)] = read_metrics(job.metrics)
    assert (step, values) == (1, {"loss": 1.0})
    assert before_ms <= timestamp_ms <= after_ms  # when add() was called, in milliseconds
