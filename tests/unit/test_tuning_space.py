"""hydra/sweeper=optuna: the search space read from Hydra's sweep syntax, and a bad one
rejected in one line with exit code 2 before any trial, store or folder exists."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tests.helpers import Xpdist
from tests.helpers import compose
from xpdist.core.errors import ConfigError
from xpdist.driver.sweeps.tuning import space
from xpdist.driver.sweeps.tuning.settings import Settings


def test_hydra_sweep_syntax_becomes_optuna_distributions():
    found = space.parse({"optimizer.learning_rate": "tag(log, interval(1e-4, 1e-1))"},
                        ["dataset.per_replica_batch_size=choice(16, 32, 64)", "trainer.epochs=range(2, 6)",
                         "optimizer=sgd,adam", "seed=3"])
    assert found.distributions == {
        "optimizer.learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
        "dataset.per_replica_batch_size": CategoricalDistribution([16, 32, 64]),
        "trainer.epochs": IntDistribution(2, 5),
        "optimizer": CategoricalDistribution(["sgd", "adam"]),
    }
    assert found.fixed == ["seed=3"]
    assert found.as_params()["optimizer.learning_rate"] == "tag(log, interval(1e-4, 1e-1))"
    assert found.overrides({"optimizer.learning_rate": 0.001, "optimizer": "adam"}) == \
        ["optimizer.learning_rate=0.001", "optimizer=adam", "seed=3"]


def test_the_command_line_wins_over_the_recipe():
    found = space.parse({"optimizer.learning_rate": "interval(0.1, 0.2)"}, ["optimizer.learning_rate=choice(0.3)"])
    assert found.distributions == {"optimizer.learning_rate": CategoricalDistribution([0.3])}


def test_command_line_params_are_quoted_as_a_recipe_writes_them():
    assert space.quote_params_overrides(["hydra.sweeper.params.optimizer.learning_rate=tag(log, interval(1e-4, 1e-1))",
                                         "hydra.sweeper.params.optimizer=choice('sgd', 'adam')", "seed=1,2"]) == \
        ["++hydra.sweeper.params.optimizer.learning_rate='tag(log, interval(1e-4, 1e-1))'",
         "++hydra.sweeper.params.optimizer=\"choice('sgd', 'adam')\"", "seed=1,2"]


@pytest.mark.parametrize("line, says", [
    ("optimizer.learning_rate=interval(0.1, 0.01)", "the interval is empty"),
    ("optimizer.learning_rate=tag(log, interval(0, 0.1))", "a log interval needs a low end above 0"),
    ("trainer.epochs=range(5, 5)", "the range is empty"),
])
def test_empty_dimensions_are_config_errors(line, says):
    with pytest.raises(ConfigError, match=says) as err:
        space.parse({}, [line])
    assert str(err.value).startswith(line + ": ")


def test_grid_needs_listable_values():
    found = space.parse({}, ["optimizer.learning_rate=interval(0.1, 0.2)", "trainer.epochs=range(1, 4)"])
    with pytest.raises(ConfigError, match="sampler=grid needs values to list"):
        found.grid()
    assert space.parse({}, ["trainer.epochs=range(1, 4)"]).grid() == {"trainer.epochs": [1, 2, 3]}


def test_settings_read_nested_params_as_dotted_keys():
    cfg = compose(["hydra/sweeper=optuna", "++hydra.sweeper.params.optimizer.learning_rate='interval(0.1, 0.2)'"])
    settings = Settings.from_config(cfg.hydra.sweeper)
    assert settings.params == {"optimizer.learning_rate": "interval(0.1, 0.2)"}
    assert (settings.direction, settings.sampler, settings.pruner) == ("minimize", "tpe", "none")


def assert_rejected(xpdist: Xpdist, proc, key: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"xpdist: error: {key}="), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    # Before any trial: no store, no study, no sweep folder.
    assert sorted(p.name for p in xpdist.workdir.iterdir()) == []
    return lines[0]


@pytest.mark.parametrize("overrides, key, says", [
    (["hydra.sweeper.params.optimizer.learnin_rate=tag(log, interval(1e-4, 1e-1))"],
     "hydra.sweeper.params.optimizer.learnin_rate", "learnin_rate"),
    (["optimizer.learning_rate=interval(0.1, 0.01)"], "optimizer.learning_rate", "the interval is empty"),
    (["hydra.sweeper.params.optimizer.learning_rate=choice(fast, slow)"],
     "hydra.sweeper.params.optimizer.learning_rate", "refuses optimizer.learning_rate=fast"),
    (["hydra.sweeper.objective=val_loss", "optimizer.learning_rate=interval(0.01, 0.1)"],
     "hydra.sweeper.objective", "dataset.validation_split=0"),
    (["hydra.sweeper.sampler=grid", "optimizer.learning_rate=interval(0.01, 0.1)"],
     "optimizer.learning_rate", "sampler=grid"),
    (["seed=1"], "hydra.sweeper.params", "nothing to search"),
])
def test_a_bad_search_space_is_one_line_and_exit_2(xpdist, overrides, key, says):
    proc = xpdist.run("hydra/sweeper=optuna", *overrides, multirun=True, tiny=False, timeout=120, fork="check")
    assert says in assert_rejected(xpdist, proc, key)
