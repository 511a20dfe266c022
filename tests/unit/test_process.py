"""process.stop: a task that stops on the signal ends by it; one that ignores it is killed
with SIGKILL after the grace, with everything in its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from xpdist.driver.processes import process

# A task stand-in: starts a grandchild in its group, says so, then sleeps (or ignores signals).
TASK = """
import signal, subprocess, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def start(tmp_path: Path, kind: str):
    out = (tmp_path / f"{kind}.out").open("w+")
    proc = process.start([sys.executable, "-c", TASK, kind], dict(os.environ), log=out)
    while not (tmp_path / f"{kind}.out").read_text().strip():
        assert proc.poll() is None, "the stand-in task died at start"
        time.sleep(0.1)
    return proc, int((tmp_path / f"{kind}.out").read_text().split()[0])


def assert_gone(pid: int) -> None:
    try:
        psutil.Process(pid).wait(timeout=10)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_task_that_stops_on_sigterm_ends_by_it(tmp_path):
    proc, grandchild = start(tmp_path, "polite")
    process.stop([proc], grace_s=60)
    assert proc.returncode == -signal.SIGTERM
    assert_gone(grandchild)


def test_a_task_that_ignores_the_signal_is_killed_after_the_grace(tmp_path):
    proc, grandchild = start(tmp_path, "stubborn")
    process.stop([proc], first=signal.SIGINT, grace_s=1)
    assert proc.returncode == -signal.SIGKILL  # the grace ran out: SIGINT did not end it
    assert_gone(grandchild)  # the whole group went with it
