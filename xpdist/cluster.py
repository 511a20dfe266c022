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


def describe_exit(code: int) -> str:
    if code < 0:
        return f"the task was killed by {signal.Signals(-code).name}"
    return f"the task exited with code {code}"


def outcome_from(job_dir: Path, code: int) -> Outcome:
    """Reads the chief's result.json; a task that died without one is FAILED with its exit."""
    from xpdist.job import read_result

    result = read_result(job_dir)
    if code == 0 and result.get("status") == "FINISHED":
        return Outcome("FINISHED", metrics=result.get("metrics", {}))
    error = result.get("error") or describe_exit(code)
    return Outcome(result.get("status", "FAILED") if result.get("status") != "FINISHED" else "FAILED",
                   error, result.get("metrics", {}))


def launch_local(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    code = launch.run_one(launch.task_command(job_dir), env)
    return outcome_from(job_dir, code)


def run(cfg, plan: Plan, job_dir: Path, env: Dict[str, str]) -> Outcome:
    """Runs the job's task process(es) to the end."""
    launchers = {"local": launch_local}
    if cfg.cluster.name not in launchers:
        return Outcome("FAILED", f"cluster={cfg.cluster.name} is not available yet; use cluster=local")
    return launchers[cfg.cluster.name](cfg, plan, job_dir, env)
