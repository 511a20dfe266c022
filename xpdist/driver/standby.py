"""The standby task: the task process of a single run, started before the config is known.

A task spends about 5 s here importing TensorFlow before it can train; the driver spends about
0.6 s starting Python, importing Hydra and composing the config before it knows the job. Run
one after the other, the first training step came that much later than a hand-written
script's. So `python -m xpdist` starts `python -m xpdist.task --standby` first thing (start):
it imports TensorFlow while Hydra composes, then waits on its stdin. The local launcher hands
it the job (claim), as the arguments, working directory and environment a task started for
the job would have had (core.taskenv.Handoff). A sweep whose jobs run one after another in this
process (Hydra's basic launcher and sweeper) gets the same for its first job, and a standby for
each next job as soon as a job's task has ended (refill), while the driver closes that job's run
and composes the next. What cannot use it discards it (discard): a sweep whose jobs run in other
processes, a cluster of several tasks, `verbose=true`; a rejected config leaves it to the next job
or to the command's end.

What TensorFlow reads at its import cannot follow the job: its C++ log level (set as for a run
without `verbose`, the default) and the environment the command was started with. The Keras
flavour is read later, at the first `tf.keras`, so both flavours can use the standby. Set
XPDIST_STANDBY=0 to start every task only once its job is known.

Only the standard library is imported here: the point is to start before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Dict, List, Optional, Sequence

from xpdist.core.taskenv import DRIVER_PID_ENV, STANDBY_ARG, Handoff
from xpdist.driver import spawn

ENABLE_ENV = "XPDIST_STANDBY"

# Arguments after which Hydra (or xpdist's --check) prints something instead of running jobs.
_NO_RUN_FLAGS = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info", "-sc",
                 "--shell-completion", "-p", "--package", "--resolve", "--check"}


class _State:
    # Started, not yet claimed: one, or one per task of a localhost cluster named on the command line.
    procs: List[subprocess.Popen] = []
    # Standby tasks still to start for the next jobs of a sweep run in this process.
    refills = 0


def start(argv: Sequence[str]) -> None:
    """Starts the standby task, unless argv asks for Hydra's information or for a sweep whose
    jobs run elsewhere (another launcher or sweeper named on the command line: the task would
    only be discarded once the config is known)."""
    if any(arg in _NO_RUN_FLAGS for arg in argv):
        return
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    if multirun and any(arg.startswith(("hydra/launcher=", "hydra/sweeper=")) and not arg.endswith("=basic")
                        for arg in argv):
        return
    _spawn()


def top_up(count: int) -> None:
    """The command line names a cluster of `count` task processes on this machine
    (engines.local_tasks, asked once the driver's modules are imported, before Hydra composes):
    standby tasks for the others too, at most MAX_STANDBYS, if one was started with the command.
    A guess the composed config proves wrong costs a standby discarded, or a task started later."""
    if _State.procs:
        for _ in range(min(count, MAX_STANDBYS) - len(_State.procs)):
            _spawn()


# At most this many standby tasks at once (each imports TensorFlow: about 5 CPU-seconds).
MAX_STANDBYS = 8


def start_for_job() -> None:
    """A sweep's job in a process forked for it (hydra/launcher=local_parallel): a standby of its
    own, which imports TensorFlow while the job composes its config and creates its run."""
    _State.procs, _State.refills = [], 0  # the sweep process's, if any, are not this job's
    _spawn()


def _spawn() -> None:
    if os.environ.get(ENABLE_ENV, "1") == "0":
        return
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with contextlib.suppress(OSError):
        _State.procs.append(spawn.spawn(spawn.task_command(STANDBY_ARG), env, stdin=subprocess.PIPE))


def expect_jobs(count: int) -> None:
    """A sweep of `count` jobs runs one after another in this process: a standby for each."""
    _State.refills = count - 1


def refill() -> None:
    """A job's task has ended: starts the standby for the next job of the sweep, if one follows."""
    if _State.refills > 0 and not _State.procs:
        _State.refills -= 1
        _spawn()


def keep_if(usable: bool) -> None:
    """Once the config is known: discards the standby tasks unless the job can use them."""
    if not usable:
        discard()


def claim(argv: Sequence[str], env: Dict[str, str], output: Optional[str] = None) -> Optional[subprocess.Popen]:
    """Hands the job to the standby task and returns it; None when there is none (left).
    output: the file its stdout and stderr go to (a cluster task's log); None: the driver's."""
    if not _State.procs:
        return None
    proc = _State.procs.pop(0)
    # The standby's own driver pid; its launch is the zero of first_step_s unless env sets one
    # (a sweep's job: its start, not the sweep's).
    handoff = Handoff(argv=list(argv), cwd=os.getcwd(), env={k: v for k, v in env.items() if k != DRIVER_PID_ENV},
                      output=output)
    try:
        proc.stdin.write(handoff.line())
        proc.stdin.close()
    except OSError:  # it died (the standby itself failed): a task is started for the job instead
        _end(proc)
        return None
    return proc


def discard() -> None:
    """Ends the standby tasks not claimed."""
    procs, _State.procs = _State.procs, []
    for proc in procs:
        _end(proc)


def _end(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    proc.wait()
