"""xpdist.run(): the command's outcome as a Result, or its errors as exceptions.

The exit codes are mapped on a stand-in for `python -m xpdist` (a script that writes the
result file the driver writes, and exits with the code given); a rejected config goes
through the real command, which exits before TensorFlow. A real training through run() is
the integration tier's to run.
"""

from __future__ import annotations

import json
import sys

import pytest

import xpdist
from tests.helpers import xpdist_env
from xpdist.api import RESULT_FILE_ENV, ConfigRejected, Result, RunFailed, SweepJob, SweepResult
from xpdist.core.errors import ConfigError

FINISHED = {"run_id": "abc123", "status": "FINISHED", "metrics": {"loss": 0.03, "mae": 0.17},
            "run_name": "mirrored-hierarchical-2r", "error": None, "num_replicas": 2, "global_batch_size": 10,
            "wall_time_s": 9.5, "overrides": ["strategy=mirrored"], "task_name": None}


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """Makes run() start a script that prints, writes `outcome` as the driver would, and exits with `code`."""
    def make(code: int, outcome=None, stderr: str = ""):
        script = tmp_path / "fake_python"
        write = f"printf '%s' '{json.dumps(outcome)}' > \"${RESULT_FILE_ENV}\"" if outcome else ":"
        script.write_text(f"#!/bin/sh\necho \"args: $*\"\n{write}\nprintf '{stderr}' >&2\nexit {code}\n")
        script.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(script))
    return make


def test_a_finished_run_is_a_result(stand_in, capsys):
    stand_in(0, FINISHED)
    result = xpdist.run(["strategy=mirrored", "cross_ops=hierarchical"])
    assert result == Result(run_id="abc123", status="FINISHED", metrics={"loss": 0.03, "mae": 0.17},
                            run_name="mirrored-hierarchical-2r", num_replicas=2, global_batch_size=10, wall_time_s=9.5)
    assert "args: -m xpdist strategy=mirrored cross_ops=hierarchical" in capsys.readouterr().out  # relayed


def test_a_failed_run_raises_with_its_result(stand_in):
    stand_in(1, {**FINISHED, "status": "FAILED", "error": "TaskError: out of memory"})
    with pytest.raises(RunFailed) as err:
        xpdist.run(["model=cnn"], quiet=True)
    assert err.value.result.status == "FAILED" and err.value.result.run_id == "abc123"
    assert "out of memory" in str(err.value)


def test_an_interrupted_run_raises_keyboard_interrupt(stand_in):
    stand_in(130, {**FINISHED, "status": "KILLED"})
    with pytest.raises(KeyboardInterrupt):
        xpdist.run([], quiet=True)


def test_a_rejected_config_is_a_config_error_with_the_commands_line(stand_in, capsys):
    stand_in(2, None, "xpdist: error: trainer.epochs=0: must be above 0. Set trainer.epochs to a positive value.\\n")
    with pytest.raises(ConfigError) as err:
        xpdist.run(["trainer.epochs=0"])
    assert isinstance(err.value, ConfigRejected) and isinstance(err.value, ValueError)
    assert (err.value.key, err.value.received) == ("trainer.epochs", "0")
    assert str(err.value) == "trainer.epochs=0: must be above 0. Set trainer.epochs to a positive value."
    assert "xpdist: error" not in capsys.readouterr().err  # the exception carries it, not the output


def test_the_real_command_rejects_before_anything_is_created(tmp_path):
    with pytest.raises(ConfigRejected) as err:
        xpdist.run(["strategy=mirrord"], cwd=tmp_path, env=xpdist_env(), quiet=True)
    assert err.value.key == "strategy" and "Did you mean strategy=mirrored?" in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("overrides", ["strategy=mirrored", ["-m", "strategy=mirrored,one_device"]])
def test_a_string_or_a_sweep_is_refused_before_starting(overrides):
    with pytest.raises((TypeError, ValueError)):
        xpdist.run(overrides)


SWEPT = {"parent_run_id": "parent1", "status": "FAILED", "error": "1 of 2 jobs failed", "jobs": [
    {"job": 0, "overrides": "strategy=one_device", "run_id": "c0", "run_name": "0-one_device-1r", "status": "FINISHED",
     "error": None, "metrics": {"loss": 0.03}, "num_replicas": 1, "global_batch_size": 5, "wall_time_s": 4.2},
    {"job": 1, "overrides": "strategy=mirrored cross_ops=nccl", "run_id": "c1", "run_name": "1-rejected",
     "status": "FAILED", "error": "cross_ops=nccl: needs GPUs", "metrics": {}, "num_replicas": None,
     "global_batch_size": None, "wall_time_s": 0.0},
]}


def test_a_sweep_is_its_parent_run_and_its_jobs_and_a_failed_job_does_not_raise(stand_in, capsys):
    stand_in(1, SWEPT)
    swept = xpdist.sweep(["strategy=one_device,mirrored", "cross_ops=auto,nccl"])
    assert "args: -m xpdist -m strategy=one_device,mirrored cross_ops=auto,nccl" in capsys.readouterr().out
    assert isinstance(swept, SweepResult) and (swept.parent_run_id, swept.status) == ("parent1", "FAILED")
    assert [job.run_id for job in swept.jobs] == ["c0", "c1"] and all(isinstance(j, SweepJob) for j in swept.jobs)
    assert swept.jobs[0] == SweepJob(run_id="c0", status="FINISHED", metrics={"loss": 0.03}, run_name="0-one_device-1r",
                                     num_replicas=1, global_batch_size=5, wall_time_s=4.2, job=0,
                                     overrides="strategy=one_device")
    assert [job.job for job in swept.failed] == [1] and "nccl" in swept.failed[0].error


def test_a_sweep_given_with_its_own_dash_m_runs_once_with_it(stand_in, capsys):
    stand_in(0, {**SWEPT, "status": "FINISHED", "error": None, "jobs": SWEPT["jobs"][:1]})
    swept = xpdist.sweep(["-m", "seed=1,2"])
    assert "args: -m xpdist -m seed=1,2\n" in capsys.readouterr().out
    assert swept.status == "FINISHED" and swept.failed == []


def test_a_sweep_that_cannot_start_raises_config_rejected(stand_in):
    stand_in(2, None, "xpdist: error: optimizer.learning_rate=interval(0.1, 0.01): the interval is empty. Fix it.\n")
    with pytest.raises(ConfigRejected) as err:
        xpdist.sweep(["hydra/sweeper=optuna", "optimizer.learning_rate=interval(0.1, 0.01)"], quiet=True)
    assert err.value.key == "optimizer.learning_rate"


def test_the_sweep_callback_writes_the_outcome_sweep_reads(tmp_path, monkeypatch):
    """The driver's half: what on_multirun_end writes is what xpdist.sweep() turns into a SweepResult."""
    from types import SimpleNamespace

    from xpdist.driver.sweeps import sweep as driver_sweep

    path = tmp_path / "result.json"
    monkeypatch.setenv(RESULT_FILE_ENV, str(path))
    run = SimpleNamespace(info=SimpleNamespace(run_id="c0"),
                          data=SimpleNamespace(metrics={"loss": 0.03, "system/cpu_utilization_percentage": 50.0}))
    rows = [{"job": 0, "overrides": "seed=1", "run_id": "c0", "run_name": "0-default-1r", "status": "FINISHED",
             "error": None, "replicas": 1, "global_batch": 5, "wall_time_s": None}]
    driver_sweep._write_outcome("parent1", "FINISHED", None, rows, [run])
    outcome = json.loads(path.read_text())
    assert outcome["parent_run_id"] == "parent1" and outcome["jobs"][0]["metrics"] == {"loss": 0.03}
    assert set(outcome["jobs"][0]) <= set(SweepJob.__dataclass_fields__)
    monkeypatch.delenv(RESULT_FILE_ENV)
    path.unlink()
    driver_sweep._write_outcome("parent1", "FINISHED", None, rows, [run])
    assert not path.exists()  # written only where xpdist.sweep() asks for it
