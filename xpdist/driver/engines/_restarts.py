"""The restart loop every engine that restarts its tasks follows them with (localhost, ray).

All of a job's tasks start together, and all start again when one dies in a way a restart may
cure (outcome.may_retry: a signal, a network-type error), while cluster.max_restarts allows
and no Ctrl-C came: a multi-worker collective or a parameter-server cluster cannot take one
new member alone. The restarted tasks resume from the chief's checkpoints. What differs per
engine (how tasks start, are watched, stopped, and how their files come back) is handed in.
"""

from __future__ import annotations

from typing import Callable, Optional

from xpdist.core.protocol.jobdir import JobDir
from xpdist.core.protocol.outcome import Status
from xpdist.driver.processes import process
from xpdist.driver.processes.localhost import TaskFailed
from xpdist.driver.processes.outcome import Outcome, outcome_from


class Restarting:
    """Mixed into an engine (before Engine) whose follow() runs this loop: its tasks may start
    again in the same job directory, so Model.fit backs up every epoch, only when
    cluster.max_restarts allows a restart (Engine.restarts_tasks)."""

    @classmethod
    def restarts_tasks(cls, cfg) -> bool:
        return cfg.cluster.max_restarts > 0


def follow(job: JobDir, chief: str, most: int, what: str, *, start: Callable[[int], None],
           watch: Callable[[], int], ended: Callable[[Optional[int]], None], restart: Callable[[str], None],
           gave_up: Callable[[], None] = lambda: None) -> Outcome:
    """Starts the tasks, follows them to the chief's outcome, restarting them all as allowed.

    Args:
        job: the job directory, where the chief's result is read.
        chief: the chief's task name (e.g. worker:0), for the messages.
        most: cluster.max_restarts.
        what: what starts again, for the message (e.g. "the cluster").
        start: starts every task; given the attempt, 1 for the first start. It may raise
            TaskFailed (a task that could not be placed), as watch does.
        watch: waits for the chief's exit code; raises TaskFailed when another task dies first.
        ended: called once the tasks' watch is over, with the chief's exit code, or None when a
            task died (TaskFailed): the tasks left end or are stopped, and the files the
            chief's outcome is read from are in the job directory.
        restart: called before the tasks start again, with the message that says why.
        gave_up: called when a task died and the loop restarts no more.

    Returns:
        The chief's outcome, with the number of restarts; FAILED errors name the chief.
    """
    restarts = 0
    while True:
        try:
            start(restarts + 1)
            code = watch()
        except TaskFailed as failure:
            ended(None)
            if restarts >= most or not failure.retryable or process.aborted():
                gave_up()
                return Outcome(Status.FAILED, str(failure), restarts)
            restarts += 1
            restart(f"{failure}; restarting {what} ({restarts}/{most})")
            continue
        ended(code)
        outcome = outcome_from(job, code)
        failed = outcome.status == Status.FAILED
        if failed and restarts < most and code != 0 and outcome.retryable and not process.aborted():
            restarts += 1
            restart(f"{chief} failed: {outcome.error}; restarting {what} ({restarts}/{most})")
            continue
        if failed and outcome.error:
            outcome.error = f"{chief} failed: {outcome.error}"
        outcome.restarts = restarts
        return outcome
