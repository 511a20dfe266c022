"""The zygote's own program (tests/zygote.py says what a zygote is and why its children are
the command a test asked for): import what `python -m xpdist` imports before it composes
(kind "check"), or everything its driver imports for a training run (kind "run"), then fork
one child per request, which becomes `python -m MODULE ARGS`.

Started by tests.zygote as `python -c ... tests/zygote_process.py KIND FD`, FD its end of a
SOCK_SEQPACKET socket pair. Only the standard library is imported besides the preload.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import types
from typing import List

# What `python -m xpdist` imports before it composes (xpdist/driver/main.py, cli and
# register_plugins), measured with `python -X importtime -m xpdist cross_ops=hierarchical`.
PRELOAD = ("xpdist.driver.main", "hydra_plugins.xpdist_optuna.config", "hydra_plugins.xpdist_optuna.optuna_sweeper",
           "hydra_plugins.xpdist_ray.config")
# What the driver of a training run imports besides (`python -X importtime -m xpdist` of a run,
# a sweep and a localhost cluster): MLflow, its SQL store and migrations, the launchers. A run
# of the default experiment took 3.4-3.6 CPU-seconds forked against 5.6-5.9 started (the AMD
# EPYC of this machine kind, idle, 2026-12-06): the imports are paid once per zygote instead.
PRELOAD_RUN = PRELOAD + (
    "hydra_plugins.xpdist_parallel.launcher", "hydra_plugins.hydra_ray_launcher.ray_launcher",
    "mlflow", "mlflow.tracking", "mlflow.entities", "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.tracking.sqlalchemy_workspace_store", "sqlalchemy.dialects.sqlite", "alembic.command",
    "alembic.config", "mlflow.system_metrics.metrics.cpu_monitor", "mlflow.system_metrics.metrics.gpu_monitor",
    "netrc")
# Imported first by a "run" zygote, before its thread count is taken: each starts a thread of
# its own whose library keeps fork safe. numpy's OpenBLAS stops its pool before a fork and
# starts it again on its next call (pthread_atfork); pandas imports pyarrow, whose jemalloc
# starts a background purging thread, and jemalloc's fork handlers take its locks before a fork
# and turn background threads off in the child (background_thread_postfork_child). The
# product's standby task forks with numpy's pool on the same ground (xpdist/task/boot.py).
FORK_SAFE_THREADS = ("numpy", "pandas")
PRELOADS = {"check": PRELOAD, "run": FORK_SAFE_THREADS + PRELOAD_RUN}
# Listings of os.environ a preloaded module makes at import that read only the variables of a
# prefix: tqdm's envwrap (tqdm/utils.py) reads TQDM_* for its defaults.
PREFIX_LISTINGS = {os.path.join("tqdm", "utils.py"): "TQDM_"}
# TensorFlow's C++ log level as the standby task imports it (xpdist/task/boot.py quiet_tensorflow),
# set for the import alone where the zygote's environment does not set it.
TENSORFLOW_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3", "ABSL_MIN_LOG_LEVEL": "3"}
# One request (JSON: argv, cwd, env) per message, with the child's stdout and stderr as fds.
MESSAGE_MAX = 1 << 20


class _RecordingEnviron(os._Environ):
    """os.environ that notes what is read: the names looked up (their values), the names only
    tested for (`in`), the prefixes listed by PREFIX_LISTINGS, or that it was listed otherwise."""

    def __init__(self, real: os._Environ):
        self.__dict__.update(real.__dict__)  # the same mapping underneath (and putenv)
        self.looked_up: set = set()
        self.tested: set = set()
        self.prefixes: set = set()
        self.listed = False
        self.written: dict = {}  # set by the imports: set again in each child, as its own imports would
        self._quiet = 0  # inside a prefix listing: its lookups are the prefix's

    def __getitem__(self, key):
        if not self._quiet and isinstance(key, str):  # a bytes key (os.get_exec_path tries one) finds nothing
            self.looked_up.add(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self.written[key] = value
        super().__setitem__(key, value)

    def __contains__(self, key):
        if isinstance(key, str):
            self.tested.add(key)
        try:
            super().__getitem__(key)
        except KeyError:
            return False
        return True

    def __iter__(self):
        frame = sys._getframe(1)
        while frame is not None:
            prefix = next((p for f, p in PREFIX_LISTINGS.items() if frame.f_code.co_filename.endswith(os.sep + f)), None)
            if prefix:
                self.prefixes.add(prefix)
                return self._prefix_listing()
            frame = frame.f_back
        self.listed = True
        return super().__iter__()

    def _prefix_listing(self):
        self._quiet += 1
        try:
            yield from super().__iter__()
        finally:
            self._quiet -= 1

    def reads(self, real) -> dict:
        """What a command's environment must hold for these imports to read as they did here
        (tests.zygote.Zygote.serves); None when they listed it (any variable may count)."""
        if self.listed:
            return None
        return {"values": {name: real.get(name) for name in sorted(self.looked_up)},
                "present": {name: name in real for name in sorted(self.tested - self.looked_up)},
                "prefixes": {p: {k: v for k, v in real.items() if k.startswith(p)} for p in sorted(self.prefixes)}}


def serve(kind: str, fd: int) -> None:
    """The zygote's program: preload, then fork a child per request until the socket closes."""
    sock = socket.socket(fileno=fd)
    # setproctitle set up before a child clears and sets the environment: at its first call it
    # finds the process's argv by walking back from the first C environ string, which would then
    # be on the heap, and the titles the standby task and the advisor's probes give their
    # processes would be lost (setproctitle's SPT_DEBUG=1 shows it).
    import setproctitle

    setproctitle.getproctitle()
    # As the interpreter set them up; nothing here changes them, but a preloaded module might.
    handlers = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    home = os.getcwd()
    real = os.environ
    os.environ = recording = _RecordingEnviron(real)
    threads = 1
    quieted = {k: v for k, v in TENSORFLOW_QUIET.items() if k not in real} if kind == "run" else {}
    real.update(quieted)
    try:
        for module in PRELOADS[kind]:
            importlib.import_module(module)
            if module in FORK_SAFE_THREADS:
                threads = _threads()
        if kind == "run":
            _import_tensorflow(recording, real)
    finally:
        os.environ = real
        for name in quieted:  # read by TensorFlow's C++ as it loaded; not the commands' environment
            del real[name]
            recording.looked_up.discard(name)
            recording.tested.discard(name)
    # What the imports made survives in every child: kept out of the collector's scans, so that
    # a child's full collections neither walk nor copy (on write) the zygote's pages. (Timing
    # only: nothing imported at module level is garbage.)
    gc.freeze()
    sock.send(json.dumps({"read": recording.reads(real)}).encode())
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 2)
        if not message:
            return
        if message == b"kill":  # late: its child was reaped before the kill arrived
            continue
        unsafe = _unsafe_to_fork(threads)
        if unsafe:
            for received in fds:
                os.close(received)
            sock.send(json.dumps({"error": unsafe}).encode())
            continue
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, sock, home, handlers, mask, recording.written)
        # Here as well as in the child, so that its group exists before a kill can be asked for
        # (ESRCH: it has already ended).
        with contextlib.suppress(ProcessLookupError):
            os.setpgid(pid, pid)
        for received in fds:
            os.close(received)
        sock.send(json.dumps({"pid": pid}).encode())
        if not _wait(sock, pid):
            return


def _import_tensorflow(recording: _RecordingEnviron, real: os._Environ) -> None:
    """TensorFlow and the task's modules, imported as the standby task imports them
    (xpdist/task/boot.py standby), so that each command's driver forks its standby from itself
    instead of starting one that imports them again (xpdist/driver/processes/standby.py _fork).

    What TensorFlow's import writes to os.environ (TF2_BEHAVIOR, TPU_ML_PLATFORM, ...) is taken
    back: a driver does not import it, and a task forked from a standby takes its job's
    environment, not the standby's. What it reads is recorded as the other imports' reads are."""
    from xpdist.task import boot

    before, written = dict(real), dict(recording.written)  # (real: listing the recording would count)
    boot.import_tensorflow(verbose=False, keras=False)
    importlib.import_module("xpdist.task.main")
    for name in set(real) - set(before):
        del real[name]
    real.update(before)
    recording.written = written


def _threads() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()


def _unsafe_to_fork(expected: int) -> str:
    """Why this process must not fork now ("" if it may): a Python thread, or a thread beyond
    those of FORK_SAFE_THREADS. (TensorFlow imported is safe: nothing has run on it, so none of
    its thread pools has started; the product's standby task forks on the same ground.)"""
    threads = _threads()
    if threads > expected or threading.active_count() != 1:
        return f"the zygote has {threads} threads; it forks with {expected} at most"
    return ""


def _wait(sock: socket.socket, pid: int) -> bool:
    """Reports the child's exit code; kills its process group when asked, which is safe while
    it is not reaped (its pid cannot be reused). False when the test's side has gone."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            readable, _, _ = select.select([sock, pidfd], [], [])
            if sock in readable:
                message = sock.recv(MESSAGE_MAX)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # asked (b"kill"), or the test's side ended (b"")
                if not message:
                    os.waitpid(pid, 0)
                    return False
            if pidfd in readable:
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                return True
    finally:
        os.close(pidfd)


def _child(request: dict, fds: List[int], sock: socket.socket, home: str, handlers: dict, mask, written: dict) -> None:
    """Becomes `python -m MODULE ARGS` in the request's directory and environment; never returns."""
    try:
        os.setpgid(0, 0)
        if request.get("cgroup"):  # first, so that all it allocates is counted there
            with open(os.path.join(request["cgroup"], "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        sock.detach()  # its fd is closed below; a socket object left would close a reused number later
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) != handler:
                signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(written)
        cwd = os.getcwd()
        sys.path[0] = cwd  # `python -m` puts the working directory first
        sys.path[1:] = [cwd + p[len(home):] if p == home or p.startswith(home + os.sep) else p for p in sys.path[1:]]
        importlib.invalidate_caches()  # the directories may have changed since the zygote listed them
        argv = request["argv"]
        sys.orig_argv = list(argv)
        sys.argv = ["-m", *argv[3:]]
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        main.__annotations__ = {}  # as in the __main__ Python starts with
        sys.modules["__main__"] = main
    except BaseException:  # noqa: B902  the child must never return into the zygote's loop
        traceback.print_exc()
        os._exit(70)
    code, interrupted = 0, False
    try:
        runpy._run_module_as_main(argv[2])  # what `python -m` itself calls
    except SystemExit as exit_:
        code = _exit_code(exit_)
    except BaseException as err:  # noqa: B902  uncaught: Python prints it, exits 1 (SIGINT's death for Ctrl-C)
        # From runpy's frame on, as `python -m` shows it (the hook prints the exception's own traceback).
        tb = err.__traceback__.tb_next
        sys.excepthook(type(err), err.with_traceback(tb), tb)
        code, interrupted = 1, isinstance(err, KeyboardInterrupt)
    try:
        threading._shutdown()  # as Python's finalization: non-daemon threads are joined first
        atexit._run_exitfuncs()
    finally:
        if not _flush() and code == 0:
            code = 120  # as Python does when flushing stdout fails at exit
        if interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _exit_code(exit_: SystemExit) -> int:
    """SystemExit's code as Python's own exit turns it into a status."""
    if exit_.code is None:
        return 0
    if isinstance(exit_.code, int):
        return exit_.code & 0xFF
    print(exit_.code, file=sys.stderr)
    return 1


def _flush() -> bool:
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            ok = False
    return ok


if __name__ == "__main__":
    serve(sys.argv[-2], int(sys.argv[-1]))
