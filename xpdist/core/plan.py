"""What a config means in numbers, worked out without TensorFlow.

The Hydra process uses the plan to reject bad input and to log params before any task
starts; the task process checks that TensorFlow agrees with it (replicas, devices).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional

from xpdist.core import datafiles
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.datafiles import resolve_path
from xpdist.core.errors import ConfigError

# Strategies that run one process; the others need a cluster.
SINGLE_PROCESS = ("default", "one_device", "mirrored", "central_storage", "tpu")
MULTI_WORKER = ("multi_worker_mirrored", "parameter_server")
# Size of the data sets whose size is not in the config.
FIXED_SIZES = {"digits": 1797, "mnist": 60000}

_DEVICE = re.compile(r"^(?:/job:\w+/replica:\d+/task:\d+)?/?(?:device:)?(cpu|gpu|tpu):(\d+)$", re.I)


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


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """GPUs visible to TensorFlow, counted without importing it (nvidia-smi)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if visible:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def parse_device(name: str) -> Optional[tuple]:
    """'/gpu:1', 'GPU:1' or a full device name -> ('gpu', 1); None if it is not one."""
    match = _DEVICE.match(name.strip())
    return (match.group(1).lower(), int(match.group(2))) if match else None


def local_devices(cfg) -> List[str]:
    """strategy.devices (one_device, mirrored, central_storage), else every GPU, else every logical CPU."""
    if cfg.strategy.get("devices"):
        return list(cfg.strategy.devices)
    gpus = gpu_count()
    if gpus:
        return [f"/gpu:{i}" for i in range(gpus)]
    return [f"/cpu:{i}" for i in range(max(1, cfg.devices.logical_cpus))]


def keras_flavour(cfg) -> str:
    """keras3 or legacy (tf-keras): auto picks tf-keras where Keras 3's Model.fit cannot train,
    or reports wrong metrics (under central_storage; the weights are right)."""
    if cfg.keras != "auto":
        return cfg.keras
    needs_legacy = cfg.trainer.name == "fit" and cfg.strategy.name in MULTI_WORKER + ("central_storage",)
    return "legacy" if needs_legacy else "keras3"


def num_workers(cfg) -> int:
    if cfg.strategy.name not in MULTI_WORKER or cfg.cluster.name == "local":
        return 1
    if cfg.cluster.name == "localhost":
        return cfg.cluster.workers
    return ClusterEnv.from_environ(cfg.cluster.name).num_workers


def replicas(cfg, devices: List[str], workers: int) -> int:
    name = cfg.strategy.name
    if name in ("mirrored", "central_storage"):
        return len(devices)
    if name == "multi_worker_mirrored":
        return workers * max(1, gpu_count())
    if name == "parameter_server":
        return max(1, gpu_count())
    return 1


def dataset_size(cfg, launch_dir: Path) -> int:
    ds = cfg.dataset
    if ds.name in FIXED_SIZES:
        return FIXED_SIZES[ds.name]
    if ds.name == "npz":
        import numpy as np

        with np.load(resolve_path(ds.path, launch_dir)) as arrays:
            return int(arrays["x"].shape[0])
    return int(ds.num_examples)


def split_sizes(cfg, launch_dir: Path, global_batch: int):
    """(training, validation) examples: counted for file sources, declared for custom.

    A custom source of unknown size (dataset.num_examples null) trains
    trainer.steps_per_epoch global batches per epoch (preflight requires it).
    """

    ds = cfg.dataset
    if ds.name == "tfrecord":
        def count(key, globs):
            files = datafiles.match_files(globs, key, launch_dir)
            return sum(datafiles.count_records(f, ds.compression, key) for f in files)

        n_val = count("dataset.validation_files", ds.validation_files) if ds.validation_files else 0
        return count("dataset.files", ds.files), n_val
    if ds.name == "image_folder":
        _, files = datafiles.image_files(resolve_path(ds.path, launch_dir))
        n_val = int(float(ds.validation_split) * len(files))  # as image_dataset_from_directory splits
        return len(files) - n_val, n_val
    if ds.name == "custom":
        n_train = ds.num_examples if ds.num_examples is not None else (cfg.trainer.steps_per_epoch or 0) * global_batch
        return int(n_train), int(ds.num_validation_examples)
    n = dataset_size(cfg, launch_dir)
    n_val = int(round(n * float(ds.validation_split)))
    return n - n_val, n_val


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
    steps = cfg.trainer.steps_per_epoch or n_train // global_batch
    fields: Dict[str, Any] = dict(
        strategy=cfg.strategy.name,
        cross_ops=cfg.cross_ops.name if cfg.strategy.name == "mirrored" else "none",
        communication=cfg.communication.name if cfg.strategy.name == "multi_worker_mirrored" else "none",
        cluster=cfg.cluster.name,
        keras=keras_flavour(cfg),
        devices=devices if cfg.strategy.name not in ("default",) else [],
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


def steps_per_execution(cfg, steps_per_epoch: int, num_replicas: int) -> int:
    """trainer.steps_per_execution, or for null the auto value (see schema.TrainerBase).

    The auto value divides the steps per epoch: Keras 3 runs whole executions, so an epoch
    of 20 steps at 8 per call would run 24. It stays 1 with several replicas: Keras 3's
    Model.fit with steps_per_execution > 1 failed under MirroredStrategy here ("You must
    feed a value for placeholder tensor ... while/cond/Placeholder_1").
    """
    if cfg.trainer.steps_per_execution is not None:
        return int(cfg.trainer.steps_per_execution)
    if cfg.model.name not in DENSE_ONLY or num_replicas > 1 or cfg.strategy.name not in ("default", "one_device"):
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
    return plan.strategy == "tpu"


def with_replicas(cfg, plan: Plan, num_replicas: int) -> Plan:
    """The plan redone for the replica count TensorFlow reports (strategy=tpu): global batch,
    learning rate, steps and the automatic steps_per_execution follow it."""
    if num_replicas == plan.num_replicas:
        return plan
    global_batch = plan.per_replica_batch_size * num_replicas
    steps = cfg.trainer.steps_per_epoch or plan.num_train // global_batch
    fields = dict(dataclasses.asdict(plan), num_replicas=num_replicas, global_batch_size=global_batch,
                  learning_rate=learning_rate(cfg, global_batch), steps_per_epoch=int(steps),
                  validation_steps=plan.num_val // global_batch)
    fields["steps_per_execution"] = steps_per_execution(cfg, int(steps), num_replicas)
    if not cfg.tracking.run_name:
        fields["run_name"] = run_name(cfg, fields)
    return Plan(**fields)
