"""Starting a task process, with nothing beyond the standard library imported: the standby
task (xpdist/driver/processes/standby.py) is started from here before Hydra is imported."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
import threading
import time
from typing import IO, Dict, Iterator, List, Optional, Sequence

from xpdist.core.protocol.taskenv import DRIVER_PID_ENV, LAUNCHED_AT_ENV


def task_command(*args: str) -> List[str]:
    return [sys.executable, "-m", "xpdist.task", *args]


def task_env(env: Dict[str, str]) -> Dict[str, str]:
    """env with what a task takes from its driver: its launch time and the driver's pid."""
    return {**env, LAUNCHED_AT_ENV: repr(time.time()), DRIVER_PID_ENV: str(os.getpid())}


def spawn(cmd: Sequence[str], env: Dict[str, str], log: Optional[IO] = None, stdin=None,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """Starts a task in a session (and process group) of its own; the task asks the kernel to
    kill it when this process dies (xpdist.task.boot.die_with_driver)."""
    env = task_env(env)
    return subprocess.Popen(list(cmd), env=env, stdin=stdin, stdout=log,
                            stderr=subprocess.STDOUT if log else None, start_new_session=True,
                            pass_fds=tuple(pass_fds))


# prctl(2) option: orphaned descendants are re-parented to this process rather than to init.
_PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """Inside, this process is a child subreaper: a descendant whose parent exits becomes its
    child. The standby forks each task through a process that exits at once (boot._fork_task),
    so the task becomes this process's child, to be waited for like one it started. Only for
    that moment, so that nothing else orphaned below this process (a daemon a library started)
    is left to it to reap. ctypes, as for PR_SET_PDEATHSIG: the standard library has no prctl.

    Raises:
        OSError: the kernel refused (not Linux).
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class Adopted:
    """A child of this process that it did not start with subprocess (a task the standby forked,
    handed over by adopting()): the part of subprocess.Popen's interface the engines use
    (pid, returncode, poll, wait), which Popen offers only for processes it started itself."""

    def __init__(self, pid: int, args: Sequence[str]):
        self.pid, self.args = pid, list(args)
        self.returncode: Optional[int] = None
        self._lock = threading.Lock()  # one waitpid at a time, as Popen's own

    def poll(self) -> Optional[int]:
        return self._reap(os.WNOHANG)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the process to end; raises subprocess.TimeoutExpired after `timeout` s.
        With a timeout it looks every few milliseconds, as Popen.wait does, so that a signal
        Python alone sees (_thread.interrupt_main) is handled meanwhile."""
        if timeout is None:
            code = self._reap(0)
            return self.returncode if code is None else code
        deadline, delay = time.monotonic() + timeout, 0.0005
        while self.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            delay = min(delay * 2, remaining, 0.05)
            time.sleep(delay)
        return self.returncode

    def _reap(self, flags: int) -> Optional[int]:
        # A look (WNOHANG) while another thread waits says "still running", as Popen.poll does.
        if not self._lock.acquire(blocking=not flags & os.WNOHANG):
            return self.returncode
        try:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, flags)
                except ChildProcessError:  # reaped elsewhere: its code is lost, as Popen says then
                    pid, status = self.pid, 0
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        finally:
            self._lock.release()

    def __repr__(self) -> str:
        return f"<Adopted pid={self.pid} returncode={self.returncode}>"
