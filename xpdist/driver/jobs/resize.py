"""A run resumed at another size (tracking.resume with another devices.logical_cpus,
cluster.workers or cluster.ps): its plan at the new size, and how the run records the change.

A tf.train.Checkpoint holds each variable whole (a parameter server's shards as slices of
one), whatever the strategy that wrote it, so it restores at any replica count. The batch
and the learning rate follow tracking.resize_keep (core/plan.py at_size). MLflow params
cannot change, so the run's current size is kept in the tag xpdist.size, each change is told
in xpdist.resized, and the replica count is logged as the metric num_replicas at every epoch.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Dict, Optional

from xpdist.core import data_sources
from xpdist.core.plan import KEEP_PER_REPLICA, Plan, Resize, SIZE_KEYS, SIZE_PARAMS, at_size, epoch_steps
from xpdist.core.resize import warmup_steps
from xpdist.tracking import store

# The run's size as of its last resize (JSON: the size params, and the plan's Resize).
SIZE_TAG = "xpdist.size"
# Each change of size, oldest first, separated by "; ".
RESIZED_TAG = "xpdist.resized"
# Why the resumed run may not see the global batches it would have seen (a streamed source).
DATA_ORDER_TAG = "xpdist.resized_data_order"


def apply(resumed, mlflow_client, run, cfg, params_of, before: Dict[str, str], say: bool = True) -> None:
    """Works out the plan at the run's (possibly new) size; a changed size is printed and tagged.

    Args:
        resumed: the resume.Resumed being prepared; its plan, tags and replicas_before are set here.
        run: the MLflow run; before: its params; params_of: the params a run of a plan is created with.
        say: print the change (a SLURM task that is not the chief works it out silently).

    Raises:
        ConfigError: a global batch the new replica count cannot divide (core/plan.py at_size).
    """
    tagged = json.loads(run.data.tags.get(SIZE_TAG, "{}"))
    size = {**{k: before[k] for k in SIZE_KEYS + SIZE_PARAMS if k in before}, **tagged.get("params", {})}
    plan, params = resumed.plan, params_of(resumed.plan)
    changed = [k for k in SIZE_KEYS if params.get(k) != size.get(k)]
    old_replicas = int(size["num_replicas"])
    prior = Resize(**tagged["resize"]) if tagged.get("resize") else None
    if not changed and plan.num_replicas == old_replicas and prior is None:
        return  # the size it had: nothing to re-derive
    key = changed[0] if changed else "num_replicas"
    keep = str(cfg.tracking.resize_keep)
    old_global, old_per = int(size["global_batch_size"]), int(size["per_replica_batch_size"])
    plan = at_size(cfg, plan, old_global, old_per, keep, key, params.get(key, plan.num_replicas))
    if not changed and plan.num_replicas == old_replicas:
        resumed.plan = dataclasses.replace(plan, resize=prior)  # resumed again at the size of its last resize
        return
    at = resumed.from_epoch
    old_rate = float(size["learning_rate"])
    # The optimizer's step counter as the checkpoint holds it, and the offset that reads the
    # schedule at the step the run would have reached had it always had the new batch.
    old_steps = epoch_steps(cfg.trainer.steps_per_epoch, plan.num_train, old_global)
    iterations = at * old_steps - (prior.lr_step_offset if prior else 0)
    warmup = 0
    if keep == KEEP_PER_REPLICA and plan.learning_rate != old_rate:
        warmup = _warmup_steps(cfg, plan)
    resize = Resize(at_epoch=at, from_replicas=old_replicas, from_global_batch=old_global,
                    from_per_replica_batch=old_per, from_learning_rate=old_rate, keep=keep,
                    lr_step_offset=at * plan.steps_per_epoch - iterations, warmup_start=iterations,
                    warmup_steps=warmup, warmup_from_rate=_rate_at(mlflow_client, run, at, old_rate))
    resumed.plan = plan = dataclasses.replace(plan, resize=resize)
    resumed.replicas_before = old_replicas
    now = params_of(plan)
    change = (f"{old_replicas} -> {plan.num_replicas} replicas"
              + "".join(f", {k} {size.get(k)} -> {now.get(k)}" for k in changed)
              + _from_to("global batch", old_global, plan.global_batch_size)
              + _from_to("per-replica batch", old_per, plan.per_replica_batch_size)
              + _from_to("learning rate", f"{old_rate:g}", f"{plan.learning_rate:g}")
              + (f" (warmup over {warmup} steps)" if warmup else ""))
    history = run.data.tags.get(RESIZED_TAG)
    resumed.tags = {SIZE_TAG: json.dumps({"params": {k: now[k] for k in SIZE_KEYS + SIZE_PARAMS if k in now},
                                          "resize": dataclasses.asdict(resize)}),
                    RESIZED_TAG: "; ".join(filter(None, [history, f"from epoch {at + 1}: {change}"]))}
    if say:
        print(f"xpdist: resuming run {resumed.run_id} at epoch {at + 1} at another size: {change}",
              file=sys.stderr, flush=True)
    order = _data_order(cfg, plan, keep)
    if order:
        resumed.tags[DATA_ORDER_TAG] = order
        if say:
            print(f"xpdist: note: {order}", file=sys.stderr, flush=True)


def _from_to(what: str, before, after) -> str:
    return f", {what} {before} kept" if before == after else f", {what} {before} -> {after}"


def _warmup_steps(cfg, plan: Plan) -> int:
    """tracking.resize_warmup_steps, else the schedule's own warmup, else one epoch (core/resize.py)."""
    return warmup_steps(cfg, plan.steps_per_epoch)


def _rate_at(mlflow_client, run, epoch: int, default: float) -> float:
    """The learning rate of the last step of `epoch`, as the run logged it (else default)."""
    history = store.retry(mlflow_client.get_metric_history, run.info.run_id, "learning_rate")
    rates = [m.value for m in history if m.step == epoch]
    return rates[-1] if rates else default


def _data_order(cfg, plan: Plan, keep: str) -> Optional[str]:
    """Why the resumed run may not see the global batches it would have seen; None where it does.

    In-memory sources draw each pass over the data from a stateless seeded shuffle, and a
    checkpoint is an epoch's end: skipping the epochs done starts the next pass where it
    would have started, at any size. A streamed source's pipelines (files, a user's function)
    are sharded and batched per worker and replica, and it restarts its stream.
    """
    if not isinstance(data_sources.of(cfg), data_sources.InMemorySpec):
        return (f"dataset={cfg.dataset.name} streams its data: after the resize its batches are not the ones "
                "the run would have seen")
    if keep == KEEP_PER_REPLICA and cfg.trainer.steps_per_epoch:
        return ("trainer.steps_per_epoch with another global batch: the resumed epochs do not start where "
                "the run's passes over the data would have")
    return None


def log_replicas_before(uri: str, run_id: str, replicas: int, epochs: int) -> None:
    """The metric num_replicas at the epochs trained before the resize that lack it (the task
    logs it at every epoch of a resized run), so the run's chart shows the change."""
    from mlflow.entities import Metric

    mlflow_client = store.client(uri)
    known = {m.step for m in store.retry(mlflow_client.get_metric_history, run_id, "num_replicas")}
    now_ms = int(time.time() * 1000)
    metrics = [Metric("num_replicas", float(replicas), now_ms, epoch)
               for epoch in range(1, epochs + 1) if epoch not in known]
    if metrics:
        store.retry(mlflow_client.log_batch, run_id, metrics=metrics)


def record(uri: str, run_id: str, resized) -> None:
    """The tasks went on at another size during the job (processes/outcome.py Resized, cluster=ray
    with cluster.min_workers): tagged and charted on the run as a resume at another size is."""
    if not resized:
        return
    run = store.retry(store.client(uri).get_run, run_id)
    history = run.data.tags.get(RESIZED_TAG)
    store.set_tags(uri, run_id, {SIZE_TAG: json.dumps(resized[-1].size),
                                 RESIZED_TAG: "; ".join(filter(None, [history, *(r.change for r in resized)]))})
    for note in resized:
        log_replicas_before(uri, run_id, note.replicas_before, note.at_epoch)
