"""The standby task's driver side (xpdist/driver/processes/standby.py), on real processes: when it is
started, and that a standby no job takes is ended."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from xpdist.driver.processes import standby


@pytest.fixture(autouse=True)
def _none_left():
    yield
    standby.discard()


@pytest.mark.parametrize("argv", [["--help"], ["--cfg", "job"], ["-c", "job"], ["--info"], ["--hydra-help"]])
def test_no_standby_when_hydra_prints_instead_of_running(argv):
    standby.start(argv)
    assert standby._State.server is None


@pytest.mark.parametrize("argv, started", [
    (["-m", "seed=1,2", "hydra/launcher=local_parallel"], False),  # each forked job starts its own
    (["--multirun", "hydra/sweeper=optuna"], False),
    (["-m", "seed=1,2", "hydra/launcher=basic"], True),  # jobs one after another here
    (["hydra/launcher=local_parallel"], True),  # not a sweep: one run, here
])
def test_a_sweep_whose_jobs_run_elsewhere_starts_none(argv, started):
    standby.start(argv)
    assert (standby._State.server is not None) == started


def test_xpdist_standby_0_turns_it_off(monkeypatch):
    monkeypatch.setenv(standby.ENABLE_ENV, "0")
    standby.start(["strategy=mirrored"])
    assert standby._State.server is None


def test_a_standby_no_job_takes_is_ended():
    standby.start(["strategy=mirrored"])
    proc = standby._State.server
    assert proc is not None and _cmdline(proc.pid)[-2] == "--standby"
    standby.keep_if(True)
    assert proc.poll() is None
    standby.keep_if(False)  # e.g. cluster=slurm: its tasks run elsewhere
    assert proc.returncode is not None and not psutil.pid_exists(proc.pid)
    assert standby.claim(["job"], dict(os.environ)) is None  # nothing left to hand a job to


def test_a_sweeps_job_that_cannot_use_it_leaves_it_to_the_next():
    standby.start(["-m", "seed=1,2"])
    proc = standby._State.server
    standby.serve_sweep()
    standby.keep_if(False)  # e.g. this job has verbose=true
    assert standby.claim(["job"], dict(os.environ)) is None
    assert proc.poll() is None
    standby.keep_if(True)
    assert standby._State.server is proc


def test_a_standby_that_died_is_not_handed_the_job():
    standby.start(["strategy=mirrored"])
    proc = standby._State.server
    proc.kill()
    proc.wait()
    assert standby.claim(["job"], dict(os.environ)) is None
    assert standby._State.server is None


def _cmdline(pid: int) -> list:
    """The process's command line; empty for a moment after its fork, under load."""
    deadline = time.monotonic() + 10
    while not (found := psutil.Process(pid).cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return found
