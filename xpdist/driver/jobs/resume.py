"""tracking.resume=RUN_ID: continue a FAILED or KILLED run from its last checkpoint.

    python -m xpdist <the same overrides> tracking.resume=<run id>

The run is reopened (RUNNING again), not copied: its params stay, its epochs continue
where its last checkpoint was, and an epoch it had already logged is not logged twice.
This is what a SLURM requeue (`sbatch --requeue`, with the run id in the job script) or a
Kubernetes restart of the driver runs. Checkpoints come from the run's job directory
(the xpdist.job_dir tag) when it is still there, else from the run's `checkpoints/`
artifacts, which are logged whatever the run's status.

Only the size keys may change (core/plan.py SIZE_KEYS: devices.logical_cpus, cluster.workers,
cluster.ps, strategy.devices): the run then continues at the new size (resize.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from xpdist.core.errors import ConfigError
from xpdist.core.plan import Plan, SIZE_KEYS, SIZE_PARAMS, resolved_at_run_time
from xpdist.core.protocol.jobdir import JobDir, checkpoint_epoch
from xpdist.core.protocol.outcome import Status
from xpdist.driver.jobs import resize
from xpdist.tracking import store

# Params that may differ between a run and its resumption: where and how it is recorded.
_FREE = ("tracking.",)
_RESUMABLE = (Status.FAILED, Status.KILLED)
# Params that name a config group's option.
_OPTIONS = ("strategy", "cluster", "model", "dataset", "trainer")


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
    from_epoch = fetch_checkpoints(mlflow_client, run, job)
    if logged and not from_epoch:  # training would start over under epochs already logged
        if before.get("trainer.keep_checkpoints") == "0":
            raise ConfigError("trainer.keep_checkpoints", 0, f"run {run_id} kept no checkpoint to continue from",
                              "Start a new run (drop tracking.resume).")
        raise ConfigError("tracking.resume", run_id, f"the run logged {len(logged)} epochs but left no checkpoint",
                          "Start a new run (drop tracking.resume).")
    # An epoch logged after the last checkpoint is trained again but not logged again.
    # The summary line names the run as MLflow does, not as this config would name a new one.
    resumed = Resumed(run_id, logged, from_epoch, dataclasses.replace(plan, run_name=run.info.run_name))
    if sized:
        resize.apply(resumed, mlflow_client, run, cfg, params_of, before)
    return resumed


def fetch_checkpoints(mlflow_client, run, job: JobDir) -> int:
    """Copies the run's checkpoints into job.checkpoints; returns their latest epoch."""
    shutil.rmtree(job.checkpoints, ignore_errors=True)
    old = run.data.tags.get("xpdist.job_dir")
    source = Path(old) / "checkpoints" if old else None
    if source is not None and checkpoint_epoch(source):
        shutil.copytree(source, job.checkpoints)
        return checkpoint_epoch(job.checkpoints)
    names = [a.path for a in store.retry(mlflow_client.list_artifacts, run.info.run_id)]
    if "checkpoints" not in names:
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        local = store.retry(mlflow_client.download_artifacts, run.info.run_id, "checkpoints", scratch)
        shutil.copytree(local, job.checkpoints)
    return checkpoint_epoch(job.checkpoints)


def reopen(uri: str, resumed: Resumed, tags: Dict[str, str]) -> str:
    """Marks the run RUNNING again, without its old error, and tags it; returns its id."""
    keep = {k: v for k, v in tags.items() if k.startswith(("xpdist.heartbeat", "xpdist.job_dir"))}

    def tags_for(run) -> Dict[str, str]:
        count = int(run.data.tags.get("xpdist.resumed", "0")) + 1
        return {**keep, "xpdist.resumed": str(count), "xpdist.resumed_from_epoch": str(resumed.from_epoch),
                **resumed.tags}

    store.reopen(uri, resumed.run_id, tags_for)
    if resumed.replicas_before is not None:
        resize.log_replicas_before(uri, resumed.run_id, resumed.replicas_before, resumed.from_epoch)
    return resumed.run_id

