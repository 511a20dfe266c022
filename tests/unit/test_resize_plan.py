"""The plan of a run resumed at another size (core/plan.py at_size), worked out without TensorFlow."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.unit_helpers import plain
from xpdist.core import plan as planning
from xpdist.core.errors import ConfigError
from xpdist.core.protocol.jobdir import JobDir, JobSpec
from xpdist.driver.jobs import resize

SIZE = ["strategy=mirrored", "dataset.per_replica_batch_size=16", "dataset.num_examples=640",
        "optimizer.learning_rate=0.1", "optimizer.lr_scaling=linear"]


def at(tmp_path, replicas: int, keep: str, global_batch=32, per_replica=16):
    cfg = plain(*SIZE, f"devices.logical_cpus={replicas}")
    plan = planning.make_plan(cfg, tmp_path)
    return planning.at_size(cfg, plan, global_batch, per_replica, keep, "devices.logical_cpus", replicas)


def test_global_batch_kept_rederives_the_per_replica_batch(tmp_path):
    plan = at(tmp_path, 4, planning.KEEP_GLOBAL)
    assert (plan.num_replicas, plan.global_batch_size, plan.per_replica_batch_size) == (4, 32, 8)
    # The learning rate of the global batch the run trained with (linear: 0.1 x 32 / 16), the same epochs.
    assert plan.learning_rate == pytest.approx(0.2)
    assert plan.steps_per_epoch == 640 // 32


def test_per_replica_batch_kept_scales_the_global_batch_and_the_rate(tmp_path):
    plan = at(tmp_path, 4, planning.KEEP_PER_REPLICA)
    assert (plan.global_batch_size, plan.per_replica_batch_size) == (64, 16)
    assert plan.learning_rate == pytest.approx(0.4)
    assert plan.steps_per_epoch == 640 // 64


def test_a_global_batch_the_replicas_cannot_divide_names_the_counts_that_can(tmp_path):
    with pytest.raises(ConfigError) as err:
        at(tmp_path, 3, planning.KEEP_GLOBAL)
    assert str(err.value) == (
        "devices.logical_cpus=3: the run's global batch 32 cannot be split over 3 replicas. Resume on 2 or 4 "
        "replicas, or keep the per-replica batch (tracking.resize_keep=per_replica_batch).")
    assert at(tmp_path, 3, planning.KEEP_PER_REPLICA).global_batch_size == 48


def test_the_resize_travels_to_the_task_in_the_job_spec(tmp_path):
    resize = planning.Resize(at_epoch=2, from_replicas=2, from_global_batch=32, from_per_replica_batch=16,
                             from_learning_rate=0.2, keep=planning.KEEP_PER_REPLICA, lr_step_offset=-20,
                             warmup_start=40, warmup_steps=10, warmup_from_rate=0.2)
    plan = dataclasses.replace(at(tmp_path, 4, planning.KEEP_PER_REPLICA), resize=resize)
    job = JobDir(tmp_path / "job")
    JobSpec({"seed": 1}, plan, "sqlite:///x.db", str(tmp_path)).write(job)
    assert JobSpec.read(job).plan == plan


@pytest.mark.parametrize("overrides, steps", [
    ([], 640 // 64),  # no warmup in the schedule: one epoch at the new size
    (["schedule=cosine", "schedule.warmup_epochs=0.5"], 5),  # the schedule's own warmup, in new steps
    (["tracking.resize_warmup_steps=0"], 0),  # at once
    (["tracking.resize_warmup_steps=7"], 7),
])
def test_warmup_after_a_resize_is_stated_in_steps(tmp_path, overrides, steps):
    cfg = plain(*SIZE, "devices.logical_cpus=4", *overrides)
    plan = planning.at_size(cfg, planning.make_plan(cfg, tmp_path), 32, 16, planning.KEEP_PER_REPLICA,
                            "devices.logical_cpus", 4)
    assert resize._warmup_steps(cfg, plan) == steps


def test_a_negative_warmup_is_one_line(tmp_path):
    cfg = plain(*SIZE, "devices.logical_cpus=4", "tracking.resize_warmup_steps=-1")
    with pytest.raises(ConfigError) as err:
        resize._warmup_steps(cfg, planning.make_plan(cfg, tmp_path))
    assert str(err.value).startswith("tracking.resize_warmup_steps=-1: a number of optimizer steps must be 0 or more")
