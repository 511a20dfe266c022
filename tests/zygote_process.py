"""The zygote's own program (tests/zygote.py says what a zygote is and why its children are
the command a test asked for): import what `python -m xpdist` imports before it composes,
then fork one child per request, which becomes `python -m MODULE ARGS`.

Started by tests.zygote as `python -c ... tests/zygote_process.py FD`, FD its end of a
SOCK_SEQPACKET socket pair. Only the standard library is imported besides PRELOAD.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
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
# One request (JSON: argv, cwd, env) per message, with the child's stdout and stderr as fds.
MESSAGE_MAX = 1 << 20


class _RecordingEnviron(os._Environ):
    """os.environ that notes what is read: the names looked up, or that it was listed."""

    def __init__(self, real: os._Environ):
        self.__dict__.update(real.__dict__)  # the same mapping underneath (and putenv)
        self.looked_up: set = set()
        self.listed = False

    def __getitem__(self, key):
        self.looked_up.add(key)
        return super().__getitem__(key)

    def __iter__(self):
        self.listed = True
        return super().__iter__()


def serve(fd: int) -> None:
    """The zygote's program: preload, then fork a child per request until the socket closes."""
    sock = socket.socket(fileno=fd)
    # As the interpreter set them up; nothing here changes them, but a preloaded module might.
    handlers = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    home = os.getcwd()
    real = os.environ
    os.environ = recording = _RecordingEnviron(real)
    try:
        for module in PRELOAD:
            importlib.import_module(module)
    finally:
        os.environ = real
    read = None if recording.listed else {name: real.get(name) for name in sorted(recording.looked_up)}
    sock.send(json.dumps({"read": read}).encode())
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 2)
        if not message:
            return
        if message == b"kill":  # late: its child was reaped before the kill arrived
            continue
        unsafe = _unsafe_to_fork()
        if unsafe:
            for received in fds:
                os.close(received)
            sock.send(json.dumps({"error": unsafe}).encode())
            continue
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, sock, home, handlers, mask)
        # Here as well as in the child, so that its group exists before a kill can be asked for
        # (ESRCH: it has already ended).
        with contextlib.suppress(ProcessLookupError):
            os.setpgid(pid, pid)
        for received in fds:
            os.close(received)
        sock.send(json.dumps({"pid": pid}).encode())
        if not _wait(sock, pid):
            return


def _unsafe_to_fork() -> str:
    if "tensorflow" in sys.modules:
        return "TensorFlow is imported in the zygote (it is not fork-safe)"
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()
    if threads != 1 or threading.active_count() != 1:
        return f"the zygote has {threads} threads; it forks with one only"
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


def _child(request: dict, fds: List[int], sock: socket.socket, home: str, handlers: dict, mask) -> None:
    """Becomes `python -m MODULE ARGS` in the request's directory and environment; never returns."""
    try:
        os.setpgid(0, 0)
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
    serve(int(sys.argv[-1]))
