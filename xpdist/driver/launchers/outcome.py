"""How a job's task processes ended, as the launchers report it to the job."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Optional

from xpdist.core.jobdir import JobDir, TaskResult


@dataclass
class Outcome:
    status: str  # FINISHED, FAILED or KILLED
    error: Optional[str] = None
    # cluster=localhost: times the cluster was restarted after a task died.
    restarts: int = 0


def describe_exit(code: int) -> str:
    if code < 0:
        return f"the task was killed by {signal.Signals(-code).name}"
    return f"the task exited with code {code}"


def outcome_from(job: JobDir, code: int, chief: bool = True) -> Outcome:
    """The chief's TaskResult; a task that died without one is FAILED with its exit.

    A task that is not the chief writes no result: its exit code is its outcome.
    """
    if not chief:
        return Outcome("FINISHED") if code == 0 else Outcome("FAILED", describe_exit(code))
    result = TaskResult.read(job)
    if code == 0 and result is not None and result.status == "FINISHED":
        return Outcome("FINISHED")
    if result is None or result.status == "FINISHED":
        return Outcome("FAILED", describe_exit(code))
    return Outcome(result.status, result.error or describe_exit(code))
