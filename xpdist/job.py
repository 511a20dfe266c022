"""One experiment, driven from the Hydra process: check, record, launch, close.

    preflight (no TensorFlow) -> MLflow run created RUNNING -> job files written
    -> task process(es) train -> run closed FINISHED / FAILED / KILLED -> summary

The run is created and closed here, not in the task, so it is closed even when a task dies
by SIGKILL or runs out of memory.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

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
    run_id = tracking.create_run(uri, plain.tracking.experiment, result.run_name, tracking.run_params(config, plan),
                                 _tags(plan, ctx), ctx.parent_run_id)
    result.run_id = run_id
    try:
        _write_job_files(config, plan, ctx, uri, run_id)
        tracking.log_artifacts(uri, run_id, [ctx.job_dir / "config.yaml", ctx.job_dir / "overrides.yaml"])
        from xpdist import cluster

        outcome = cluster.run(plain, plan, ctx.job_dir, launch.task_env(_task_env(plain, uri, run_id)))
        result.status, result.error = outcome.status, outcome.error
        result.metrics = outcome.metrics
    except launch.Interrupted as err:
        result.status, result.error = "KILLED", f"interrupted by {err}"
        tracking.terminate(uri, run_id, "KILLED", result.error)
        raise
    except Exception as err:  # a launcher bug must not leave the run RUNNING
        result.status, result.error = "FAILED", f"{type(err).__name__}: {err}"
        tracking.terminate(uri, run_id, "FAILED", result.error)
        raise
    result.wall_time_s = time.monotonic() - started
    tracking.set_tags(uri, run_id, {"xpdist.wall_time_s": f"{result.wall_time_s:.2f}"})
    tracking.terminate(uri, run_id, result.status, result.error)
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


def _write_job_files(config: Dict[str, Any], plan: Plan, ctx: JobContext, uri: str, run_id: str) -> None:
    ctx.job_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(config), ctx.job_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(ctx.overrides)), ctx.job_dir / "overrides.yaml")
    job = {"run_id": run_id, "tracking_uri": uri, "launch_dir": str(ctx.launch_dir),
           "plan": json.loads(plan.to_json())}
    (ctx.job_dir / JOB_FILE).write_text(json.dumps(job, indent=2))


def _task_env(cfg, uri: str, run_id: str) -> Dict[str, str]:
    return {"MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run_id, "PYTHONUNBUFFERED": "1"}


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


def format_error(err: BaseException, verbose: bool) -> str:
    text = f"xpdist: error: {err}"
    if verbose:
        text = "".join(traceback.format_exception(err)) + text
    return text
