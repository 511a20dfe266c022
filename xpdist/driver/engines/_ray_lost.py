"""cluster=ray after a node is lost: what the driver does before the tasks start again.

cluster.min_workers: a multi_worker_mirrored job goes on with the workers left, at least
cluster.min_workers of them, instead of waiting for a replacement (shrink). The job's plan is
redone at the new worker count as a resume at another size does it (core/plan.py at_size: by
default the global batch is kept, each replica's batch re-derived), with a Resize whose epoch
is the chief's recovery checkpoint's, the one the tasks restore as after any restart. Only
job.json and config.yaml are rewritten: run.json and the metric file stay, since the MLflow
run goes on. The job records the change on the run (jobs/resize.py record) from the note
returned here.

cluster.checkpoint_dir with the chief lost: its checkpoints outlive it, but the metric lines
of its last epoch may not have come back (forget_unlogged).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from omegaconf import OmegaConf

from xpdist.core.errors import ConfigError
from xpdist.core.plan import KEEP_PER_REPLICA, SIZE_KEYS, SIZE_PARAMS, Resize, at_size, replicas
from xpdist.core.protocol.jobdir import JobDir, JobSpec, MetricFile, checkpoint_epoch
from xpdist.core.resize import warmup_steps
from xpdist.driver.processes.outcome import Resized
from xpdist.tracking.params import run_params


def check(cfg, needs) -> None:
    """cluster.min_workers: a multi_worker_mirrored job's, at most its workers, with restarts allowed.

    Raises:
        ConfigError: naming cluster.min_workers.
    """
    c = cfg.cluster
    if needs.coordinator:
        raise ConfigError("cluster.min_workers", c.min_workers, f"strategy={cfg.strategy.name}'s coordinator "
                          "goes on without a lost worker already", "Drop cluster.min_workers.")
    if c.min_workers > c.workers:
        raise ConfigError("cluster.min_workers", c.min_workers, f"above cluster.workers={c.workers}",
                          f"Use a number from 1 to {c.workers}.")
    if c.max_restarts < 1:
        raise ConfigError("cluster.min_workers", c.min_workers, "going on with the workers left is a restart, "
                          "and cluster.max_restarts=0 allows none", "Set cluster.max_restarts=1 or more.")


def shrink(cfg, job: JobDir, workers: int, checkpoints: Path) -> Resized:
    """Rewrites the job's plan and config for `workers` workers; returns what changed.

    Args:
        cfg: the job's config (its tracking.resize_keep and resize_warmup_steps are read).
        job: the driver's job directory.
        workers: the workers left.
        checkpoints: the chief's checkpoints, as the tasks will restore them (brought back into
            job, or on cluster.checkpoint_dir).

    Raises:
        ConfigError: a global batch the workers left cannot divide (core/plan.py at_size).
    """
    spec = JobSpec.read(job)
    old = spec.plan
    config = copy.deepcopy(spec.config)
    config["cluster"]["workers"] = workers
    sized = OmegaConf.create(config)
    keep = str(cfg.tracking.resize_keep)
    fewer = dataclasses.replace(old, num_workers=workers, num_replicas=replicas(sized, old.devices, workers))
    plan = at_size(sized, fewer, old.global_batch_size, old.per_replica_batch_size, keep, "cluster.workers", workers)
    at = checkpoint_epoch(checkpoints)
    # As jobs/resize.py apply: the optimizer's step counter the checkpoint holds, and the
    # offset that reads the schedule where the run would be had it always had this batch.
    prior = old.resize
    iterations = at * old.steps_per_epoch - (prior.lr_step_offset if prior else 0)
    warmup = 0
    if keep == KEEP_PER_REPLICA and plan.learning_rate != old.learning_rate:
        warmup = warmup_steps(sized, plan.steps_per_epoch)
    resize = Resize(at_epoch=at, from_replicas=old.num_replicas, from_global_batch=old.global_batch_size,
                    from_per_replica_batch=old.per_replica_batch_size, from_learning_rate=old.learning_rate,
                    keep=keep, lr_step_offset=at * plan.steps_per_epoch - iterations, warmup_start=iterations,
                    warmup_steps=warmup, warmup_from_rate=_rate_at(job, at, old.learning_rate))
    plan = dataclasses.replace(plan, resize=resize)
    dataclasses.replace(spec, config=config, plan=plan).rewrite(job)
    now = run_params(config, plan)
    change = (f"{old.num_replicas} -> {plan.num_replicas} replicas, cluster.workers {old.num_workers} -> {workers}"
              + _from_to("global batch", old.global_batch_size, plan.global_batch_size)
              + _from_to("per-replica batch", old.per_replica_batch_size, plan.per_replica_batch_size)
              + _from_to("learning rate", f"{old.learning_rate:g}", f"{plan.learning_rate:g}")
              + (f" (warmup over {warmup} steps)" if warmup else ""))
    size = {"params": {k: now[k] for k in SIZE_KEYS + SIZE_PARAMS if k in now}, "resize": dataclasses.asdict(resize)}
    return Resized(f"from epoch {at + 1}: {change}", size, old.num_replicas, at)


def _from_to(what: str, before, after) -> str:
    return f", {what} {before} kept" if before == after else f", {what} {before} -> {after}"


def _rate_at(job: JobDir, epoch: int, default: float) -> float:
    """The learning rate of the last step of `epoch`, as the chief logged it in the metric file (else default)."""
    rate = default
    if job.metrics.exists():
        for line in job.metrics.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line the chief was writing when its node went
                continue
            if entry.get("step") == epoch and "learning_rate" in entry.get("metrics", {}):
                rate = float(entry["metrics"]["learning_rate"])
    return rate


def forget_unlogged(checkpoints: Path, metrics: Path) -> None:
    """Points the checkpoint index at the newest checkpoint of an epoch whose metrics came back.

    The chief saves a checkpoint right after writing its epoch's metric line; the driver reads
    that line at its next poll. A chief whose node is lost in between leaves, on
    cluster.checkpoint_dir, a checkpoint of an epoch MLflow never received: restored, that
    epoch would be skipped and missing from the run. Redone, it is logged.
    """
    index = checkpoints / "checkpoint"
    if not index.exists():
        return
    logged = max(MetricFile(metrics).steps_with("epoch_time_s"), default=0) if metrics.exists() else 0
    kept = [line.split(":", 1)[1].strip() for line in index.read_text().splitlines()
            if line.startswith("all_model_checkpoint_paths:")]
    kept = [name for name in kept if int(name.strip('"').rsplit("-", 1)[1]) <= logged]
    if checkpoint_epoch(checkpoints) <= logged:
        return
    if not kept:
        index.unlink()  # no epoch of it was logged: the tasks start over
        return
    lines = [f"model_checkpoint_path: {kept[-1]}"] + [f"all_model_checkpoint_paths: {name}" for name in kept]
    index.write_text("\n".join(lines) + "\n")
