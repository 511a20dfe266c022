"""One experiment, driven from the Hydra process: check, record, launch, close.

    preflight (no TensorFlow) -> MLflow run created RUNNING -> job files written
    -> task process(es) train -> run closed FINISHED / FAILED / KILLED -> summary

The run is created and closed here, not in the task, so it is closed even when a task dies
by SIGKILL or runs out of memory.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from xpdist import launch, preflight, tracking
from xpdist.errors import ConfigError
from xpdist.plan import Plan

RESULT_FILE = "result.json"
JOB_FILE = "job.json"
SWEEP_FILE = "sweep.json"


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
        launch.Interrupted: after closing the run as KILLED.
    """
    started = time.monotonic()
    config = plain_config(cfg)
    plain = OmegaConf.create(config)
    result = JobResult(status="REJECTED", overrides=ctx.overrides)
    uri = ctx.tracking_uri or tracking.resolve_uri(plain.tracking.uri, ctx.launch_dir)
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
    from xpdist import cluster

    if not cluster.is_chief(plain):
        return _run_member(plain, config, plan, ctx, uri, result, started)
    _write_job_files(config, plan, ctx, uri)
    # The task starts now and imports TensorFlow while this process creates the MLflow run.
    recorder = _Recorder(uri, ctx, lambda: tracking.create_run(
        uri, plain.tracking.experiment, result.run_name, tracking.run_params(config, plan), _tags(plan, ctx),
        ctx.parent_run_id))
    recorder.start()
    try:
        outcome = cluster.run(plain, plan, ctx.job_dir, launch.task_env(_task_env(plain, uri)))
        result.run_id = recorder.finish()
        result.status, result.error = outcome.status, outcome.error
        result.metrics = outcome.metrics
        if outcome.restarts:
            tracking.set_tags(uri, result.run_id, {"xpdist.restarts": str(outcome.restarts)})
        if result.ok:
            _log_outputs(uri, result.run_id, ctx.job_dir)
    except launch.Interrupted as err:
        result.status, result.error = "KILLED", f"interrupted by {err}"
        result.run_id = recorder.finish()
        tracking.terminate(uri, result.run_id, "KILLED", result.error)
        raise
    except Exception as err:  # a launcher bug must not leave the run RUNNING
        result.status, result.error = "FAILED", f"{type(err).__name__}: {err}"
        if recorder.run_id:
            recorder.finish_quietly()
            tracking.terminate(uri, recorder.run_id, "FAILED", result.error)
        raise
    result.wall_time_s = time.monotonic() - started
    tracking.set_tags(uri, result.run_id, {"xpdist.wall_time_s": f"{result.wall_time_s:.2f}"})
    tracking.terminate(uri, result.run_id, result.status, result.error)
    return result


class _Recorder(threading.Thread):
    """The job's MLflow side, beside the task: creates the run, then relays the task's metrics.

    Creating the run (importing MLflow, opening the store) takes seconds; done here it
    overlaps the task's TensorFlow import instead of delaying the task's start.
    """

    def __init__(self, uri: str, ctx: JobContext, create: Callable[[], str]):
        super().__init__(name="xpdist-recorder", daemon=True)
        self._uri, self._ctx, self._create = uri, ctx, create
        self.run_id: Optional[str] = None
        self.error: Optional[BaseException] = None
        self.relay: Optional[tracking.MetricRelay] = None

    def run(self) -> None:
        try:
            self.run_id = self._create()
            job_file = self._ctx.job_dir / JOB_FILE
            job = json.loads(job_file.read_text())
            job["run_id"] = self.run_id
            staged = job_file.with_suffix(".tmp")
            staged.write_text(json.dumps(job, indent=2))
            os.replace(staged, job_file)  # the task may be reading it right now
            tracking.log_artifacts(self._uri, self.run_id, [self._ctx.job_dir / "config.yaml",
                                                            self._ctx.job_dir / "overrides.yaml"])
            self.relay = tracking.MetricRelay(self._uri, self.run_id, self._ctx.job_dir / tracking.METRICS_FILE)
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


def _log_outputs(uri: str, run_id: str, job_dir: Path) -> None:
    """The trained model and the checkpoints the chief task left in the job directory."""
    tracking.log_artifacts(uri, run_id, [job_dir / "model.keras"], "model")
    checkpoints = job_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        tracking.log_artifacts(uri, run_id, [checkpoints], "checkpoints")


def _run_member(plain, config: Dict[str, Any], plan: Plan, ctx: JobContext, uri: str, result: JobResult,
                started: float) -> JobResult:
    """A task that is not the chief (cluster=tf_config or slurm): it runs its part of the
    training in place and creates no MLflow run; the chief's process records the one run."""
    from xpdist import cluster

    result.run_id = None
    _write_job_files(config, plan, ctx, uri)
    outcome = cluster.run(plain, plan, ctx.job_dir, launch.task_env({"PYTHONUNBUFFERED": "1"}))
    result.status, result.error = outcome.status, outcome.error
    result.wall_time_s = time.monotonic() - started
    return result


def _tags(plan: Plan, ctx: JobContext) -> Dict[str, str]:
    tags = {"strategy": plan.strategy, "cross_ops": plan.cross_ops, "communication": plan.communication,
            "cluster": plan.cluster, "xpdist.overrides": " ".join(ctx.overrides) or "(none)",
            "mlflow.source.name": "python -m xpdist"}
    if ctx.job_num is not None:  # the job's index in its sweep, for the sweep's table
        tags["xpdist.job"] = str(ctx.job_num)
    commit = tracking.git_commit(ctx.launch_dir)
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["git_commit"] = commit
    return tags


def _record_rejected(config: Dict[str, Any], ctx: JobContext, uri: str, error: str) -> Optional[str]:
    params = tracking.flatten(config)
    name = f"{ctx.job_num}-rejected" if ctx.job_num is not None else "rejected"
    run_id = tracking.create_run(uri, config["tracking"]["experiment"], name, params,
                                 {"xpdist.overrides": " ".join(ctx.overrides) or "(none)",
                                  "xpdist.job": str(ctx.job_num)}, ctx.parent_run_id)
    tracking.terminate(uri, run_id, "FAILED", error)
    return run_id


def _write_job_files(config: Dict[str, Any], plan: Plan, ctx: JobContext, uri: str) -> None:
    ctx.job_dir.mkdir(parents=True, exist_ok=True)
    (ctx.job_dir / tracking.METRICS_FILE).unlink(missing_ok=True)  # a reused job dir: relay only this run's
    OmegaConf.save(OmegaConf.create(config), ctx.job_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(ctx.overrides)), ctx.job_dir / "overrides.yaml")
    job = {"run_id": None, "tracking_uri": uri, "launch_dir": str(ctx.launch_dir),
           "plan": json.loads(plan.to_json())}
    (ctx.job_dir / JOB_FILE).write_text(json.dumps(job, indent=2))


def _task_env(cfg, uri: str) -> Dict[str, str]:
    return {"MLFLOW_TRACKING_URI": uri, "PYTHONUNBUFFERED": "1"}


def read_result(job_dir: Path) -> Dict[str, Any]:
    """The result the chief task wrote, or {} if it wrote none (it died)."""
    path = job_dir / RESULT_FILE
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError:
        return {}


def print_summary(result: JobResult, uri: str, experiment_id: Optional[str] = None, out=sys.stdout) -> None:
    """The closing lines of a single run: status, final metrics, run id, how to look at it."""
    if result.run_id is None:  # a task that is not the chief: the chief reports the run
        line = f"xpdist: task {_task_name()} {result.status} in {result.wall_time_s:.1f} s (the chief records the run)"
        print(line + (f"\n  error: {result.error}" if result.error else ""), file=out, flush=True)
        return
    lines = [f"xpdist: run {result.run_name} {result.status} in {result.wall_time_s:.1f} s"]
    if result.metrics:
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items()))
        lines.append(f"  final: {shown}")
    if result.error:
        lines.append(f"  error: {result.error}")
    lines.append(f"  run id: {result.run_id}   tracking uri: {uri}")
    lines.append(f"  open the MLflow UI: {tracking.ui_command(uri)}")
    if experiment_id is not None:
        lines.append(f"  then: http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{result.run_id}")
    print("\n".join(lines), file=out, flush=True)


def _task_name() -> str:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    if task:
        return f"{task.get('type')}:{task.get('index')}"
    return f"slurm:{os.environ.get('SLURM_PROCID', '?')}"


def format_error(err: BaseException, verbose: bool) -> str:
    text = f"xpdist: error: {err}"
    if verbose:
        text = "".join(traceback.format_exception(err)) + text
    return text
