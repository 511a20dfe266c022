"""Every recipe composes and says how to run it; the launcher presets compose (no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, compose

RECIPES = sorted(p.relative_to(REPO / "recipes").with_suffix("").as_posix()
                 for p in (REPO / "recipes").rglob("*.yaml"))


def test_recipes_are_found_through_conf():
    assert (REPO / "conf" / "recipe").resolve() == (REPO / "recipes").resolve()
    assert {"quickstart", "strategy_sweep", "cross_ops_sweep", "digits_cnn"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_composes_and_opens_with_its_command(name):
    text = (REPO / "recipes" / f"{name}.yaml").read_text()
    header = text.split("\n\n")[0]
    assert header.startswith("# @package _global_\n"), "a recipe sets keys of the whole config"
    assert f"python -m xpdist recipe={name}\n" in header, "the opening comment gives the exact command"
    cfg = compose([f"recipe={name}"])
    assert cfg.trainer.epochs >= 1
    if "mode: MULTIRUN" in text:
        assert cfg.hydra.mode.name == "MULTIRUN" and cfg.hydra.sweeper.params


def test_quickstart_is_the_guides_example():
    cfg = compose(["recipe=quickstart"])
    assert (cfg.strategy.name, cfg.model.name, cfg.dataset.name, cfg.trainer.name) == \
        ("mirrored", "linear", "synthetic_regression", "fit")
    assert cfg.dataset.per_replica_batch_size * cfg.devices.logical_cpus == 10  # the guide's batch


def test_strategy_sweep_covers_every_single_process_strategy():
    strategies = set(compose(["recipe=strategy_sweep"]).hydra.sweeper.params.strategy.split(","))
    single_process = {p.stem for p in (REPO / "conf" / "strategy").glob("*.yaml")} - {"parameter_server", "tpu"}
    assert strategies == single_process


@pytest.mark.parametrize("launcher, target", [("local_parallel", "ParallelLauncher"), ("slurm", "SlurmLauncher"),
                                              ("submitit_slurm", "SlurmLauncher")])
def test_launcher_presets_compose(launcher, target):
    cfg = compose([f"hydra/launcher={launcher}"])
    assert cfg.hydra.launcher._target_.endswith(target)
    assert cfg.hydra.callbacks.sweep._target_ == "xpdist.driver.sweeps.sweep.SweepCallback"
