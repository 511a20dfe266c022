"""hydra/launcher=local_parallel's own parts (xpdist/driver/sweeps/parallel_launcher.py): n_jobs read as
joblib read it and refused before the sweep starts, and MLflow's database connections not
shared with a forked job, on a real SQLite store and a real fork. The sweeps themselves run in
tests/integration/test_sweeps.py and test_standby.py."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from xpdist.core.errors import ConfigError
from xpdist.driver.sweeps import parallel_launcher
from xpdist.tracking import heartbeat, store


@pytest.mark.parametrize("n_jobs, cores, expected", [(3, 2, 3), (-1, 2, 2), (-2, 4, 3), (-5, 2, 1)])
def test_n_jobs_as_joblib_reads_it(monkeypatch, n_jobs, cores, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert parallel_launcher.jobs_at_once(n_jobs) == expected


@pytest.mark.parametrize("n_jobs", [0, 1.5, "two", True])
def test_n_jobs_refused_in_one_line(n_jobs):
    with pytest.raises(ConfigError, match=r"^hydra.launcher.n_jobs=.*: jobs at once must be a whole number"):
        parallel_launcher.jobs_at_once(n_jobs)


def test_the_cli_refuses_n_jobs_0_before_the_sweep_starts(xpdist):
    done = xpdist.run("seed=1,2", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=0", multirun=True, fork="check")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("xpdist: error: hydra.launcher.n_jobs=0: jobs at once must be a whole number")
    assert not (xpdist.workdir / "mlflow.db").exists() and not (xpdist.workdir / "multirun").exists()


def _child_uses_the_store(uri, run_id, conn) -> None:
    """In the forked process: writes through the store, and says which process opened the
    SQLite connection it wrote with."""
    heartbeat.forked()
    store.set_tags(uri, run_id, {"child": "yes"})
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    owners = []
    event.listen(Pool, "checkout", lambda _c, record, _p: owners.append(record.info.get("pid")))
    store.set_tags(uri, run_id, {"child2": "yes"})
    conn.send(owners)
    os._exit(0)


def test_a_forked_process_opens_its_own_database_connections(store_uri):
    uri = store_uri
    run_id = store.create_run(uri, "forks", "parent", {}, {})
    store.set_tags(uri, run_id, {"parent": "yes"})  # the pool now holds this process's connection
    store.fork_safe_connections()
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe(duplex=False)
    with heartbeat.paused():
        proc = context.Process(target=_child_uses_the_store, args=(uri, run_id, theirs))
        proc.start()
    owners = ours.recv()
    proc.join(30)
    assert proc.exitcode == 0
    assert owners and set(owners) == {proc.pid}, "the child wrote with a connection of its own"
    store.set_tags(uri, run_id, {"after": "yes"})  # the parent's connection still works
    tags = store.client(uri).get_run(run_id).data.tags
    assert {tags["parent"], tags["child"], tags["child2"], tags["after"]} == {"yes"}


def _child_keeps_its_run_alive(uri, run_id, conn) -> None:
    """In a process forked without heartbeat.forked(): its own run's heartbeat beats."""
    try:
        heartbeat.keep_alive(uri, run_id, 0.05)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if store.client(uri).get_run(run_id).data.tags.get(heartbeat.HEARTBEAT_TAG) != "0":
                conn.send("beating")
                break
            time.sleep(0.05)
        else:
            conn.send("no heartbeat written")
    except Exception as err:  # noqa: BLE001  told to the test
        conn.send(repr(err))
    os._exit(0)


def test_a_process_forked_after_runs_beat_here_keeps_its_own_runs_alive(store_uri):
    """A fork that does not call heartbeat.forked() (a user's multiprocessing): the parent's
    beating thread does not come along, and the child's first run starts its own."""
    uri = store_uri
    parent_run = store.create_run(uri, "forks", "parent", {}, {})
    heartbeat.keep_alive(uri, parent_run, 60)  # this process's heartbeat thread runs
    child_run = store.create_run(uri, "forks", "child", {}, {heartbeat.HEARTBEAT_TAG: "0"})
    store.fork_safe_connections()
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe(duplex=False)
    try:
        with heartbeat.paused():
            proc = context.Process(target=_child_keeps_its_run_alive, args=(uri, child_run, theirs))
            proc.start()
        assert ours.poll(60) and ours.recv() == "beating"
        proc.join(30)
    finally:
        heartbeat.let_go(parent_run)
