"""One experiment, driven from the Hydra process: check, record, launch, close.

    preflight (no TensorFlow) -> MLflow run created RUNNING -> job files written
    -> task process(es) train -> run closed FINISHED / FAILED / KILLED -> summary

The run is created and closed here, not in the task, so it is closed even when a task dies
by SIGKILL or runs out of memory.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from xpdist.core import datafiles
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.errors import ConfigError
from xpdist.core.jobdir import JobDir, JobSpec
from xpdist.core.plan import Plan
from xpdist.driver import launchers, preflight
from xpdist.driver.launchers import process
from xpdist.tracking import store
from xpdist.tracking.params import flatten, run_params
from xpdist.tracking.relay import MetricRelay


@dataclass
class JobResult:
    """What one job ended with; the sweep summary is built from these."""

    status: str  # FINISHED, FAILED, KILLED, or REJECTED (bad input, no MLflow run)
    overrides: List[str] = field(default_factory=list)
    run_id: Optional[str] = None
    run_name: Optional[str] = None
    error: Optional[str] = None
    num_replicas: Optional[int] = None
    global_batch_size: Optional[int] = None
    metrics: Dict[str, float] = field(default_factory=dict)
    wall_time_s: float = 0.0
    # A task that is not the chief (cluster=tf_config or slurm): its name, e.g. worker:1.
    task_name: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == "FINISHED"


@dataclass
class JobContext:
    """Where a job runs and records: everything Hydra knows that the job needs."""

    launch_dir: Path
    job_dir: Path
    overrides: List[str]
    parent_run_id: Optional[str] = None
    tracking_uri: Optional[str] = None
    job_num: Optional[int] = None


def plain_config(cfg: DictConfig) -> Dict[str, Any]:
    """The resolved config as plain data (enums as names), without the hydra node."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def run(cfg: DictConfig, ctx: JobContext) -> JobResult:
    """Runs one experiment end to end; never raises for a failed training.

    Raises:
        process.Interrupted: after closing the run as KILLED.
    """
    started = time.monotonic()
    config = plain_config(cfg)
    plain = OmegaConf.create(config)
    result = JobResult(status="REJECTED", overrides=ctx.overrides)
    uri = ctx.tracking_uri or store.resolve_uri(plain.tracking.uri, ctx.launch_dir)
    try:
        plan = preflight.check(plain, ctx.launch_dir)
        preflight.check_tracking_server(uri)
    except ConfigError as err:
        result.error = str(err)
        if ctx.parent_run_id:  # in a sweep, a rejected job is a FAILED child run
            result.run_id = _record_rejected(config, ctx, uri, str(err))
            result.status = "FAILED"
        return result

    result.run_name = plan.run_name if ctx.job_num is None else f"{ctx.job_num}-{plan.run_name}"
    result.num_replicas, result.global_batch_size = plan.num_replicas, plan.global_batch_size
    job = JobDir(ctx.job_dir)
    JobSpec(config, plan, uri, str(ctx.launch_dir), list(ctx.overrides)).write(job)
    cluster_env = ClusterEnv.from_environ(plain.cluster.name)
    if not cluster_env.is_chief:
        return _run_member(plain, plan, job, cluster_env, result, started)
    # The task starts now and imports TensorFlow while this process creates the MLflow run.
    inputs = datafiles.describe(plain, plan, ctx.launch_dir)

    def create_run() -> str:
        run_id = store.create_run(uri, plain.tracking.experiment, result.run_name, run_params(config, plan),
                                  _tags(plan, ctx), ctx.parent_run_id)
        store.log_inputs(uri, run_id, inputs)
        return run_id

    recorder = _Recorder(uri, job, create_run)
    recorder.start()
    try:
        env = process.task_env({"MLFLOW_TRACKING_URI": uri, "PYTHONUNBUFFERED": "1"})
        outcome = launchers.run(plain, plan, job, env)
        result.run_id = recorder.finish()
        result.status, result.error = outcome.status, outcome.error
        result.metrics = recorder.final_metrics()
        if outcome.restarts:
            store.set_tags(uri, result.run_id, {"xpdist.restarts": str(outcome.restarts)})
        if result.ok:
            _log_outputs(uri, result.run_id, job)
    except process.Interrupted as err:
        result.status, result.error = "KILLED", f"interrupted by {err}"
        result.run_id = recorder.finish()
        store.terminate(uri, result.run_id, "KILLED", result.error)
        raise
    except Exception as err:  # a launcher bug must not leave the run RUNNING
        result.status, result.error = "FAILED", f"{type(err).__name__}: {err}"
        if recorder.run_id:
            recorder.finish_quietly()
            store.terminate(uri, recorder.run_id, "FAILED", result.error)
        raise
    result.wall_time_s = time.monotonic() - started
    store.set_tags(uri, result.run_id, {"xpdist.wall_time_s": f"{result.wall_time_s:.2f}"})
    store.terminate(uri, result.run_id, result.status, result.error)
    return result


class _Recorder(threading.Thread):
    """The job's MLflow side, beside the task: creates the run, then relays the task's metrics.

    Creating the run (importing MLflow, opening the store) takes seconds; done here it
    overlaps the task's TensorFlow import instead of delaying the task's start.
    """

    def __init__(self, uri: str, job: JobDir, create: Callable[[], str]):
        super().__init__(name="xpdist-recorder", daemon=True)
        self._uri, self._job, self._create = uri, job, create
        self.run_id: Optional[str] = None
        self.error: Optional[BaseException] = None
        self.relay: Optional[MetricRelay] = None

    def run(self) -> None:
        try:
            self.run_id = self._create()
            store.log_artifacts(self._uri, self.run_id, [self._job.config, self._job.overrides])
            self.relay = MetricRelay(self._uri, self.run_id, self._job.metrics)
            self.relay.start()
        except BaseException as err:  # re-raised in the main thread by finish()
            self.error = err

    def finish(self) -> str:
        """Waits for the run, logs the last metrics; returns the run id (raises what creating it raised)."""
        self.join()
        if self.error is not None:
            raise self.error
        self.relay.stop()
        return self.run_id

    def finish_quietly(self) -> None:
        try:
            self.finish()
        except Exception:
            pass

    def final_metrics(self) -> Dict[str, float]:
        """Each epoch metric's last value, and the run's summary figures."""
        latest = self.relay.latest if self.relay else {}
        return {k: v for k, v in latest.items() if not k.startswith("batch_")}


def _log_outputs(uri: str, run_id: str, job: JobDir) -> None:
    """The trained model and the checkpoints the chief task left in the job directory."""
    store.log_artifacts(uri, run_id, [job.model], "model")
    if job.checkpoints.is_dir() and any(job.checkpoints.iterdir()):
        store.log_artifacts(uri, run_id, [job.checkpoints], "checkpoints")


def _run_member(plain, plan: Plan, job: JobDir, cluster_env: ClusterEnv, result: JobResult,
                started: float) -> JobResult:
    """A task that is not the chief (cluster=tf_config or slurm): it runs its part of the
    training in place and creates no MLflow run; the chief's driver records the one run."""
    result.run_id = None
    result.task_name = cluster_env.task_name
    outcome = launchers.run(plain, plan, job, process.task_env({"PYTHONUNBUFFERED": "1"}))
    result.status, result.error = outcome.status, outcome.error
    result.wall_time_s = time.monotonic() - started
    return result


def _tags(plan: Plan, ctx: JobContext) -> Dict[str, str]:
    tags = {"strategy": plan.strategy, "cross_ops": plan.cross_ops, "communication": plan.communication,
            "cluster": plan.cluster, "xpdist.overrides": " ".join(ctx.overrides) or "(none)",
            "mlflow.source.name": "python -m xpdist"}
    if ctx.job_num is not None:  # the job's index in its sweep, for the sweep's table
        tags["xpdist.job"] = str(ctx.job_num)
    commit = store.git_commit(ctx.launch_dir)
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["git_commit"] = commit
    return tags


def _record_rejected(config: Dict[str, Any], ctx: JobContext, uri: str, error: str) -> Optional[str]:
    params = flatten(config)
    name = f"{ctx.job_num}-rejected" if ctx.job_num is not None else "rejected"
    run_id = store.create_run(uri, config["tracking"]["experiment"], name, params,
                              {"xpdist.overrides": " ".join(ctx.overrides) or "(none)",
                               "xpdist.job": str(ctx.job_num)}, ctx.parent_run_id)
    store.terminate(uri, run_id, "FAILED", error)
    return run_id


def print_summary(result: JobResult, uri: str, experiment_id: Optional[str] = None, out=sys.stdout) -> None:
    """The closing lines of a single run: status, final metrics, run id, how to look at it."""
    if result.run_id is None:  # a task that is not the chief: the chief reports the run
        line = (f"xpdist: task {result.task_name} {result.status} in {result.wall_time_s:.1f} s "
                "(the chief records the run)")
        print(line + (f"\n  error: {result.error}" if result.error else ""), file=out, flush=True)
        return
    lines = [f"xpdist: run {result.run_name} {result.status} in {result.wall_time_s:.1f} s"]
    if result.metrics:
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items()))
        lines.append(f"  final: {shown}")
    if result.error:
        lines.append(f"  error: {result.error}")
    lines.append(f"  run id: {result.run_id}   tracking uri: {uri}")
    lines.append(f"  open the MLflow UI: {store.ui_command(uri)}")
    if experiment_id is not None:
        lines.append(f"  then: http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{result.run_id}")
    print("\n".join(lines), file=out, flush=True)
