"""A task failure told in one line: what went wrong, and where the whole traceback is.

TensorFlow and Keras put their cause a few lines down: an InvalidArgumentError reads
`Graph execution error:`, then `Detected at node ...` and the Python frames that defined the
node, then the cause; a Keras layer error reads `Exception encountered when calling X.call().`,
then the cause in terminal bold. The first line of such a message says nothing, so the cause is
the first line that is none of these.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Sequence

# Lines that frame a cause without stating one (matched on the stripped line).
_FRAMING = re.compile(
    r"Graph execution error:$"
    r"|Detected at node .* defined at"
    r"|File \".*\", line \d+"
    r"|\[\[.*\]\]"  # [[{{node ...}}]] [Op:...]: where, not what
    r"|\d+ root error\(s\) found\.?$"
    r"|Exception encountered when calling .*"
    r"|Arguments received by .*"
    r"|•")
# Keras colours the cause for terminals; the run's tag and the report are not terminals.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# TensorFlow numbers the causes of a multi-error status: `(0) INVALID_ARGUMENT: ...`.
_NUMBERED = re.compile(r"^\(\d+\)\s+")
MAX_CAUSE = 400


# TensorFlow's health check names the tasks a worker lost (MultiWorkerMirroredStrategy).
_UNHEALTHY = re.compile(r"following tasks are unhealthy \(([^)]*)\):\s*((?:/job:\S+\s*)+)")


# A collective aborted by its own connection to a peer, before the health check named the task
# (a link cut while a busy machine delays the check): `Collective ops is aborted by:
# recvmsg:Connection timed out`. The message names no task.
_LINK_LOST = re.compile(r"Collective ops is aborted by:\s*([^\n(\[]*?(?:Connection (?:timed out|reset|refused)"
                        r"|Socket closed|failed to connect)[^\n(\[]*)", re.I)


def root_cause(err: BaseException, peers: Sequence[str] = ()) -> str:
    """The line of the exception's message that says what went wrong (may be empty).

    peers: the other tasks of this task's collectives (e.g. ["worker:1"]): a collective whose
    connection was lost names its peer when there is only one, the only task it can be.
    """
    unhealthy = _UNHEALTHY.search(str(err))
    if unhealthy:  # e.g. a worker's link cut: say which task, not "Graph execution error:"
        tasks = ", ".join(re.sub(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)", r"\1:\2", t)
                          for t in unhealthy.group(2).split())
        return f"task {tasks} unreachable ({unhealthy.group(1)}); collective ops aborted"
    lost = _LINK_LOST.search(str(err))
    if lost:
        who = f"task {peers[0]}" if len(peers) == 1 else "a peer task"
        return f"{who} unreachable ({lost.group(1).strip()}); collective ops aborted"
    lines = [_ANSI.sub("", line).strip() for line in str(err).splitlines()]
    lines = [line for line in lines if line]
    cause = next((line for line in lines if not _FRAMING.match(line)), lines[0] if lines else "")
    cause = _NUMBERED.sub("", cause)
    return cause if len(cause) <= MAX_CAUSE else cause[:MAX_CAUSE - 1] + "…"


def one_line(err: BaseException, traceback_file: Path, peers: Sequence[str] = ()) -> str:
    """`Type: cause (traceback: path)`, the account of a failed task in the terminal and the run.

    Example:
        InvalidArgumentError: Input to reshape is a tensor with 80 values, but the requested
        shape has 84 (traceback: /runs/outputs/2026-12-03/08-00-00/task_error.txt)
    """
    cause = root_cause(err, peers)
    head = f"{type(err).__name__}: {cause}" if cause else type(err).__name__
    return f"{head} (traceback: {traceback_file})"


# TensorFlow's errors that a restart may cure: a peer that went away or a collective that
# timed out. Matched by name: this module must not import TensorFlow before the environment is set.
_NETWORK_ERRORS = {"UnavailableError", "DeadlineExceededError", "AbortedError"}


def retryable(err: BaseException) -> bool:
    """Whether a restart could cure err: a network-type error, not a bug in code, config or data."""
    names = {cls.__name__ for cls in type(err).__mro__}
    return bool(names & _NETWORK_ERRORS) or isinstance(err, (ConnectionError, TimeoutError))


def disk_full(err: BaseException) -> bool:
    """No space left for the job directory (TensorFlow's file errors carry only the message)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(err) or "Disk quota exceeded" in str(err)
