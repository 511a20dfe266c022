"""What a task process does before its job is known: tie its life to the driver's, import
TensorFlow, and, as the standby task (`python -m xpdist.task --standby`, see
xpdist/driver/processes/standby.py), wait for its job.

Only the standard library and xpdist.core.protocol.taskenv are imported before TensorFlow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Callable, List, Optional, Sequence

from xpdist.core.protocol.taskenv import DRIVER_PID_ENV, Handoff, LAUNCHED_AT_ENV


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


def stoppable() -> None:
    """Lets SIGINT and SIGTERM reach this task whatever its parent blocked or ignored. A Ray
    worker (a sweep's job under hydra/launcher=ray) blocks SIGINT, and a child inherits the
    mask through exec: the driver's SIGINT on Ctrl-C (the chief saves) went unseen until
    SIGKILL came process.GRACE_S later."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Temp:
    # This task's own temporary directory (private_tempdir), if made.
    path: Optional[str] = None


def private_tempdir(folder) -> None:
    """Points this process's temporary files (tempfile.tempdir) at `folder`, its own
    (JobDir.own_scratch: in the job directory, named after this host and pid), which
    remove_private_tempdir removes as the task exits. The task ends with os._exit
    (main.exit_now), so TensorFlow's atexit handlers never run, among them AutoGraph's, which
    delete the source file of each function it converted (`__autograph_generated_file*.py`: 2 in
    the default experiment, 7 with trainer=ctl): they stayed in /tmp, 37,564 of them on a machine
    that had run the test suite for two days. Called before the first function is traced. The
    folder of a task killed outright is removed by the driver once the job's tasks have ended
    (JobDir.remove_ended_scratch)."""
    if _Temp.path is None:
        shutil.rmtree(folder, ignore_errors=True)  # an ended process's with the same pid
        os.makedirs(folder)
        _Temp.path = tempfile.tempdir = str(folder)


def remove_private_tempdir() -> None:
    """Removes the folder private_tempdir made, if it made one, and the job's scratch with it
    when no other task's folder is there."""
    if _Temp.path is not None:
        shutil.rmtree(_Temp.path, ignore_errors=True)
        with contextlib.suppress(OSError):  # the job's scratch, once no task has a folder there
            os.rmdir(os.path.dirname(_Temp.path))


def quiet_tensorflow() -> None:
    """TensorFlow's C++ log level for a run without `verbose`: read once, at its import."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")


# Optional integrations that Keras imports at its own import when they are installed: its
# scikit-learn wrappers (sklearn, and scipy with it), DataFrame input (pandas), its image-gallery
# plots (matplotlib) and notebook display (IPython). Keras 3 is imported with TensorFlow, tf-keras
# at the first `tf.keras` under TF_USE_LEGACY_KERAS=1. A task uses none of them (its data reaches
# Keras as tf.data datasets), and here they took 1.2-1.6 s of TensorFlow's 4.5 s import.
KERAS_OPTIONAL = ("sklearn", "pandas", "matplotlib", "IPython")


def import_tensorflow(verbose: bool, keras: bool = True):
    """Imports TensorFlow, its C++ start-up chatter hidden unless verbose, and with `keras`
    the run's Keras (TF_USE_LEGACY_KERAS is read there), without Keras's optional integrations."""
    with optional_imports_skipped(KERAS_OPTIONAL), (contextlib.nullcontext() if verbose else stderr_silenced()):
        import tensorflow as tf

        if keras:
            tf.keras.Model  # noqa: B018  (tf.keras is loaded at its first attribute)
            keras_importable_as_tensorflow_keras(tf)
    return tf


def keras_importable_as_tensorflow_keras(tf) -> None:
    """Makes `import tensorflow.keras` give the Keras that `tf.keras` gives, in a process that
    imported TensorFlow before TF_USE_LEGACY_KERAS had its final value (a standby task: its job
    says which Keras).

    TensorFlow reads the variable at two moments: at its import, for the folder where `import
    tensorflow.keras` looks (tensorflow/__init__.py puts tf-keras's first in tensorflow.__path__
    when it is set), and at the first `tf.keras`, for the attribute. Set in between, the
    attribute was tf-keras and the import Keras 3. MLflow's tensorflow flavour tests
    `isinstance(model, tensorflow.keras.models.Model)`: it took a standby task's tf-keras model
    for a plain tf.Module and saved a SavedModel of it (model_type tf2-module, 0.9 s of tracing
    after the last epoch), where a task that started with the variable set saves the Keras
    model. This lays out tensorflow.__path__ as TensorFlow's import does for the variable's
    value now; no public API chooses the Keras of `tensorflow.keras` after the import.
    """
    if "tensorflow.keras" in sys.modules:  # imported already: not in a task, where nothing imports it first
        return
    import importlib.util

    spec = importlib.util.find_spec("tf_keras")  # found, not imported: a Keras 3 run has no use for it
    if spec is None or not spec.submodule_search_locations:
        return  # no tf-keras: nothing but Keras 3 can be found there
    legacy = os.path.join(list(spec.submodule_search_locations)[0], "api", "_v2")  # holds tf-keras's `keras`
    if legacy in tf.__path__:
        tf.__path__.remove(legacy)
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1"):  # TensorFlow's own test of it
        tf.__path__.insert(0, legacy)


@contextlib.contextmanager
def optional_imports_skipped(names: Sequence[str]):
    """Inside, importing one of these top-level packages raises ImportError, as if it were not
    installed (a None in sys.modules is Python's documented way to say so); after, they import
    as usual. Packages already imported are left alone."""
    skipped = [name for name in names if name not in sys.modules]
    for name in skipped:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in skipped:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


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


def standby(replies: int, preload: Callable[[], object]) -> List[str]:
    """The standby task: imports TensorFlow, then forks a task for each job handed to it on
    stdin (xpdist/driver/processes/standby.py). Returns, in each forked task, the task's arguments, with
    the job's working directory and environment in place (its driver's pid kept, and its launch
    time unless the job sets one). `replies`: the pipe on which it tells the driver each task's
    pid; `preload`: imports the task's own modules, once here for every task. Exits when stdin
    closes: the command has ended, or had no use for it.

    Forked, not started: each task of the command (a localhost cluster's 2 to 4, a sweep's jobs
    run one after another, a restarted cluster's) starts with TensorFlow imported, 2 to 4
    CPU-seconds each on 2 cores, once per command instead of once per task. Nothing here has
    run TensorFlow: its runtime (thread pools, devices, gRPC) starts in the task, at its first
    op. The only other threads are numpy's OpenBLAS pool, which OpenBLAS stops around fork
    (pthread_atfork), as Python's multiprocessing relies on. Should anything imported start a
    thread of its own (checked before every fork), it forks nothing and exits: the driver then
    starts each task on its own.
    """
    die_with_driver()
    stoppable()
    quiet_tensorflow()
    import numpy  # noqa: F401  (first, to count its OpenBLAS threads: see below)

    fork_safe = _threads()
    import_tensorflow(verbose=False, keras=False)  # the Keras flavour comes with the job
    preload()

    while True:
        line = sys.stdin.buffer.readline()
        if not line.strip():
            os._exit(0)
        if _threads() > fork_safe:  # a thread that may hold a lock as it forks: the task could hang
            print(f"xpdist: the standby task has {_threads() - fork_safe} thread(s) besides numpy's after "
                  "importing TensorFlow, so it cannot fork tasks; each task starts on its own", file=sys.stderr)
            os._exit(0)  # the driver starts the task instead (standby.claim)
        handoff = Handoff.from_line(line)
        pid = _fork_task(title=" ".join([sys.executable, "-m", "xpdist.task", *handoff.argv]))
        if pid == 0:
            os.close(replies)
            return _take(handoff)
        os.write(replies, f"{pid}\n".encode())


def _threads() -> int:
    """This process's threads, as the kernel counts them (C threads included)."""
    return len(os.listdir("/proc/self/task"))


def _fork_task(title: str) -> int:
    """Forks a task that is its driver's child, not this process's: through an intermediate
    process that exits at once, so that the kernel hands the task to the driver, which is a
    child subreaper meanwhile (PR_SET_CHILD_SUBREAPER, driver/processes/standby.py claim). The driver then
    waits for it, and signals its process group, as for a task it started itself. Returns the
    task's pid here, 0 in the task. When this returns, the task has its own session, its command
    line reads `title` (what `ps` and psutil show), and the driver is its parent."""
    import setproctitle
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        middle = os.getpid()
        if os.fork() == 0:  # the task
            os.close(read_end)
            os.setsid()  # a session and process group of its own, as spawn.spawn's tasks have
            setproctitle.setproctitle(title)
            os.write(write_end, f"{os.getpid()}\n".encode())
            os.close(write_end)
            while os.getppid() == middle:  # the intermediate exits at once
                time.sleep(0.001)
            return 0
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reply:
        pid = reply.readline()
    os.waitpid(middle, 0)  # the task has been handed to the driver
    return int(pid)


def _take(handoff: Handoff) -> List[str]:
    """In a forked task: makes the process the task the handoff describes."""
    die_with_driver()  # the driver is the parent now; a parent's death signal does not pass through fork
    own = {k: os.environ[k] for k in (LAUNCHED_AT_ENV, DRIVER_PID_ENV) if k in os.environ}
    os.environ.clear()
    os.environ.update({**own, **handoff.env})
    os.chdir(handoff.cwd)
    with open(os.devnull, "rb") as null:  # as a task started without input
        os.dup2(null.fileno(), 0)
    if handoff.output:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(handoff.output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    return handoff.argv
