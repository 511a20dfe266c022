"""The standby task's driver side (xpdist/driver/standby.py), on real processes: when it is
started, and that a standby no job takes is ended."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from tests.unit.unit_helpers import plain
from xpdist.driver import engines, standby


@pytest.fixture(autouse=True)
def _none_left():
    yield
    standby.discard()


@pytest.mark.parametrize("argv", [["--help"], ["--cfg", "job"], ["-c", "job"], ["--info"], ["--hydra-help"]])
def test_no_standby_when_hydra_prints_instead_of_running(argv):
    standby.start(argv)
    assert standby._State.procs == []


@pytest.mark.parametrize("argv, started", [
    (["-m", "seed=1,2", "hydra/launcher=local_parallel"], 0),  # each forked job starts its own
    (["--multirun", "hydra/sweeper=optuna"], 0),
    (["-m", "seed=1,2", "hydra/launcher=basic"], 1),  # jobs one after another here
    (["hydra/launcher=local_parallel"], 1),  # not a sweep: one run, here
])
def test_a_sweep_whose_jobs_run_elsewhere_starts_none(argv, started):
    standby.start(argv)
    assert len(standby._State.procs) == started


def test_xpdist_standby_0_turns_it_off(monkeypatch):
    monkeypatch.setenv(standby.ENABLE_ENV, "0")
    standby.start(["strategy=mirrored"])
    assert standby._State.procs == []


def test_a_standby_no_job_takes_is_ended():
    standby.start(["strategy=mirrored"])
    (proc,) = standby._State.procs
    assert proc is not None and _cmdline(proc.pid)[-1] == "--standby"
    standby.keep_if(True)
    assert proc.poll() is None
    standby.keep_if(False)  # e.g. cluster=localhost: its tasks are started with their TF_CONFIG
    assert proc.returncode is not None and not psutil.pid_exists(proc.pid)
    assert standby.claim(["job"], dict(os.environ)) is None  # nothing left to hand a job to


def test_a_sweep_in_this_process_gets_one_standby_per_job_and_no_more():
    standby.expect_jobs(3)
    started = []
    for _ in range(4):  # a fourth refill (after the last job) starts nothing
        standby.refill()
        if standby._State.procs:
            started.extend(standby._State.procs)
            standby.discard()  # as if a job had claimed it
    assert len(started) == 2  # the first job's was started with the command
    assert all(proc.returncode is not None for proc in started)


def test_a_standby_that_died_is_not_handed_the_job():
    standby.start(["strategy=mirrored"])
    (proc,) = standby._State.procs
    proc.kill()
    proc.wait()
    assert standby.claim(["job"], dict(os.environ)) is None


@pytest.mark.parametrize("argv, tasks", [
    # the cluster's own count, its defaults (conf/cluster/localhost.yaml's 2 workers) unless given
    (["strategy=multi_worker_mirrored", "cluster=localhost"], 2),
    (["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=3"], 3),
    (["strategy=parameter_server", "cluster=localhost", "cluster.ps=1"], 4),  # coordinator, 2 workers, 1 ps
    (["strategy=mirrored", "cluster=localhost"], 1),  # refused by preflight: one is enough
    (["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=two"], 1),
    (["strategy=multi_worker_mirrored", "cluster=slurm"], 1),  # its tasks run elsewhere
    (["-m", "strategy=multi_worker_mirrored", "cluster=localhost", "seed=1,2"], 1),  # one job at a time
])
def test_a_localhost_cluster_on_the_command_line_gets_a_standby_per_task(argv, tasks):
    assert engines.local_tasks(argv) == tasks
    standby.start(argv)
    standby.top_up(engines.local_tasks(argv))
    assert len(standby._State.procs) == tasks


def test_the_localhost_defaults_are_the_configs():
    cluster = plain("cluster=localhost")["cluster"]
    assert engines.local_tasks(["strategy=multi_worker_mirrored", "cluster=localhost"]) == cluster.workers


def test_no_more_standbys_where_none_was_started(monkeypatch):
    monkeypatch.setenv(standby.ENABLE_ENV, "0")
    standby.start(["strategy=multi_worker_mirrored", "cluster=localhost"])
    standby.top_up(2)
    assert standby._State.procs == []


def _cmdline(pid: int) -> list:
    """The process's command line; empty for a moment after its fork, under load."""
    deadline = time.monotonic() + 10
    while not (found := psutil.Process(pid).cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return found
