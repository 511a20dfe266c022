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
from xpdist.api import RESULT_FILE_ENV, ConfigRejected, Result, RunFailed
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
