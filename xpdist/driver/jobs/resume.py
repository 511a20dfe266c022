"""tracking.resume=RUN_ID: continue a FAILED or KILLED run from its last checkpoint.

    python -m xpdist <the same overrides> tracking.resume=<run id>

The run is reopened (RUNNING again), not copied: its params stay, its epochs continue
where its last checkpoint was, and an epoch it had already logged is not logged twice.
This is what a SLURM requeue (`sbatch --requeue`, with the run id in the job script) or a
Kubernetes restart of the driver runs. Checkpoints come from the run's job directory
(the xpdist.job_dir tag) when it is still there, else from the run's `checkpoints/`
artifacts, which are logged whatever the run's status.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from xpdist.core import data_sources
from xpdist.core.errors import ConfigError
from xpdist.core.jobdir import JobDir
from xpdist.core.plan import (KEEP_PER_REPLICA, SIZE_KEYS, SIZE_PARAMS, Plan, Resize, at_size, epoch_steps,
                              resolved_at_run_time)
from xpdist.tracking import store

# Params that may differ between a run and its resumption: where and how it is recorded.
_FREE = ("tracking.",)
_RESUMABLE = ("FAILED", "KILLED")
# Params that name a config group's option.
_OPTIONS = ("strategy", "cluster", "model", "dataset", "trainer")
# The run's size as of its last resize (JSON: the size params, and the plan's Resize).
SIZE_TAG = "xpdist.size"
# Each change of size, oldest first, separated by "; ".
RESIZED_TAG = "xpdist.resized"
# Why the resumed run may not see the global batches it would have seen (a streamed source).
DATA_ORDER_TAG = "xpdist.resized_data_order"


@dataclass
class Resumed:
    run_id: str
    # Epochs the run has already logged (the epoch_time_s metric's steps).
    logged_epochs: List[int] = field(default_factory=list)
    # The epoch of the checkpoint training continues from (0: none, from the start).
    from_epoch: int = 0
    # The plan it continues with: the one given, or at the run's batch sizes after a resize.
    plan: Optional[Plan] = None
    # Tags to set when the run is reopened (a resize: its size, the change, the data order).
    tags: Dict[str, str] = field(default_factory=dict)
    # num_replicas before a resize, logged as a metric at the epochs it trained (steps).
    replicas_before: Optional[int] = None


def prepare(uri: str, run_id: str, cfg, plan: Plan, params_of: Callable[[Plan], Dict[str, str]],
            job: JobDir) -> Resumed:
    """Checks that run_id can be resumed with this config and puts its checkpoints in job.

    Args:
        cfg: the plain config; plan: its plan; params_of: the params a run of a plan is created with.

    Raises:
        ConfigError: no such run, a run not FAILED or KILLED, a param that changed (other than
            its size), a global batch the new size cannot divide, or epochs logged but no
            checkpoint to continue from.
    """
    from mlflow.exceptions import MlflowException

    mlflow_client = store.client(uri)
    try:
        run = store.retry(mlflow_client.get_run, run_id)
    except MlflowException:
        raise ConfigError("tracking.resume", run_id, f"no such run in {uri}",
                          "Give the id of a FAILED or KILLED run of this store (the summary prints it).") from None
    if run.info.status not in _RESUMABLE:
        raise ConfigError("tracking.resume", run_id, f"the run is {run.info.status}; only a FAILED or KILLED run "
                          "continues", "Start a new run (drop tracking.resume).")
    before, params = run.data.params, params_of(plan)
    sized = not resolved_at_run_time(plan) and before.get("num_replicas", "").isdigit()
    resizable = SIZE_KEYS + SIZE_PARAMS if sized else ()
    # Config keys (dotted) before the summary params derived from them: the line names what the user typed.
    # An option changed (model=mlp) is named as the user typed it, before the keys it brings.
    for key in sorted(set(params) | set(before), key=lambda k: (k not in _OPTIONS, "." not in k, k)):
        if key.startswith(_FREE) or key in resizable or params.get(key) == before.get(key):
            continue
        raise ConfigError(key, params.get(key, "(unset)"), f"run {run_id} was trained with {key}="
                          f"{before.get(key, '(unset)')}; a resumed run keeps its params",
                          f"Resume with {key}={before.get(key, '(unset)')}, or start a new run.")
    logged = sorted({m.step for m in store.retry(mlflow_client.get_metric_history, run_id, "epoch_time_s")})
    from_epoch = _fetch_checkpoints(mlflow_client, run, job)
    if logged and not from_epoch:  # training would start over under epochs already logged
        if before.get("trainer.keep_checkpoints") == "0":
            raise ConfigError("trainer.keep_checkpoints", 0, f"run {run_id} kept no checkpoint to continue from",
                              "Start a new run (drop tracking.resume).")
        raise ConfigError("tracking.resume", run_id, f"the run logged {len(logged)} epochs but left no checkpoint",
                          "Start a new run (drop tracking.resume).")
    # An epoch logged after the last checkpoint is trained again but not logged again.
    resumed = Resumed(run_id, logged, from_epoch, plan)
    if sized:
        _resize(resumed, mlflow_client, run, cfg, params_of, before)
    return resumed


def _resize(resumed: Resumed, mlflow_client, run, cfg, params_of, before: Dict[str, str]) -> None:
    """Works out the plan at the run's (possibly new) size; a changed size is printed and tagged."""
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
    print(f"xpdist: resuming run {resumed.run_id} at epoch {at + 1} at another size: {change}", file=sys.stderr,
          flush=True)
    order = _data_order(cfg, plan, keep)
    if order:
        resumed.tags[DATA_ORDER_TAG] = order
        print(f"xpdist: note: {order}", file=sys.stderr, flush=True)


def _from_to(what: str, before, after) -> str:
    return f", {what} {before} kept" if before == after else f", {what} {before} -> {after}"


def _warmup_steps(cfg, plan: Plan) -> int:
    """tracking.resize_warmup_steps, else the schedule's own warmup at the new steps per epoch, else one epoch."""
    if cfg.tracking.resize_warmup_steps is not None:
        return int(cfg.tracking.resize_warmup_steps)
    epochs = float(cfg.schedule.get("warmup_epochs", 0.0) or 0.0)
    return max(1, int(round(epochs * plan.steps_per_epoch))) if epochs > 0 else plan.steps_per_epoch


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


def _latest_epoch(folder: Path) -> int:
    """The epoch of the newest checkpoint in folder (CheckpointManager's `checkpoint` index)."""
    index = folder / "checkpoint"
    if not index.exists():
        return 0
    for line in index.read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            name = line.split(":", 1)[1].strip().strip('"')
            return int(name.rsplit("-", 1)[1])
    return 0


def _fetch_checkpoints(mlflow_client, run, job: JobDir) -> int:
    """Copies the run's checkpoints into job.checkpoints; returns their latest epoch."""
    shutil.rmtree(job.checkpoints, ignore_errors=True)
    old = run.data.tags.get("xpdist.job_dir")
    source = Path(old) / "checkpoints" if old else None
    if source is not None and _latest_epoch(source):
        shutil.copytree(source, job.checkpoints)
        return _latest_epoch(job.checkpoints)
    names = [a.path for a in store.retry(mlflow_client.list_artifacts, run.info.run_id)]
    if "checkpoints" not in names:
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        local = store.retry(mlflow_client.download_artifacts, run.info.run_id, "checkpoints", scratch)
        shutil.copytree(local, job.checkpoints)
    return _latest_epoch(job.checkpoints)


def reopen(uri: str, resumed: Resumed, tags: Dict[str, str]) -> str:
    """Marks the run RUNNING again, without its old error, and tags it; returns its id."""
    keep = {k: v for k, v in tags.items() if k.startswith(("xpdist.heartbeat", "xpdist.job_dir"))}

    def tags_for(run) -> Dict[str, str]:
        count = int(run.data.tags.get("xpdist.resumed", "0")) + 1
        return {**keep, "xpdist.resumed": str(count), "xpdist.resumed_from_epoch": str(resumed.from_epoch),
                **resumed.tags}

    store.reopen(uri, resumed.run_id, tags_for)
    if resumed.replicas_before is not None:
        _log_replicas_before(uri, resumed)
    return resumed.run_id


def _log_replicas_before(uri: str, resumed: Resumed) -> None:
    """The metric num_replicas at the epochs trained before the resize that lack it (the task
    logs it at every epoch of a resized run), so the run's chart shows the change."""
    from mlflow.entities import Metric

    mlflow_client = store.client(uri)
    known = {m.step for m in store.retry(mlflow_client.get_metric_history, resumed.run_id, "num_replicas")}
    now_ms = int(time.time() * 1000)
    metrics = [Metric("num_replicas", float(resumed.replicas_before), now_ms, epoch)
               for epoch in range(1, resumed.from_epoch + 1) if epoch not in known]
    if metrics:
        store.retry(mlflow_client.log_batch, resumed.run_id, metrics=metrics)
