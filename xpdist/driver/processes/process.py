"""Task processes: start them, forward signals, end every one of them.

The driver never runs TensorFlow; it starts `python -m xpdist.task <job dir>` in a fresh
process per job, so logical devices and collective ops are configured once per process, as
TensorFlow requires. Each task runs in a session (and process group) of its own, so that a
signal reaches everything it started; the task itself asks the kernel to kill it when its
driver dies (xpdist.task.boot.die_with_driver), since nothing may run between fork and exec
while the driver has threads (MLflow's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Dict, Iterator, List, Optional, Sequence

from xpdist.driver.processes import spawn

# Seconds a task gets to stop after SIGINT/SIGTERM before it is killed.
GRACE_S = 15.0


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the Hydra process."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turns SIGINT and SIGTERM into Interrupted inside the block."""
    def handler(signum, _frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred() -> Iterator[List[int]]:
    """Inside the block SIGINT and SIGTERM are noted, not raised: cleanup (stopping tasks,
    closing the run) runs to its end even when Ctrl-C is pressed again. Yields the list of
    signals received. Outside the main thread (where handlers cannot be set) it does nothing.
    """
    received: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# Every task process started and not yet reaped, for abort_tasks().
_started: "weakref.WeakSet[subprocess.Popen]" = weakref.WeakSet()


class _Abort:
    requested = False


def abort_tasks(abort: bool = True) -> None:
    """Kills every task process of this driver (from any thread) and forbids restarts:
    the job cannot go on (its MLflow run could not be set up). abort_tasks(False), at the
    start of a job, allows them again."""
    _Abort.requested = abort
    if not abort:
        return
    for proc in list(_started):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def aborted() -> bool:
    return _Abort.requested


def task_command(job_dir: Path, extra: Sequence[str] = ()) -> List[str]:
    return spawn.task_command(str(job_dir), *extra)


def start(cmd: Sequence[str], env: Dict[str, str], log: Optional[IO] = None) -> subprocess.Popen:
    """Starts a task in its own process group, killed if this process dies."""
    return adopt(spawn.spawn(cmd, env, log))


def adopt(proc: subprocess.Popen) -> subprocess.Popen:
    """Counts a task started elsewhere (the standby task) among this driver's tasks."""
    _started.add(proc)
    return proc


def stop(procs: Sequence[subprocess.Popen], first: int = signal.SIGTERM, grace_s: float = GRACE_S) -> None:
    """Signals every live process group, waits up to grace_s, then SIGKILLs what is left.

    A SIGINT or SIGTERM while it waits (a second Ctrl-C) cuts the grace short: SIGKILL at once.
    """
    with signals_deferred() as again:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, first)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            while not again and proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
        _kill_groups(procs)


def _kill_groups(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: anything the task started too
        proc.wait()


def exit_code(proc: subprocess.Popen) -> int:
    """proc.wait(), in waits that return to Python every few milliseconds (Popen's own loop with
    a timeout), so that a signal Python alone sees is handled while the task runs: Ray cancels a
    running task (a sweep's job under hydra/launcher=ray) with _thread.interrupt_main, which no
    blocking waitpid returns for."""
    while True:
        try:
            return proc.wait(timeout=3600)
        except subprocess.TimeoutExpired:
            continue


def task_env(overrides: Dict[str, str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(overrides)
    return env
