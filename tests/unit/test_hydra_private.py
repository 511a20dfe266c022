"""xpdist/driver/hydra_private.py against the installed Hydra: the basic sweeper's split of a
sweep, a failed job's exception and the mode's discovery. Fails on the Hydra release that
changes any of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal.hydra import Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus

from tests.helpers import compose
from xpdist.driver import hydra_private

REPO = Path(__file__).resolve().parents[2]


def test_the_split_is_the_basic_sweepers_cross_product_in_order():
    parsed = OverridesParser.create().parse_overrides(["strategy=one_device,mirrored", "seed=1,2", "trainer.epochs=3"])
    assert hydra_private.split_like_basic_sweeper(parsed) == [
        ["strategy=one_device", "seed=1", "trainer.epochs=3"], ["strategy=one_device", "seed=2", "trainer.epochs=3"],
        ["strategy=mirrored", "seed=1", "trainer.epochs=3"], ["strategy=mirrored", "seed=2", "trainer.epochs=3"]]


def test_the_default_sweeper_is_the_basic_one():
    assert compose(["seed=1"]).hydra.sweeper._target_ == hydra_private.BASIC_SWEEPER


def test_a_failed_jobs_exception_is_read_without_a_line_on_stderr(capsys):
    error = ValueError("boom")
    failed, done = JobReturn(), JobReturn()
    failed.status, failed.return_value = JobStatus.FAILED, error
    done.status, done.return_value = JobStatus.COMPLETED, 42
    assert hydra_private.job_error(failed) is error and hydra_private.job_result(failed) is None
    assert hydra_private.job_error(done) is None and hydra_private.job_result(done) == 42
    assert capsys.readouterr().err == ""


def test_hydra_still_composes_once_more_for_the_mode():
    """mode_from_flags stands in for Hydra.get_mode, which Hydra's command line calls before
    the job's compose (hydra-ecosystem/hydra#3440). A Hydra that no longer calls it, or calls
    it otherwise, fails here: then the workaround goes."""
    import inspect

    from hydra._internal import utils

    assert "run_mode = hydra.get_mode(config_name=config_name, overrides=overrides)" in inspect.getsource(utils._run_hydra)
    assert list(inspect.signature(Hydra.get_mode).parameters) == ["self", "config_name", "overrides"]


def test_only_recipes_set_the_mode():
    """No YAML file under conf/ but a recipe's has a `mode` key at any level (the schema's
    nodes live under the groups' own keys, never under hydra), so hydra.mode stays unset
    whatever options but a recipe a command picks."""
    import os

    from omegaconf import OmegaConf

    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield key
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    setting = []
    for root, _, files in os.walk(REPO / "conf", followlinks=True):  # conf/recipe links to recipes/
        for name in files:
            path = Path(root) / name
            if name.endswith(".yaml") and "mode" in set(keys(OmegaConf.to_container(OmegaConf.load(path)))):
                setting.append(path.relative_to(REPO / "conf").parts[0])
    assert setting and set(setting) == {"recipe"}, setting
    assert compose(["seed=1"]).hydra.mode is None


@pytest.mark.parametrize("argv, skipped", [
    (["strategy=mirrored", "trainer.epochs=2"], True),
    (["-m", "strategy=one_device,mirrored", "hydra/launcher=local_parallel"], True),
    (["hydra.mode=MULTIRUN", "seed=1,2"], False),
    (["recipe=strategy_sweep"], False),
    (["+recipe=strategy_sweep"], False),
    (["model=custom", "model._target_=my-cnn.build"], True),  # a dash inside a value is no flag
    (["--config-d", "/my/conf"], False),  # argparse's abbreviation of --config-dir
    (["--config-dir", "/my/conf", "strategy=mirrored"], False),
    (["hydra.searchpath=[file:///my/conf]"], False),
])
def test_the_mode_is_left_to_hydra_where_a_config_may_set_it(monkeypatch, argv, skipped):
    monkeypatch.setattr(Hydra, "get_mode", Hydra.get_mode)  # restored after the test
    hydras_own = Hydra.get_mode
    hydra_private.mode_from_flags(argv)
    assert (Hydra.get_mode is not hydras_own) == skipped
    if skipped:  # answered without composing
        monkeypatch.setattr(Hydra, "compose_config", lambda *a, **k: pytest.fail("composed"))
        assert Hydra.get_mode(None, "config", argv) is None
