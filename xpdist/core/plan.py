"""What a config means in numbers, worked out without TensorFlow.

The Hydra process uses the plan to reject bad input and to log params before any task
starts; the task process checks that TensorFlow agrees with it (replicas, devices).
"""

from __future__ import annotations

import dataclasses
import math
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional

from xpdist.core import data_sources, strategies
from xpdist.core.clusterenv import ClusterEnv
# Re-exported: preflight and the task resolve data paths as plan.resolve_path
from xpdist.core.datafiles import resolve_path  # noqa: F401
# Re-exported: they lived here, and tests still reach them as plan.gpu_count (its cache_clear)
from xpdist.core.devices import gpu_count, local_devices, parse_device  # noqa: F401
from xpdist.core.errors import ConfigError
# Re-exported: the plan's record of a resize, and what it keeps
from xpdist.core.resize import KEEP_GLOBAL, KEEP_PER_REPLICA, Resize  # noqa: F401


@dataclasses.dataclass(frozen=True)
class Plan:
    strategy: str
    cross_ops: str
    communication: str
    cluster: str
    keras: str
    devices: List[str]
    num_workers: int
    num_replicas: int
    per_replica_batch_size: int
    global_batch_size: int
    learning_rate: float
    num_examples: int
    num_train: int
    num_val: int
    steps_per_epoch: int
    validation_steps: int
    run_name: str
    # Training steps per tf.function call (trainer.steps_per_execution, or its auto value).
    steps_per_execution: int = 1
    # A run continued at another size (tracking.resume), else None.
    resize: Optional[Resize] = None

    def __post_init__(self):
        if isinstance(self.resize, dict):  # read back from job.json or resolved.json
            object.__setattr__(self, "resize", Resize(**self.resize))


def keras_flavour(cfg) -> str:
    """keras3 or legacy (tf-keras): keras=auto asks the strategy which one its trainer needs
    (tf-keras where Keras 3's Model.fit cannot train, or reports wrong metrics)."""
    if cfg.keras != "auto":
        return cfg.keras
    return strategies.of(cfg).keras_flavour(cfg.trainer.name)


def num_workers(cfg) -> int:
    """Worker processes: as many as an engine that starts them is told (its `workers` key), else
    as many as the cluster that started this process says (ClusterEnv; 1 for one process)."""
    if not strategies.of(cfg).needs.multi_process:
        return 1
    if "workers" in cfg.cluster:
        return cfg.cluster.workers
    return ClusterEnv.from_environ(cfg.cluster.name).num_workers


def replicas(cfg, devices: List[str], workers: int) -> int:
    return strategies.of(cfg).replicas(cfg, devices, workers)


def split_sizes(cfg, launch_dir: Path, global_batch: int):
    """(training, validation) examples of one epoch, as the data source counts or declares them."""
    return data_sources.of(cfg).split_sizes(cfg, launch_dir, global_batch)


def learning_rate(cfg, global_batch: int) -> float:
    opt = cfg.optimizer
    base = float(opt.learning_rate)
    reference = opt.reference_batch_size or cfg.dataset.per_replica_batch_size
    if opt.lr_scaling == "linear":
        return base * global_batch / reference
    if opt.lr_scaling == "sqrt":
        return base * math.sqrt(global_batch / reference)
    if opt.lr_scaling == "table":
        table = {int(k): float(v) for k, v in opt.lr_table.items()}
        if global_batch not in table:
            raise ConfigError("optimizer.lr_table", sorted(table), f"no learning rate for global batch {global_batch}",
                              f"Add '++optimizer.lr_table={{{global_batch}: <rate>}}', or use another "
                              "optimizer.lr_scaling.")
        return table[global_batch]
    return base


# The options conf/config.yaml picks when the command line does not (tests check they agree):
# a run name mentions these groups only where the run picked another option.
DEFAULT_OPTIONS = {"trainer": "fit", "model": "linear", "dataset": "synthetic_regression", "optimizer": "sgd"}


def run_name(cfg, plan_fields: Dict[str, Any]) -> str:
    """tracking.run_name, else what sets the run apart: strategy, its cross-device ops or
    communication, replicas, then each of trainer, model, dataset and optimizer that is not
    the default (`default-1r`, `mirrored-auto-2r-ctl-cnn-digits-adam`)."""
    if cfg.tracking.run_name:
        return cfg.tracking.run_name
    parts = [cfg.strategy.name]
    if plan_fields["cross_ops"] != "none":
        parts.append(plan_fields["cross_ops"])
    if plan_fields["communication"] != "none":
        parts.append(plan_fields["communication"])
    parts.append(f"{plan_fields['num_replicas']}r")
    parts += [cfg[group].name for group, default in DEFAULT_OPTIONS.items() if cfg[group].name != default]
    return "-".join(parts)


def make_plan(cfg, launch_dir: Path) -> Plan:
    """Works out the plan of a plain (enum-free) config. Call preflight.check first."""
    devices = local_devices(cfg)
    workers = num_workers(cfg)
    n_replicas = replicas(cfg, devices, workers)
    per_replica = int(cfg.dataset.per_replica_batch_size)
    global_batch = per_replica * n_replicas
    n_train, n_val = split_sizes(cfg, launch_dir, global_batch)
    n = n_train + n_val
    steps = epoch_steps(cfg.trainer.steps_per_epoch, n_train, global_batch)
    spec = strategies.of(cfg)
    fields: Dict[str, Any] = dict(
        strategy=spec.name,
        # A tuning group the strategy does not use is "none": it changed nothing.
        **{group: cfg[group].name if group in spec.applies_to else "none" for group in strategies.TUNING_GROUPS},
        cluster=cfg.cluster.name,
        keras=keras_flavour(cfg),
        devices=devices if spec.uses_devices else [],
        num_workers=workers,
        num_replicas=n_replicas,
        per_replica_batch_size=per_replica,
        global_batch_size=global_batch,
        learning_rate=learning_rate(cfg, global_batch),
        num_examples=n,
        num_train=n_train,
        num_val=n_val,
        steps_per_epoch=int(steps),
        validation_steps=n_val // global_batch,
    )
    auto_spe = steps_per_execution(cfg, int(steps), n_replicas)
    return Plan(run_name=run_name(cfg, fields), steps_per_execution=auto_spe, **fields)


# Models whose training step is a few small matrix products: per-call overhead dominates.
DENSE_ONLY = ("linear", "mlp")
# Upper bound of the automatic steps_per_execution.
MAX_AUTO_STEPS_PER_EXECUTION = 32


def epoch_steps(steps_per_epoch, num_train: int, global_batch: int) -> int:
    """Training steps of an epoch: trainer.steps_per_epoch where set, else the training split's
    whole global batches (the advisor's probes count theirs the same way)."""
    return int(steps_per_epoch or num_train // global_batch)


def steps_per_execution(cfg, steps_per_epoch: int, num_replicas: int) -> int:
    """trainer.steps_per_execution, or for null the auto value (see schema.optim.TrainerBase).

    The auto value divides the steps per epoch: Keras 3 runs whole executions, so an epoch
    of 20 steps at 8 per call would run 24. It stays 1 with several replicas: Keras 3's
    Model.fit with steps_per_execution > 1 failed under MirroredStrategy here ("You must
    feed a value for placeholder tensor ... while/cond/Placeholder_1").
    """
    if cfg.trainer.steps_per_execution is not None:
        return int(cfg.trainer.steps_per_execution)
    if cfg.model.name not in DENSE_ONLY or num_replicas > 1 or not strategies.of(cfg).auto_steps_per_execution:
        return 1
    limit = min(MAX_AUTO_STEPS_PER_EXECUTION, max(1, steps_per_epoch))
    return max(d for d in range(1, limit + 1) if steps_per_epoch % d == 0)


def tf_version() -> str:
    try:
        return metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        return "none"


# Plan fields that only TensorFlow knows for sure where the replica count is decided at run
# time (strategy=tpu: the cores of the TPU system it connects to). The run logs them once
# the task has reported them (JobDir.resolved), never a guess.
RESOLVED_BY_TASK = ("num_replicas", "global_batch_size", "learning_rate")


def resolved_at_run_time(plan: Plan) -> bool:
    """Whether the replica count (and what follows from it) is only known in the task."""
    return strategies.get(plan.strategy).replicas_at_run_time


def with_replicas(cfg, plan: Plan, num_replicas: int) -> Plan:
    """The plan redone for the replica count TensorFlow reports (strategy=tpu): global batch,
    learning rate, steps and the automatic steps_per_execution follow it."""
    if num_replicas == plan.num_replicas:
        return plan
    global_batch = plan.per_replica_batch_size * num_replicas
    steps = epoch_steps(cfg.trainer.steps_per_epoch, plan.num_train, global_batch)
    fields = dict(dataclasses.asdict(plan), num_replicas=num_replicas, global_batch_size=global_batch,
                  learning_rate=learning_rate(cfg, global_batch), steps_per_epoch=int(steps),
                  validation_steps=plan.num_val // global_batch)
    fields["steps_per_execution"] = steps_per_execution(cfg, int(steps), num_replicas)
    if not cfg.tracking.run_name:
        fields["run_name"] = run_name(cfg, fields)
    return Plan(**fields)


# Config keys that say how big a run is: a resumed run may change them (tracking.resume).
SIZE_KEYS = ("devices.logical_cpus", "cluster.workers", "cluster.ps", "strategy.devices")
# Params that follow from the size: the plan derives them again for a run resumed at another size.
SIZE_PARAMS = ("num_replicas", "global_batch_size", "per_replica_batch_size", "learning_rate", "devices",
               "steps_per_execution")


def at_size(cfg, plan: Plan, global_batch: int, per_replica_batch: int, keep: str, key: str, received) -> Plan:
    """The plan of a run that trained with (global_batch, per_replica_batch), now at the replica
    count of `plan`: by default the global batch is kept and the per-replica batch re-derived,
    so that the run trains on the same global batches with the same learning rate; with
    keep=per_replica_batch the global batch follows the replicas and the learning rate
    follows it by optimizer.lr_scaling.

    Args:
        key, received: the size key that changed and its value, named by the error.

    Raises:
        ConfigError: a global batch the replica count cannot divide, with the counts that can.
    """
    n = plan.num_replicas
    if keep == KEEP_PER_REPLICA:
        per, glob = per_replica_batch, per_replica_batch * n
    else:
        if global_batch % n:
            works = [d for d in range(1, global_batch + 1) if global_batch % d == 0]
            near = sorted(works, key=lambda d: (abs(d - n), d))[:2]
            raise ConfigError(key, received, f"the run's global batch {global_batch} cannot be split over {n} "
                              f"replicas", f"Resume on {' or '.join(map(str, sorted(near)))} replicas, or keep "
                              f"the per-replica batch (tracking.resize_keep=per_replica_batch).")
        per, glob = global_batch // n, global_batch
    steps = epoch_steps(cfg.trainer.steps_per_epoch, plan.num_train, glob)
    return dataclasses.replace(plan, per_replica_batch_size=per, global_batch_size=glob,
                               learning_rate=learning_rate(cfg, glob), steps_per_epoch=steps,
                               validation_steps=plan.num_val // glob,
                               steps_per_execution=steps_per_execution(cfg, steps, n))
