"""Hydra's compose errors as xpdist prints them: the nearest known name, what a key takes.

In process, through tests.unit.test_bad_inputs.refusal (the line the driver prints);
tests/unit/test_cli.py checks the same lines from the real command.
"""

from __future__ import annotations

import pytest

from tests.unit.test_bad_inputs import refusal
from xpdist.core import docs
from xpdist.core.errors import did_you_mean


@pytest.mark.parametrize("overrides, suggestion", [
    (["strategy=mirrord"], "Did you mean strategy=mirrored?"),
    (["strategy=multi_worker_mirored"], "Did you mean strategy=multi_worker_mirrored?"),
    (["cross_ops=hierarchichal", "strategy=mirrored"], "Did you mean cross_ops=hierarchical?"),
    (["recipe=quickstar"], "Did you mean recipe=quickstart?"),
    (["recipe=digit_cnn"], "Did you mean recipe=digits_cnn?"),
    (["trainer.epoch=3"], "Did you mean trainer.epochs?"),
    (["trainer.progres=false"], "Did you mean trainer.progress?"),
    (["tracking.experimnt=x"], "Did you mean tracking.experiment?"),
    (["strateg=mirrored"], "Did you mean strategy?"),
    (["keras=keras4"], "Did you mean keras=keras3?"),  # an enum's values, too
])
def test_a_misspelled_name_gets_the_nearest_one(tmp_path, overrides, suggestion):
    line = refusal(tmp_path, *overrides)
    assert line is not None and "\n" not in line
    assert suggestion in line, line


def test_the_list_of_options_follows_the_suggestion(tmp_path):
    line = refusal(tmp_path, "strategy=mirrord")
    assert line == ("strategy=mirrord: there is no such strategy option. Did you mean strategy=mirrored? "
                    "Use one of: central_storage, default, mirrored, multi_worker_mirrored, one_device, "
                    "parameter_server, tpu.")


@pytest.mark.parametrize("overrides", [["strategy=xyz"], ["recipe=zzz"], ["trainer.qqq=1"]])
def test_nothing_near_means_no_suggestion(tmp_path, overrides):
    line = refusal(tmp_path, *overrides)
    assert line is not None and "Did you mean" not in line and ("Use one of" in line or "Its keys are" in line)


def test_did_you_mean_picks_one_close_name_or_none():
    assert did_you_mean("mirrord", ["one_device", "mirrored"], "strategy=") == " Did you mean strategy=mirrored?"
    assert did_you_mean("tpu", ["mirrored", "default"]) == ""


@pytest.mark.parametrize("override, says", [
    ("trainer.epochs=two", "trainer.epochs=two: trainer.epochs takes a whole number, not 'two'. "
                           "Use e.g. trainer.epochs=2."),
    ("seed=1.5", "seed=1.5: seed takes a whole number, not '1.5'. Use e.g. seed=42."),
    ("optimizer.learning_rate=fast", "optimizer.learning_rate takes a number, not 'fast'. "
                                     "Use e.g. optimizer.learning_rate=0.01."),
    ("verbose=maybe", "verbose takes true or false, not 'maybe'. Use e.g. verbose=false."),
    ("trainer.steps_per_epoch=abc", "trainer.steps_per_epoch takes a whole number or null, not 'abc'."),
    ("optimizer.lr_scaling=cubic", "optimizer.lr_scaling takes one of none, linear, sqrt, table, not 'cubic'."),
])
def test_a_wrong_type_says_what_the_key_takes(tmp_path, override, says):
    line = refusal(tmp_path, override)
    assert says in line, line
    assert "could not be converted" not in line and "of type" not in line
    key = override.split("=")[0]
    assert line.startswith(f"{key}=") and line.endswith(f"See {key} in {docs.page('configuration.md')}.")


def test_a_new_key_of_a_typed_mapping_gets_the_override_that_adds_it(tmp_path):
    """optimizer.lr_table={...} replaces a known mapping: the line's hint must be an override that composes."""
    table = "optimizer.lr_table={5: 0.1, 10: 0.15}"
    line = refusal(tmp_path, "optimizer.lr_scaling=table", table)
    assert line == f"{table}: '5' is a new key there. Add it with ++{table}.", line
    assert refusal(tmp_path, "optimizer.lr_scaling=table", f"++{table}") is None
