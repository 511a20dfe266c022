"""verify's comparison and its own keys, without TensorFlow: records written as the task's
recorder writes them (xpdist/core/protocol/verification.py), judged by xpdist/verify/compare.py."""

from __future__ import annotations

import numpy as np
import pytest

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.verification import FINAL_FILE, StepRecord
from xpdist.verify import compare, report
from xpdist.verify.command import parse

W = np.array([[1.0, -2.0], [0.5, 4.0]])


def record(folder, loss, norms, variables):
    folder.mkdir(parents=True)
    StepRecord("ctl", list(loss), list(norms)).write(folder)
    np.savez(folder / FINAL_FILE, **variables)
    return folder


def judge(tmp_path, run_loss, run_norms, run_vars, precision="float32"):
    ref = record(tmp_path / "ref", [1.0, 0.9, 0.8], [0.1, 0.1, 0.1], {"dense/kernel": W, "opt/iteration": np.array(3)})
    run = record(tmp_path / "run", run_loss, run_norms, run_vars)
    return compare.judge(ref, run, precision, 3)


def test_tolerance_per_precision_scales_with_steps():
    assert compare.tolerance("float32", 5) == pytest.approx(5e-5)
    assert compare.tolerance("mixed_bfloat16", 2) > compare.tolerance("mixed_float16", 2) > compare.tolerance(
        "float32", 2)


def test_equal_within_tolerance(tmp_path):
    verdict = judge(tmp_path, [1.0, 0.9 + 1e-6, 0.8], [0.1, 0.1, 0.1],
                    {"dense/kernel": W + 1e-6, "opt/iteration": np.array(3)})
    assert verdict.verdict == "equal" and verdict.exit_code == 0
    assert verdict.largest_abs == pytest.approx(1e-6)
    assert "EQUAL within 3.0e-05 (float32: 1e-05 per step x 3 steps" in report.text(verdict, "float32")


def test_differs_names_step_and_variable(tmp_path):
    kernel = W.copy()
    kernel[1, 1] = 4.4
    verdict = judge(tmp_path, [1.0, 0.95, 0.8], [0.1, 0.2, 0.1], {"dense/kernel": kernel, "opt/iteration": np.array(3)})
    assert (verdict.verdict, verdict.first_step, verdict.first_update_step) == ("differs", 2, 2)
    (worst,) = verdict.worst()
    assert worst.name == "dense/kernel"
    assert worst.max_abs == pytest.approx(0.4) and worst.max_rel == pytest.approx(0.1)
    text = report.text(verdict, "float32")
    assert "the losses part at step 2: reference 0.9, run 0.95" in text and "dense/kernel" in text
    paths = report.write(verdict, "float32", tmp_path)
    assert [p.name for p in paths] == ["steps.csv", "variables.csv", "verdict.txt"]
    assert paths[1].read_text().splitlines()[1].startswith("dense/kernel,2x2,")


def test_nonfinite_is_its_own_failure_with_its_first_step(tmp_path):
    verdict = judge(tmp_path, [1.0, 0.9, float("nan")], [0.1, float("inf"), float("nan")],
                    {"dense/kernel": W * np.nan, "opt/iteration": np.array(3)})
    assert (verdict.verdict, verdict.first_step, verdict.nonfinite_in) == ("nonfinite", 2, ["run"])
    assert "appeared at step 2 (in run)" in report.text(verdict, "float32")


def test_a_reported_loss_alone_is_a_note_not_a_difference(tmp_path):
    verdict = judge(tmp_path, [2.0, 1.8, 1.6], [0.1, 0.1, 0.1], {"dense/kernel": W, "opt/iteration": np.array(3)})
    assert verdict.verdict == "equal" and verdict.reported_loss_step == 1
    assert "(x2)" in report.text(verdict, "float32")


def test_replicas_that_disagree_are_a_difference(tmp_path):
    ref = record(tmp_path / "ref", [1.0], [0.1], {"dense/kernel": W})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    StepRecord("fit", [1.0], [0.1], replica_spread={"dense/kernel": 0.25, "dense/bias": 0.0}).write(run_dir)
    np.savez(run_dir / FINAL_FILE, **{"dense/kernel": W})
    verdict = compare.judge(ref, run_dir, "float32", 1)
    assert verdict.verdict == "differs" and verdict.replicas_apart == {"dense/kernel": 0.25}
    assert "the run's replicas disagree (copies of one variable, largest difference): dense/kernel 0.25" in \
        report.text(verdict, "float32")


def test_fewer_steps_differ(tmp_path):
    verdict = judge(tmp_path, [1.0, 0.9], [0.1, 0.1], {"dense/kernel": W, "opt/iteration": np.array(3)})
    assert verdict.verdict == "differs"
    assert "the reference recorded 3 steps, the run 2" in report.text(verdict, "float32")


def test_verify_keys_parsed_apart():
    assert parse(["strategy=mirrored", "verify.steps=3"]) == (3, ["strategy=mirrored"])
    assert parse([]) == (5, [])
    with pytest.raises(ConfigError, match="verify.steps"):
        parse(["verify.steps=0"])
    with pytest.raises(ConfigError, match="verify has one key of its own"):
        parse(["verify.step=3"])
