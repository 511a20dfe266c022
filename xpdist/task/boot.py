"""What a task process does before its job is known: tie its life to the driver's, import
TensorFlow, and, as the standby task (`python -m xpdist.task --standby`, see
xpdist/driver/standby.py), wait for its job.

Only the standard library and xpdist.core.taskenv are imported before TensorFlow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import List

from xpdist.core.taskenv import DRIVER_PID_ENV, LAUNCHED_AT_ENV, Handoff


def die_with_driver() -> None:
    """Asks the kernel to SIGKILL this task when its driver dies (Linux), and exits at once
    if the driver is already gone.

    Set here rather than between fork and exec in the driver: that is unsafe while the driver
    has threads. ctypes, because no kept library exposes PR_SET_PDEATHSIG without a build.
    """
    driver = os.environ.get(DRIVER_PID_ENV)
    if not driver:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != int(driver):  # the driver died before the request took effect
        os._exit(1)


def quiet_tensorflow() -> None:
    """TensorFlow's C++ log level for a run without `verbose`: read once, at its import."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")


def import_tensorflow(verbose: bool):
    """Imports TensorFlow, its C++ start-up chatter hidden unless verbose."""
    if verbose:
        import tensorflow as tf
    else:
        with stderr_silenced():
            import tensorflow as tf
    return tf


@contextlib.contextmanager
def stderr_silenced():
    """Points file descriptor 2 at /dev/null: absl logs before TF_CPP_MIN_LOG_LEVEL applies."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def standby() -> List[str]:
    """The standby task: imports TensorFlow, then waits for its job on stdin.

    Returns the task's arguments, with the job's working directory and environment in place
    (its own driver kept, and its own launch time unless the job sets one). Exits when stdin closes without a job: the driver
    had no use for it.
    """
    die_with_driver()
    quiet_tensorflow()
    import_tensorflow(verbose=False)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        os._exit(0)
    handoff = Handoff.from_line(line)
    own = {k: os.environ[k] for k in (LAUNCHED_AT_ENV, DRIVER_PID_ENV) if k in os.environ}
    os.environ.clear()
    os.environ.update({**own, **handoff.env})
    os.chdir(handoff.cwd)
    with open(os.devnull, "rb") as null:  # as a task started without input
        os.dup2(null.fileno(), 0)
    return handoff.argv
