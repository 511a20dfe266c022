"""The standby task's driver side (xpdist/driver/standby.py), on real processes: when it is
started, and that a standby no job takes is ended."""

from __future__ import annotations

import os

import psutil
import pytest

from xpdist.driver import standby


@pytest.fixture(autouse=True)
def _none_left():
    yield
    standby.discard()


@pytest.mark.parametrize("argv", [["-m", "strategy=mirrored"], ["--multirun"], ["--help"], ["--cfg", "job"],
                                  ["hydra.mode=MULTIRUN"], ["-c", "job"], ["--info"]])
def test_no_standby_for_a_sweep_or_hydras_information(argv):
    standby.start(argv)
    assert standby._State.proc is None


def test_xpdist_standby_0_turns_it_off(monkeypatch):
    monkeypatch.setenv(standby.ENABLE_ENV, "0")
    standby.start(["strategy=mirrored"])
    assert standby._State.proc is None


def test_a_standby_no_job_takes_is_ended():
    standby.start(["strategy=mirrored"])
    proc = standby._State.proc
    assert proc is not None and psutil.Process(proc.pid).cmdline()[-1] == "--standby"
    standby.keep_if(True)
    assert proc.poll() is None
    standby.keep_if(False)  # e.g. cluster=localhost: its tasks are started with their TF_CONFIG
    assert proc.returncode is not None and not psutil.pid_exists(proc.pid)
    assert standby.claim(["job"], dict(os.environ)) is None  # nothing left to hand a job to


def test_a_standby_that_died_is_not_handed_the_job():
    standby.start(["strategy=mirrored"])
    proc = standby._State.proc
    proc.kill()
    proc.wait()
    assert standby.claim(["job"], dict(os.environ)) is None
