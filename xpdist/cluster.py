"""Launchers, one per `cluster` option: how many task processes, where, with which TF_CONFIG."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

from xpdist import launch
from xpdist.plan import Plan


@dataclass
class Outcome:
    status: str  # FINISHED, FAILED or KILLED
    error: Optional[str] = None
    metrics: Dict[str, float] = field(default_factory=dict)
    # cluster=localhost: times the cluster was restarted after a task died.
    restarts: int = 0


def describe_exit(code: int) -> str:
    if code < 0:
        return f"the task was killed by {signal.Signals(-code).name}"
    return f"the task exited with code {code}"


def outcome_from(job_dir: Path, code: int, chief: bool = True) -> Outcome:
    """Reads the chief's result.json; a task that died without one is FAILED with its exit.

    A task that is not the chief writes no result.json: its exit code is its outcome.
    """
    from xpdist.job import read_result

    if not chief:
        return Outcome("FINISHED") if code == 0 else Outcome("FAILED", describe_exit(code))
    result = read_result(job_dir)
    if code == 0 and result.get("status") == "FINISHED":
        return Outcome("FINISHED", metrics=result.get("metrics", {}))
    error = result.get("error") or describe_exit(code)
    return Outcome(result.get("status", "FAILED") if result.get("status") != "FINISHED" else "FAILED",
                   error, result.get("metrics", {}))


def launch_local(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    code = launch.run_one(launch.task_command(job_dir), env)
    return outcome_from(job_dir, code)


def launch_localhost(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    from xpdist import localhost

    outcome, restarts = localhost.run(cfg, plan, job_dir, env)
    outcome.restarts = restarts
    return outcome


def launch_in_place(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    """cluster=tf_config or slurm: a cluster manager started this process as one task of
    the cluster; its task process runs here with the environment it was given."""
    code = launch.run_one(launch.task_command(job_dir), env)
    return outcome_from(job_dir, code, chief=is_chief(cfg))


def is_chief(cfg) -> bool:
    """Whether this process records the MLflow run: the chief (or coordinator) task only.

    Reads TF_CONFIG or SLURM_PROCID; no TensorFlow.
    """
    from xpdist.task import is_chief as task_is_chief

    return task_is_chief(cfg.cluster.name) if cfg.cluster.name in ("tf_config", "slurm") else True


def run(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    """Runs the job's task process(es) to the end."""
    launchers = {"local": launch_local, "localhost": launch_localhost, "tf_config": launch_in_place,
                 "slurm": launch_in_place}
    return launchers[cfg.cluster.name](cfg, plan, job_dir, env)
