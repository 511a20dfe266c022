"""The zygote: `python -m xpdist ...` for the tests, forked instead of started.

A test that runs the CLI started a fresh `python -m xpdist`: for a command refused before
training, 0.57 s on an idle machine, of which starting Python and importing Hydra, OmegaConf
and xpdist's driver took about 0.25 s (the rest is Hydra composing); for a command that
trains, its driver also imports MLflow, its SQL store and migrations and the launchers, 1.2 to
1.5 CPU-seconds of each of the suite's few hundred runs. A zygote is a helper process started
by a pytest worker (per kind, per start-up environment, see below, and per command it runs at
once) that has imported those modules (zygote_process.PRELOADS: "check", what the CLI imports
before it composes; "run", what a training run's driver imports besides) and then forks one
child per command.

The child is still a separate process running the real CLI: it becomes what a fresh
`python -m MODULE ARGS` is at the moment runpy runs MODULE, and runs it the way Python's
`-m` does (runpy._run_module_as_main, in a fresh __main__ module). It takes the test's working
directory, its whole environment (os.environ, hence putenv), sys.argv and sys.orig_argv;
sys.path[0] and every PYTHONPATH entry Python made absolute against the zygote's working
directory follow the test's one; stdin is /dev/null, stdout and stderr are pipes that `run`
reads to their end as subprocess.run does, and no other file descriptor stays open; signal
handlers and mask are put back to those the zygote's interpreter started with. It leaves as
Python would: SystemExit's code, a traceback and 1, or threads joined, atexit run and the
streams flushed. Its exit code, stdout and stderr come back as a subprocess.CompletedProcess.
Whatever it starts (the driver's task processes, a localhost cluster, a sweep's jobs) is
started by it as by a fresh CLI.

Why that is equivalent: what a Python process takes from its environment before it runs
the module is fixed at start-up (PYTHON*, the locale, TZ, HOME, the dynamic loader's
variables) or read by the preloaded modules while they import. The first is the zygote's
key (with the variables the preloaded C libraries read as they load: OpenBLAS's, OpenMP's,
Arrow's and its jemalloc's); the second the zygote records (the value of every os.environ
variable looked up, whether those only tested for with `in` were there, the variables of a
prefix that a module lists, such as tqdm's TQDM_*) and `run` compares with the test's
environment, falling back to subprocess.run where one differs; an import that listed the whole
environment would make every command fall back. The zygote forks with no thread but those of
the libraries that keep fork safe (zygote_process.FORK_SAFE_THREADS), checked before every
fork: it refuses otherwise, and the test fails loudly.

A "run" zygote has also imported TensorFlow and the task's modules, as the standby task
imports them (xpdist/task/boot.py: its C++ log level quiet for the import alone, what the
import writes to os.environ taken back, what it reads recorded like the rest; TensorFlow's
other variables, TF_* and ABSL_*, are part of the key). A command's driver, finding TensorFlow
imported and no other thread, forks its standby task from itself instead of starting one that
imports it (xpdist/driver/processes/standby.py), and the command's tasks fork from that standby as from a
started one: 2.2 to 2.9 CPU-seconds for `python -m xpdist trainer.epochs=1` against 6.1 to 6.9 (the AMD
EPYC of this machine kind, 2026-12-06). What differs in such a task: it also holds the driver's
modules (Hydra, MLflow: the MLflow model's export imports nothing more). The commands the tests
start as subprocesses (the docs' commands, the benchmark, those run with another TF_CONFIG)
keep the started standby.

What it does not change: a forked child has its own process group, so that a command that
outlives its timeout is killed with everything it started (then subprocess.TimeoutExpired,
as from subprocess.run); the hash seed is the zygote's rather than a new one per command
(PYTHONHASHSEED, when set, is part of the key); `random` is seeded again in each child (as
CPython does after a fork), numpy's global generator is not (the driver does not use it); the
objects the imports made are frozen out of the garbage collector's scans (`gc.freeze`), so
that a child's full collections neither walk nor copy them: a timing difference only.

Used by tests.helpers.Xpdist.run (fork="run" by default, "check" for commands that end before
training) and by the advisor's tests (`python -m xpdist advise`, whose probes the advisor forks
in turn); `popen` serves the commands a test signals or watches while they run, and `run`'s
cgroup the ones a test runs in a memory cgroup. Tests whose subject is the interpreter's start
(`--help`, what an import pulls in, console scripts), the commands a page of the docs shows as a
user types them and `python -m xpdist docs` keep real subprocesses. The zygotes end with the
test process (atexit), or when their socket closes if the test process dies first.

This module is the test's side (`run`, `popen`); tests/zygote_process.py is the zygote's program.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests import zygote_process
from tests.zygote_process import MESSAGE_MAX

# Read at the interpreter's start, by the C library or by a preloaded C extension as it loads
# (OpenBLAS under numpy, pyarrow's jemalloc and Arrow) rather than by a module's Python code.
STARTUP_PREFIXES = ("PYTHON", "LC_", "LD_", "MALLOC_", "GLIBC_", "OPENBLAS_", "GOTO_", "OMP_", "ARROW_", "JE_",
                    "TF_", "ABSL_", "ONEDNN_", "DNNL_", "KMP_")
STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ", "HOME")


def run(cmd: Sequence[str], cwd, env: Dict[str, str], timeout: float, kind: str = "check",
        cgroup: Optional[Path] = None) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    for cmd = [sys.executable, "-m", MODULE, ...], forked from a zygote of this process for env's
    start-up environment; a real subprocess.run where the zygote's imports read env otherwise.

    kind: "check" for a command that ends before training (the zygote has imported what the CLI
    imports before it composes), "run" for one that trains (and the driver's MLflow, its store
    and the launchers). Thread-safe: a zygote serves one command at a time, and a command that
    finds none free gets a new one (tests/integration/harness.py runs two at once).

    cgroup: a cgroup's directory the command joins before it runs (as a preexec_fn that writes
    its pid to cgroup.procs would make it), with everything it starts."""
    cmd = [str(arg) for arg in cmd]
    if cmd[:2] != [sys.executable, "-m"] or len(cmd) < 3:
        raise ValueError(f"the zygote runs `{sys.executable} -m MODULE ...`, not {cmd}")
    key, zygote = _checkout(env, kind)
    try:
        if not zygote.serves(env):
            join = (lambda: (Path(cgroup) / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None
            return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                                  preexec_fn=join)
        return zygote.run(cmd, cwd, env, timeout, cgroup)
    finally:
        _release(key, zygote)


def popen(cmd: Sequence[str], cwd, env: Dict[str, str], kind: str = "run", stderr=subprocess.PIPE):
    """subprocess.Popen(cmd, cwd=cwd, env=env, stdout=PIPE, stderr=stderr, text=True,
    start_new_session=True) for cmd = [sys.executable, "-m", MODULE, ...], forked from a zygote
    (a Child: Popen's pid, args, returncode, stdout, stderr, poll, wait, communicate,
    send_signal, terminate, kill; its own process group, as a new session's); a real Popen
    where the zygote's imports read env otherwise. stderr: PIPE, or STDOUT for both streams on
    one pipe. For the commands a test signals or watches while they run; the zygote serves no
    other command until this one has ended."""
    cmd = [str(arg) for arg in cmd]
    if cmd[:2] != [sys.executable, "-m"] or len(cmd) < 3 or stderr not in (subprocess.PIPE, subprocess.STDOUT):
        raise ValueError(f"the zygote runs `{sys.executable} -m MODULE ...` with piped output, not {cmd}")
    key, zygote = _checkout(env, kind)
    if not zygote.serves(env):
        _release(key, zygote)
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True)
    try:
        return zygote.popen(cmd, cwd, env, merged=stderr == subprocess.STDOUT, release=lambda: _release(key, zygote))
    except BaseException:
        _release(key, zygote)
        raise


def _checkout(env: Dict[str, str], kind: str):
    """An idle zygote of kind for env's start-up environment (a new one if none is idle), and its key."""
    key = (kind, tuple(sorted((k, v) for k, v in env.items() if _startup(k))))
    with _lock:
        idle = _idle.setdefault(key, [])
        zygote = idle.pop() if idle else None
    if zygote is None or zygote.closed:
        zygote = Zygote(env, kind)
    return key, zygote


def _release(key: tuple, zygote: "Zygote") -> None:
    if not zygote.closed:
        with _lock:
            _idle[key].append(zygote)


def _startup(name: str) -> bool:
    return name.startswith(STARTUP_PREFIXES) or name in STARTUP_NAMES


class Zygote:
    """One zygote process (test side); `close` ends it."""

    def __init__(self, env: Dict[str, str], kind: str = "check"):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        # A working directory of its own, so that the paths Python makes absolute against it
        # (sys.path entries) can be told apart and moved to each command's directory.
        self._home = tempfile.mkdtemp(prefix="zygote-")
        self._log = tempfile.TemporaryFile()
        # Run by its path with -c: `python FILE` would put tests/ first on sys.path, `-m` needs
        # tests/ importable, and -P would pass on to the commands' own Python subprocesses.
        boot = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
        with theirs:
            # stdout a pipe, as a command run with capture_output has: Python sizes its buffer on it.
            self.proc = subprocess.Popen([sys.executable, "-c", boot, zygote_process.__file__, kind, str(theirs.fileno())],
                                         cwd=self._home, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=self._log, pass_fds=[theirs.fileno()])
        atexit.register(self.close)
        ready = self._receive()
        # os.environ as the zygote's imports read it (zygote_process._RecordingEnviron.reads):
        # the values they looked up (None: not found), whether the names they only tested for
        # were there, the variables of the prefixes they listed; None when they listed it all.
        self._read: Optional[dict] = ready["read"]

    def serves(self, env: Dict[str, str]) -> bool:
        """Whether a command with env would import the preloaded modules as the zygote did."""
        return self._read is not None and not self.differences(env)

    def differences(self, env: Dict[str, str]) -> List[str]:
        """The variables (or prefixes) env holds otherwise than the zygote's imports read them."""
        if self._read is None:
            return ["(the whole environment: an import listed it)"]
        return ([name for name, value in self._read["values"].items() if env.get(name) != value]
                + [name for name, present in self._read["present"].items() if (name in env) != present]
                + [prefix + "*" for prefix, listed in self._read["prefixes"].items()
                   if {k: v for k, v in env.items() if k.startswith(prefix)} != listed])

    def run(self, cmd: List[str], cwd, env: Dict[str, str], timeout: float,
            cgroup: Optional[Path] = None) -> subprocess.CompletedProcess:
        request = json.dumps({"argv": cmd, "cwd": str(cwd), "env": env,
                              "cgroup": str(cgroup) if cgroup else None}).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            socket.send_fds(self._sock, [request], [out_w, err_w])
        finally:
            os.close(out_w)  # the child holds the write ends now: EOF once it (and what it started) closes them
            os.close(err_w)
        try:
            self._receive()  # forked
            out, err, code, timed_out = self._collect(out_r, err_r, timeout)
            if timed_out and code is None:  # else it has ended, and what it started holds its pipes
                self._sock.send(b"kill")  # the zygote kills the child's group, which it has not reaped yet
                self._receive()
        except BaseException:
            # Cut short (pytest-timeout, Ctrl-C) or refused: the next command gets a new zygote,
            # and this one kills its child as it leaves.
            self.close()
            raise
        finally:
            os.close(out_r)
            os.close(err_r)
        if timed_out:
            raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(cmd, code, _text(out), _text(err))

    def popen(self, cmd: List[str], cwd, env: Dict[str, str], merged: bool, release) -> "Child":
        """Forks cmd and returns at once (zygote.popen); release() once it has ended."""
        request = json.dumps({"argv": cmd, "cwd": str(cwd), "env": env}).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = (out_r, os.dup(out_w)) if merged else os.pipe()
        try:
            socket.send_fds(self._sock, [request], [out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        try:
            pid = self._receive()["pid"]
        except BaseException:
            self.close()
            os.close(out_r)
            if not merged:
                os.close(err_r)
            raise
        return Child(self, cmd, pid, out_r, None if merged else err_r, release)

    def _collect(self, out_r: int, err_r: int, timeout: float):
        """The child's output to its end and its exit code (None if it has not ended), and
        whether the timeout came first."""
        chunks = {out_r: [], err_r: []}
        open_fds = [out_r, err_r]
        code = None
        deadline = time.monotonic() + timeout
        while open_fds or code is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return b"".join(chunks[out_r]), b"".join(chunks[err_r]), code, True
            readable, _, _ = select.select(open_fds + ([self._sock] if code is None else []), [], [], left)
            for fd in readable:
                if fd is self._sock:
                    code = self._receive()["returncode"]
                    continue
                data = os.read(fd, 1 << 16)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
        return b"".join(chunks[out_r]), b"".join(chunks[err_r]), code, False

    def _receive(self) -> dict:
        message = self._sock.recv(MESSAGE_MAX)
        if not message:
            self._log.seek(0)
            raise RuntimeError(f"the zygote (pid {self.proc.pid}) ended: {self._log.read().decode(errors='replace')}")
        reply = json.loads(message)
        if "error" in reply:
            raise RuntimeError(f"the zygote refused: {reply['error']}")
        return reply

    @property
    def closed(self) -> bool:
        return self._sock.fileno() < 0

    def close(self) -> None:
        """Ends the zygote (its socket closes: it leaves; killed by its pid if it does not)."""
        if self.closed:
            return
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self._home, ignore_errors=True)


class Child:
    """A command forked by a zygote, with subprocess.Popen's interface for one started with
    stdout (and stderr, unless merged) piped in text mode and a process group of its own. Its
    exit code comes from the zygote, which reaps it; signals go to its pid while it runs."""

    def __init__(self, zygote: Zygote, args: List[str], pid: int, out_r: int, err_r: Optional[int], release):
        self.args, self.pid, self.returncode = args, pid, None
        self._zygote, self._release = zygote, release
        self.stdout = open(out_r, encoding=_encoding())
        self.stderr = open(err_r, encoding=_encoding()) if err_r is not None else None
        self._readers: Dict[str, threading.Thread] = {}
        self._read: Dict[str, str] = {}

    def poll(self) -> Optional[int]:
        return self._wait(0)

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def _wait(self, timeout: Optional[float]) -> Optional[int]:
        if self.returncode is None:
            sock = self._zygote._sock
            if select.select([sock], [], [], timeout)[0]:
                try:
                    self.returncode = self._zygote._receive()["returncode"]
                finally:
                    self._release()
        return self.returncode

    def communicate(self, timeout: Optional[float] = None):
        """The rest of stdout and stderr (None if merged), once the command has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and name not in self._readers:
                self._readers[name] = threading.Thread(target=lambda n=name, s=stream: self._read.__setitem__(n, s.read()),
                                                       daemon=True)
                self._readers[name].start()
        for reader in self._readers.values():
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return self._read.get("stdout"), self._read.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


_idle: Dict[tuple, List[Zygote]] = {}
_lock = threading.Lock()


def _text(data: bytes) -> str:
    """As subprocess.run(text=True) decodes (subprocess._text_encoding, universal newlines)."""
    return data.decode(_encoding()).replace("\r\n", "\n").replace("\r", "\n")


def _encoding() -> str:
    return "utf-8" if sys.flags.utf8_mode else locale.getencoding()
