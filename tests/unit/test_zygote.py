"""The zygote (tests/zygote.py) runs the same command a fresh `python -m` runs: the same
exit code and output, in the test's directory and environment, killed at its timeout, and
nothing of it left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests import zygote
from tests.helpers import REPO, xpdist_env

# What a `python -m` process was started with, as the module itself can see it.
PROBE = '''
import json, os, signal, sys, threading
print(json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv, "path": sys.path, "cwd": os.getcwd(), "environ": dict(os.environ),
    "fds": sorted(os.listdir("/proc/self/fd")), "flags": list(sys.flags), "threads": threading.active_count(),
    "signals": {int(s): str(signal.getsignal(s)) for s in signal.valid_signals()},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "main": sorted(vars(sys.modules["__main__"])), "name": __name__, "file": __file__,
    "stdout": [sys.stdout.encoding, sys.stdout.line_buffering, sys.stdout.isatty()],
}))
print("a line on stderr", file=sys.stderr)
if sys.argv[1:] == ["raise"]:
    raise ValueError("uncaught")
sys.exit(int(sys.argv[1]))
'''

# Starts a process of its own, notes both pids, and waits for ever.
HANG = '''
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("pids", "w") as out:
    out.write(f"{os.getpid()} {grandchild.pid}")
time.sleep(600)
'''


def both(cmd, cwd: Path, env: dict):
    """The command forked from the zygote, then started by subprocess.run."""
    forked = zygote.run(cmd, cwd, env, timeout=120)
    started = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return forked, started


def test_a_refused_config_gives_the_same_code_and_lines_forked_or_started(tmp_path):
    env = xpdist_env({"XPDIST_STANDBY": "0"})
    cmd = [sys.executable, "-m", "xpdist", "cross_ops=hierarchical"]
    forked, started = both(cmd, tmp_path, env)
    assert forked.args == started.args == cmd
    assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr)
    assert forked.returncode == 2 and forked.stderr.startswith("xpdist: error: cross_ops=hierarchical: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("exit_with", ["3", "raise"])
def test_the_child_is_python_dash_m_in_the_tests_directory_and_environment(tmp_path, exit_with):
    """sys.argv, sys.path (its first entry and a relative PYTHONPATH entry follow the working
    directory; the module is found only there), the whole environment, open fds, signals."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "zygote_probe.py").write_text(PROBE)
    env = xpdist_env({"ZYGOTE_PROBE": str(tmp_path)})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), "lib", env["PYTHONPATH"]])  # a zygote of its own
    cmd = [sys.executable, "-m", "zygote_probe", exit_with]
    forked, started = both(cmd, tmp_path, env)
    seen = json.loads(forked.stdout)
    assert seen == json.loads(started.stdout)
    assert seen["cwd"] == str(tmp_path) and seen["environ"] == env
    assert seen["path"][:2] == [str(tmp_path), str(REPO)] and seen["path"][2] == str(tmp_path / "lib")
    assert seen["argv"] == [str(tmp_path / "lib" / "zygote_probe.py"), exit_with] and seen["orig_argv"] == cmd
    assert (forked.returncode, forked.stderr) == (started.returncode, started.stderr)
    assert forked.returncode == (3 if exit_with == "3" else 1)
    assert ("ValueError: uncaught" in forked.stderr) == (exit_with == "raise")


def test_a_child_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    (tmp_path / "zygote_hang.py").write_text(HANG)
    cmd = [sys.executable, "-m", "zygote_hang"]
    with pytest.raises(subprocess.TimeoutExpired) as err:
        zygote.run(cmd, tmp_path, xpdist_env(), timeout=2)
    assert err.value.cmd == cmd and err.value.timeout == 2
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    _, alive = psutil.wait_procs([psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)], timeout=30)
    assert alive == []
    # The zygote serves the next command.
    assert zygote.run([sys.executable, "-m", "xpdist", "--check"], tmp_path, xpdist_env(), timeout=120).returncode == 0


def test_the_zygote_ends_with_the_test_process(tmp_path):
    """A test process that used the zygote leaves neither the zygote nor its children behind."""
    (tmp_path / "zygote_probe.py").write_text(PROBE)
    code = ("import os, sys; from tests import zygote\n"
            "done = zygote.run([sys.executable, '-m', 'zygote_probe', '0'], sys.argv[1], dict(os.environ), 120)\n"
            "print(next(iter(zygote._idle.values()))[0].proc.pid, done.returncode)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=xpdist_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pid, returncode = (int(word) for word in done.stdout.split())
    assert returncode == 0
    assert not psutil.pid_exists(pid)  # ended and reaped by the test process's atexit


def test_a_closed_zygote_leaves_no_process(tmp_path):
    (tmp_path / "zygote_probe.py").write_text(PROBE)
    own = zygote.Zygote(xpdist_env())
    done = own.run([sys.executable, "-m", "zygote_probe", "0"], tmp_path, xpdist_env(), timeout=120)
    assert done.returncode == 0
    own.close()
    assert own.proc.returncode == 0
    assert own.proc.pid not in [child.pid for child in psutil.Process().children(recursive=True)]


# What a "run" zygote's child was started with, as the module itself can see it.
RUN_PROBE = '''
import json, os, sys, threading
print(json.dumps({"mlflow": "mlflow.store.tracking.sqlalchemy_store" in sys.modules,
                  "tensorflow": "tensorflow" in sys.modules, "threads": threading.active_count(),
                  "kernel_threads": len(os.listdir("/proc/self/task")),
                  "environ": dict(os.environ), "pid": os.getpid()}))
'''


# MLflow's telemetry check (mlflow/telemetry/utils.py, _is_ci_env_or_testing) stops at the first
# of these it finds, in the order of a set of strings, which differs from process to process: where
# CI=true is set, a zygote's import may never have read PYTEST_CURRENT_TEST. The run zygote's tests
# leave them out, so that what its import reads does not depend on the machine's CI.
CI_MARKERS = {"PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL", "TRAVIS",
              "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE", "TEAMCITY_VERSION",
              "CLOUD_RUN_EXECUTION", "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID"}


def run_env(extra: dict) -> dict:
    """xpdist_env without MLflow's CI markers, then `extra`."""
    return {**{k: v for k, v in xpdist_env().items() if k not in CI_MARKERS}, **extra}


@pytest.fixture(scope="module")
def run_zygote():
    own = zygote.Zygote(run_env({"PYTEST_CURRENT_TEST": "tests/a.py::one (call)"}), "run")
    yield own
    own.close()


# Slow: a run zygote imports TensorFlow (5 s of one worker's fast tier).
@pytest.mark.slow
def test_a_run_zygote_child_has_the_drivers_modules_and_the_tests_environment(tmp_path, run_zygote):
    """kind="run": MLflow's store and TensorFlow imported before the fork (so that the driver
    forks its standby task, xpdist/driver/processes/standby.py), no thread but main, and the environment
    the test gave, not the zygote's: TensorFlow's quiet log level was set for its import alone."""
    (tmp_path / "zygote_run_probe.py").write_text(RUN_PROBE)
    env = run_env({"ZYGOTE_PROBE": "run", "PYTEST_CURRENT_TEST": "tests/a.py::one (call)"})
    first, second = (json.loads(run_zygote.run([sys.executable, "-m", "zygote_run_probe"], tmp_path, env, 120).stdout)
                     for _ in range(2))
    assert first["mlflow"] and first["tensorflow"] and first["threads"] == first["kernel_threads"] == 1
    assert first["environ"] == env and first["pid"] != second["pid"]
    assert "TF_CPP_MIN_LOG_LEVEL" not in first["environ"]
    started = json.loads(subprocess.run([sys.executable, "-m", "zygote_run_probe"], cwd=tmp_path, env=env,
                                        capture_output=True, text=True, timeout=120).stdout)
    assert not started["mlflow"] and not started["tensorflow"] and started["environ"] == first["environ"]


@pytest.mark.slow
def test_a_run_zygote_serves_only_environments_its_imports_read_alike(run_zygote):
    """What MLflow's, pandas' and tqdm's imports read (a value, a presence, a prefix's variables)
    decides; a command whose environment differs there is started instead (zygote.run)."""
    env = run_env({"PYTEST_CURRENT_TEST": "tests/a.py::one (call)"})
    assert run_zygote.serves(env), run_zygote.differences(env)
    assert run_zygote.serves({**env, "PYTEST_CURRENT_TEST": "tests/b.py::two (call)"})  # MLflow tests its presence
    assert not run_zygote.serves({k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"})
    assert not run_zygote.serves({**env, "MLFLOW_LOGGING_LEVEL": "DEBUG"})  # read at import
    assert not run_zygote.serves({**env, "TQDM_DISABLE": "1"})  # tqdm lists TQDM_* at import
    assert run_zygote.serves({**env, "XPDIST_STANDBY": "0"})  # read by the command, not by the imports


# Says it is ready on stdout, a line on stderr, then waits for a signal.
WAITS = '''
import sys, time
print("ready", flush=True)
print("on stderr", file=sys.stderr, flush=True)
time.sleep(600)
'''


@pytest.mark.parametrize("merged", [False, True])
def test_a_watched_command_is_signalled_and_waited_for_as_a_popen(tmp_path, merged):
    """zygote.popen: its output read while it runs, a signal to its pid, its exit code and the
    rest of its output from communicate, as from subprocess.Popen (stderr on its own pipe, or
    merged into stdout); the zygote serves the next command afterwards."""
    (tmp_path / "zygote_waits.py").write_text(WAITS)
    cmd = [sys.executable, "-m", "zygote_waits"]
    env = xpdist_env()
    stderr = subprocess.STDOUT if merged else subprocess.PIPE
    child = zygote.popen(cmd, tmp_path, env, kind="check", stderr=stderr)
    assert isinstance(child, zygote.Child) and child.args == cmd
    assert child.stdout.readline() == "ready\n"
    assert child.poll() is None and os.getpgid(child.pid) == child.pid
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.send_signal(15)
    out, err = child.communicate(timeout=60)
    assert child.returncode == -15 and child.poll() == -15
    assert (out, err) == (("on stderr\n", None) if merged else ("", "on stderr\n"))
    assert not psutil.pid_exists(child.pid)
    again = zygote.popen(cmd, tmp_path, env, kind="check", stderr=stderr)
    assert again.stdout.readline() == "ready\n"
    again.kill()
    assert again.wait(timeout=60) == -9
