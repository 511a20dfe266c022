"""The standby task: started with the command, before the config is known; the task
processes of the command are forked from it.

A task spends 2 to 5 s importing TensorFlow before it can train; the driver spends about 0.6 s
starting Python, importing Hydra and composing the config before it knows the job. Run one
after the other, the first training step came that much later than a hand-written script's, and
every task of a command paid the import again: each of a localhost cluster's 2 to 4 tasks, each
job of a sweep, each restart. So `python -m xpdist` starts `python -m xpdist.task --standby`
first thing (start): it imports TensorFlow while Hydra composes, then waits on its stdin. Each
task of the command is forked from it (claim): the launcher hands it the job, as the arguments,
working directory and environment a task started for the job would have had
(core.protocol.taskenv.Handoff), and gets back a child process of its own (spawn.Adopted), which it
waits for and signals like one it started. It serves every job of a sweep run in this process
(Hydra's basic launcher and sweeper) and every restart of a cluster, and ends with the command
(discard), or once a single run has forked the last task it can have (claim's `last`). What
cannot use it does not claim it: a sweep whose jobs run in other processes, an engine whose
tasks run elsewhere (SLURM, Ray, hosts joined by TF_CONFIG), `verbose=true`; a single run that
cannot use it ends it at once (keep_if).

What TensorFlow reads at its import cannot follow the job: its C++ log level (set as for a run
without `verbose`, the default) and the environment the command was started with. The Keras
flavour is read later, at the first `tf.keras`, so both flavours can use it. Set
XPDIST_STANDBY=0 to start every task only once its job is known.

Where this process has imported TensorFlow already and runs no other thread (a program
that forks xpdist's CLI from a process that imported both, as xpdist's own tests do), the
standby is this process forked, running the same program (`xpdist.task --standby`) without
its import to wait for (_fork).

Only the standard library is imported here: the point is to start before anything else.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys
import threading
import traceback
from typing import BinaryIO, Dict, Optional, Sequence, Union

from xpdist.core.protocol.taskenv import DRIVER_PID_ENV, Handoff, STANDBY_ARG
from xpdist.driver.processes import spawn

ENABLE_ENV = "XPDIST_STANDBY"

# Arguments after which Hydra (or xpdist's --check) prints something instead of running jobs.
_NO_RUN_FLAGS = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info", "-sc",
                 "--shell-completion", "-p", "--package", "--resolve", "--check"}


class _State:
    # The standby task, started and not ended, and the pipe on which it tells each forked task's pid.
    server: Union[subprocess.Popen, "_Forked", None] = None
    replies: Optional[BinaryIO] = None
    # The jobs of a sweep run one after another in this process: one that cannot use the
    # standby leaves it to the next (keep_if).
    sweep = False
    usable = True


def start(argv: Sequence[str]) -> None:
    """Starts the standby task, unless argv asks for Hydra's information or for a sweep whose
    jobs run elsewhere (another launcher or sweeper named on the command line: it would only be
    ended once the config is known). A command's state starts afresh: an earlier command in this
    process (xpdist.api, a test) may have left a sweep's or an unusable one."""
    _State.sweep, _State.usable = False, True
    if any(arg in _NO_RUN_FLAGS for arg in argv):
        return
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    if multirun and any(arg.startswith(("hydra/launcher=", "hydra/sweeper=")) and not arg.endswith("=basic")
                        for arg in argv):
        return
    _spawn()


def start_for_job() -> None:
    """A sweep's job in a process forked for it (hydra/launcher=local_parallel): a standby of its
    own, which imports TensorFlow while the job composes its config and creates its run. (The
    sweep's process's could not serve it: a task forked there becomes that process's child.)"""
    _State.server, _State.replies, _State.sweep, _State.usable = None, None, False, True  # the sweep process's
    _spawn()


def _spawn() -> None:
    if os.environ.get(ENABLE_ENV, "1") == "0":
        return
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    read_end, write_end = os.pipe()
    try:
        if _forkable():
            server = _fork(spawn.task_env(env), write_end)
        else:
            server = spawn.spawn(spawn.task_command(STANDBY_ARG, str(write_end)), env, stdin=subprocess.PIPE,
                                 pass_fds=(write_end,))
    except OSError:
        os.close(read_end)
        return
    finally:
        os.close(write_end)
    _State.server, _State.replies = server, os.fdopen(read_end, "rb")


def _forkable() -> bool:
    """Whether this process can be the standby forked: TensorFlow imported (and nothing run on
    it, or it would have started its thread pools) and no thread but this one."""
    return ("tensorflow" in sys.modules and threading.active_count() == 1
            and len(os.listdir("/proc/self/task")) == 1)


class _Forked(spawn.Adopted):
    """The standby forked from this process: a child it waits for, and the pipe to its stdin."""

    def __init__(self, pid: int, stdin: BinaryIO):
        super().__init__(pid, spawn.task_command(STANDBY_ARG))
        self.stdin = stdin


def _fork(env: Dict[str, str], replies: int) -> _Forked:
    """This process forked into `python -m xpdist.task --standby REPLIES`, as spawn.spawn would
    start it: env, a pipe on stdin, stdout and stderr unbuffered (PYTHONUNBUFFERED), a process
    group of its own (set on both sides, so that discard can kill it at once), and the program
    run as `-m` runs it (runpy)."""
    stdin_r, stdin_w = os.pipe()
    sys.stdout.flush()  # else what the driver printed and has not written yet, the child writes again
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            # Set up before the environment changes: its first call finds the process's argv by
            # walking back from the first C environ string, which clear() moves.
            import setproctitle  # (a dependency; imported here, in the child only)

            setproctitle.getproctitle()
            os.setpgid(0, 0)
            os.dup2(stdin_r, 0)
            os.close(stdin_r)
            os.close(stdin_w)
            os.environ.clear()
            os.environ.update(env)
            sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)))
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name)
                setattr(sys, name, io.TextIOWrapper(io.FileIO(stream.fileno(), "wb", closefd=False),
                                                    encoding=stream.encoding, errors=stream.errors,
                                                    write_through=True))
            # As a started one reads in `ps`.
            setproctitle.setproctitle(" ".join(spawn.task_command(STANDBY_ARG, str(replies))))
            sys.argv = ["-m", STANDBY_ARG, str(replies)]
            runpy.run_module("xpdist.task", run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: B902  it must never return into the driver
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.setpgid(pid, pid)
    os.close(stdin_r)
    return _Forked(pid, os.fdopen(stdin_w, "wb"))


def serve_sweep() -> None:
    """The jobs of a sweep run one after another in this process: the standby serves each."""
    _State.sweep = True


def keep_if(usable: bool) -> None:
    """Once a job's config is known: whether it may claim the standby. A single run that cannot
    ends it; a sweep's job leaves it to the next."""
    _State.usable = usable
    if not usable and not _State.sweep:
        discard()


def claim(argv: Sequence[str], env: Dict[str, str], output: Optional[str] = None,
          last: bool = False) -> Optional[spawn.Adopted]:
    """Forks a task for the job from the standby and returns it, a child of this process;
    None when there is no standby, or the job may not use it. Waits for the standby to have
    imported TensorFlow, which it began as the command started.

    output: the file the task's stdout and stderr go to (a cluster task's log); None: the driver's.
    last: the job will claim no other task (its one task, or a cluster's last without restarts).
        Unless a sweep's next job may claim one, the standby is then ended at once: while it
        lives, every page of its memory the task writes to is copied first (copy-on-write), about
        0.1 CPU-seconds more in a single run here."""
    server, replies = _State.server, _State.replies
    if server is None or not _State.usable:
        return None
    # The standby's own driver pid; its launch (the command's) is the zero of first_step_s unless
    # env sets one (a sweep's job: its start; a restarted cluster's task: the restart).
    handoff = Handoff(argv=list(argv), cwd=os.getcwd(), env={k: v for k, v in env.items() if k != DRIVER_PID_ENV},
                      output=output)
    try:
        with spawn.adopting():
            server.stdin.write(handoff.line())
            server.stdin.flush()
            reply = replies.readline()
    except OSError:
        reply = b""
    except BaseException:  # interrupted meanwhile: a task forked already dies with this process
        discard()
        raise
    if not reply.strip():  # it died (the standby itself failed): a task is started for the job instead
        discard()
        return None
    if last and not _State.sweep:
        discard()
    return spawn.Adopted(int(reply), spawn.task_command(*argv))


def discard() -> None:
    """Ends the standby task. The tasks forked from it go on: each has a session of its own."""
    server, replies = _State.server, _State.replies
    _State.server = _State.replies = None
    if server is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            server.stdin.close()
        server.wait()
    if replies is not None:
        replies.close()
