"""The strategy seam: every strategy is one driver module, one task module, one YAML and one schema
entry, and the rest of xpdist asks the strategy's spec instead of comparing its name.

A toy strategy registered here, and nowhere else, is honoured by the plan, preflight, the
params and the localhost launcher's layout: the proof that no other module needs an edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List

import pytest
from omegaconf import OmegaConf

from tests.unit.unit_helpers import CONF, plain
from xpdist.core import options, plan as planning, schema, strategies
from xpdist.core.errors import ConfigError
from xpdist.core.registry import Registry
from xpdist.driver.checks import check, preflight
from xpdist.driver.processes import localhost
from xpdist.tracking import params

REPO = Path(__file__).resolve().parents[2]


def test_a_registry_refuses_a_duplicate_and_names_the_nearest_on_an_unknown_name():
    registry = Registry("strategy")
    registry.register("mirrored")(object())
    with pytest.raises(KeyError, match="registered twice"):
        registry.register("mirrored")(object())
    with pytest.raises(KeyError) as err:
        registry.get("mirrord")
    assert "strategy=mirrord is unknown. Known: mirrored." in str(err.value)
    assert "Did you mean strategy=mirrored?" in str(err.value)


def test_every_strategy_has_its_driver_module_task_module_yaml_and_schema_entry():
    from xpdist.task import strategies as task_strategies

    driver = set(strategies.STRATEGIES)
    task = set(task_strategies.STRATEGIES)
    yamls = {path.stem for path in (CONF / "strategy").glob("*.yaml")}
    assert driver == task == yamls == set(schema.OPTIONS["strategy"])
    for name in driver:
        assert strategies.get(name).name == name
        assert callable(task_strategies.STRATEGIES.get(name).build), name


def test_the_task_registries_name_exactly_the_options_of_their_groups():
    """cross_ops, communication, optimizer and trainer dispatch through a table, each the schema's options."""
    from xpdist.task import models, runner
    from xpdist.task.strategies import mirrored, multi_worker_mirrored

    tables = {"cross_ops": mirrored.CROSS_OPS, "communication": multi_worker_mirrored.IMPLEMENTATIONS,
              "optimizer": models.OPTIMIZERS, "trainer": runner.TRAINERS}
    for group, table in tables.items():
        assert set(table) == set(schema.OPTIONS[group]), group


@pytest.mark.parametrize("name", sorted(strategies.STRATEGIES))
def test_every_spec_answers_for_a_config_of_its_own(tmp_path, name):
    """The conformance every strategy passes: its answers are well formed and the plan uses them."""
    spec = strategies.get(name)
    assert set(spec.applies_to) <= set(strategies.TUNING_GROUPS)
    assert spec.needs in (strategies.ONE_PROCESS, strategies.WORKERS, strategies.CHIEF_WORKERS_PS)
    assert {spec.keras_flavour("fit"), spec.keras_flavour("ctl")} <= {"keras3", "legacy"}
    assert spec.keras_flavour("ctl") == "keras3"  # only Model.fit ever needs tf-keras
    overrides = [f"strategy={name}", "devices.logical_cpus=2"]
    if spec.needs.multi_process:
        overrides += ["cluster=localhost", f"cluster.ps={int(spec.needs.has_ps)}"]
    cfg = plain(*overrides)
    plan = planning.make_plan(cfg, tmp_path)
    assert plan.strategy == name
    assert plan.num_replicas == spec.replicas(cfg, planning.local_devices(cfg), plan.num_workers) >= 1
    assert plan.num_workers == (2 if spec.needs.multi_process else 1)
    assert bool(plan.devices) == spec.uses_devices
    for group in strategies.TUNING_GROUPS:
        assert (getattr(plan, group) != "none") == (group in spec.applies_to)


def test_the_tuning_group_rule_reads_the_specs():
    tuned_by = {group: strategies.names_where(lambda s: group in s.applies_to) for group in strategies.TUNING_GROUPS}
    assert tuned_by == {"cross_ops": ["mirrored"], "communication": ["multi_worker_mirrored"]}
    assert strategies.applied_groups("no_such_strategy") == ()


# ---- a toy strategy, registered through the public API only ------------------------------------

@dataclass
class ToyStrategy(strategies.StrategyBase):
    name: str = "toy"


class Toy(strategies.StrategySpec):
    """Three replicas over a cluster of workers, tuned by cross_ops; refuses seed=13."""

    name = "toy"
    config = ToyStrategy
    applies_to = ("cross_ops",)
    needs = strategies.WORKERS
    keras3_fit = strategies.Keras3Fit.wrong_metrics

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        return 3

    def preflight(self, cfg) -> None:
        if cfg.seed == 13:
            raise ConfigError("seed", 13, "the toy strategy refuses it", "Use another seed.")
        super().preflight(cfg)


@pytest.fixture
def toy():
    options.register_strategy("toy", Toy(), task="tests.unit.test_strategy_seam")
    schema.register_configs()
    yield
    options.unregister("strategy", "toy")


def toy_config(*overrides: str):
    cfg = plain("strategy=toy", "cluster=localhost", *overrides)  # composed from its schema, no YAML
    assert OmegaConf.to_container(cfg.strategy) == {"name": "toy"}
    return cfg


def test_a_toy_strategy_is_planned_and_checked_by_its_spec(tmp_path, toy, capsys):
    cfg = toy_config("cross_ops=hierarchical", "cluster.workers=3")
    plan = preflight.check(cfg, tmp_path)
    assert (plan.strategy, plan.num_replicas, plan.num_workers) == ("toy", 3, 3)
    assert (plan.cross_ops, plan.communication, plan.keras) == ("hierarchical", "none", "legacy")
    assert plan.run_name == "toy-hierarchical-3r"
    assert plan.global_batch_size == 3 * plan.per_replica_batch_size
    assert "strategy:      toy (cross_ops=hierarchical)" in "\n".join(check.describe(cfg, plan, "sqlite:///x.db"))

    with pytest.raises(ConfigError, match=r"^seed=13: the toy strategy refuses it"):
        preflight.check(toy_config("seed=13"), tmp_path)
    preflight.check(toy_config("keras=keras3"), tmp_path)
    assert "wrong loss and metrics under strategy=toy" in capsys.readouterr().err


def test_other_strategies_and_clusters_learn_of_the_toy_from_its_spec(tmp_path, toy):
    with pytest.raises(ConfigError) as err:  # default runs in one process; toy is offered instead
        preflight.check(plain("cluster=localhost"), tmp_path)
    assert "Use cluster=local, or strategy=multi_worker_mirrored or parameter_server or toy." in str(err.value)
    with pytest.raises(ConfigError) as err:  # cross_ops now tunes mirrored and toy
        preflight.check(plain("strategy=one_device", "cross_ops=hierarchical"), tmp_path)
    assert "cross-device ops apply to strategy=mirrored or toy only" in str(err.value)


def test_the_toys_params_and_cluster_layout_follow_its_spec(toy):
    cfg = toy_config("cross_ops=hierarchical", "cluster.workers=2")
    logged = params.option_params(OmegaConf.to_container(cfg))
    assert logged["cross_ops.num_packs"] == "1"
    assert not any(key.startswith("communication.") for key in logged)
    spec, tasks, chief = localhost.cluster_spec(cfg)
    assert list(spec) == ["worker"] and len(tasks) == 2 and chief.name == "worker:0"


def test_no_module_outside_the_seam_names_a_strategy():
    """plan, preflight, params, the trainers and the launchers ask the spec (messages may name one)."""
    seam = (REPO / "xpdist" / "core" / "strategies", REPO / "xpdist" / "task" / "strategies")
    names = sorted(strategies.STRATEGIES)
    offenders = []
    for path in (REPO / "xpdist").rglob("*.py"):
        if any(folder in path.parents for folder in seam) or path.name == "schema.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(REPO)}: {name}" for name in names
                      if f'== "{name}"' in text or f'!= "{name}"' in text or f'("{name}",' in text]
    assert offenders == []


# ---- a subclass of a strategy's TensorFlow class, named by strategy._target_ --------------

class TensorFlowsClass:
    """Stands for a strategy's TensorFlow class: strategy_class only checks subclassing."""


class UsersSubclass(TensorFlowsClass):
    pass


def test_strategy_target_names_a_subclass_built_in_the_options_place():
    from xpdist.task.strategies import strategy_class

    tf = type("tf", (), {"keras": None})
    assert strategy_class(tf, plain("strategy=mirrored"), TensorFlowsClass) is TensorFlowsClass
    cfg = plain("strategy=mirrored", f"strategy._target_={__name__}.UsersSubclass")
    assert strategy_class(tf, cfg, TensorFlowsClass) is UsersSubclass
    cfg = plain("strategy=mirrored", f"strategy._target_={__name__}.test_a_registry_refuses_a_duplicate_"
                                     "and_names_the_nearest_on_an_unknown_name")
    with pytest.raises(ValueError, match=r"^strategy._target_=\S+ is not a subclass of TensorFlowsClass, the class "
                                         r"of strategy=mirrored: give a subclass of it\.$"):
        strategy_class(tf, cfg, TensorFlowsClass)


# tpu takes the key too; its own check (no TPU here) refuses the config first.
@pytest.mark.parametrize("name", ["one_device", "mirrored", "central_storage", "multi_worker_mirrored",
                                  "parameter_server"])
def test_every_strategy_with_a_class_takes_a_target_and_checks_its_package(tmp_path, name):
    cfg = plain(f"strategy={name}", "strategy._target_=no_such_package.Strategy")
    with pytest.raises(ConfigError) as err:
        strategies.of(cfg).preflight(cfg)
    assert err.value.key == "strategy._target_" and "no module 'no_such_package'" in str(err.value)


def test_the_default_strategy_has_no_class_to_replace():
    with pytest.raises(Exception, match="Could not override 'strategy._target_'"):
        plain("strategy=default", "strategy._target_=my_pkg.Strategy")


def test_every_strategys_schema_pickles_by_reference():
    """A parallel sweep's job sends its composed config back to the sweep by pickle: every
    strategy's schema, one made from its base (config_base) too, is found by module and name."""
    import pickle

    for name in strategies.STRATEGIES:
        cls = strategies.get(name).config
        assert pickle.loads(pickle.dumps(cls)) is cls, name
