"""How a job's task processes ended, as the engines report it to the job."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from xpdist.core.protocol.jobdir import EXIT_DISK_FULL, EXIT_RETRYABLE, JobDir, TaskResult
from xpdist.core.protocol.outcome import Status


@dataclass
class Resized:
    """The tasks went on at another size during the job (cluster=ray, cluster.min_workers): what
    the job records on the run, as a resume at another size does (jobs/resize.py)."""

    change: str  # "from epoch 4: 2 -> 1 replicas, ...", appended to the xpdist.resized tag
    size: Dict[str, Any]  # the xpdist.size tag: the size params now, and the plan's Resize
    replicas_before: int  # the metric num_replicas at the epochs trained before
    at_epoch: int  # the checkpoint's epoch: training continued at the next one


@dataclass
class Outcome:
    """How the tasks ended, as an engine's follow() returns it; the job makes its JobResult of it."""

    status: Status  # FINISHED, FAILED or KILLED
    error: Optional[str] = None
    # cluster=localhost and ray: times every task was started again after one died.
    restarts: int = 0
    # A restart may cure the failure (see may_retry).
    retryable: bool = False
    # Each time the tasks went on at another size, oldest first.
    resized: List[Resized] = field(default_factory=list)


def may_retry(code: int) -> bool:
    """Whether a task that ended with this exit code failed in a way a restart may cure:
    killed by a signal (lost, OOM-killed, preempted) or a network-type error (EXIT_RETRYABLE).
    Never a Python exception in user code, config or data, nor a full disk."""
    return code < 0 or code == EXIT_RETRYABLE


def describe_exit(code: int, job: JobDir = None) -> str:
    if code < 0:
        return f"the task was killed by {signal.Signals(-code).name}"
    if code == EXIT_DISK_FULL:
        where = f" {job.root}" if job is not None else ""
        return f"no space left on device for the job directory{where}"
    return f"the task exited with code {code}"


def outcome_from(job: JobDir, code: int, chief: bool = True) -> Outcome:
    """The chief's TaskResult; a task that died without one is FAILED with its exit.

    A task that is not the chief writes no result: its exit code is its outcome.
    """
    if not chief:
        if code == 0:
            return Outcome(Status.FINISHED)
        return Outcome(Status.FAILED, describe_exit(code, job), 0, may_retry(code))
    result = TaskResult.read(job)
    if code == 0 and result is not None and result.status == Status.FINISHED:
        return Outcome(Status.FINISHED)
    if code == EXIT_DISK_FULL:  # its result.json may be the one that did not fit
        return Outcome(Status.FAILED, describe_exit(code, job))
    if result is None or result.status == Status.FINISHED:
        return Outcome(Status.FAILED, describe_exit(code, job), 0, may_retry(code))
    return Outcome(Status(result.status), result.error or describe_exit(code, job), 0,
                   bool(result.retryable) or code < 0)
