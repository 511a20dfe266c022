"""Registering a user's own strategy, engine or data source: the public API of xpdist's seams.

A package adds options in a module that xpdist imports at the start of the driver and of every
task (xpdist/core/user_packages.py: an entry point of the group `xpdist.options`, or the
XPDIST_OPTIONS variable). The module calls these functions; from then on the option composes
(`strategy=NAME`, with its dataclass's defaults and no YAML file needed), is checked, trains,
and is listed by --help, the configuration reference and did-you-mean, as xpdist's own are.

    # my_pkg/xpdist_options.py: imported by the driver too, so no TensorFlow here
    from xpdist.core import options
    from my_pkg.toy import ToyEngineConfig, ToySource, ToyStrategySpec

    options.register_strategy("toy", ToyStrategySpec(), task="my_pkg.toy_tf")
    options.register_engine("toy_cluster", ToyEngineConfig, engine="my_pkg.toy_engine:ToyEngine")
    options.register_data_source("toy_data", ToySource(), task="my_pkg.toy_data_tf")

Each option has a half per process, given where that process finds it:
- a strategy: its spec (a StrategySpec whose `config` is its dataclass), read by both; `task`,
  the module that builds it with TensorFlow (`build(tf, cfg, plan)`, as in
  xpdist/task/strategies/), imported by the task only;
- an engine: its dataclass (extending ClusterBase, whose `place` says where its tasks read their
  part of the cluster), read by both; `engine`, its Engine subclass, used by the driver only;
- a data source: its spec (a DataSourceSpec whose `config` is its dataclass), read by both;
  `task`, the module that loads it (`load(cfg, plan, launch_dir, strategy)`, as in
  xpdist/task/data_sources/), imported by the task only.
A half given as a path ("module" or "module:attribute") is imported when first asked for, so
the driver never imports TensorFlow code and the task never imports the driver's engines.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Set, Tuple

from xpdist.core import clusters, data_sources, registry, strategies

# (group, name) of every option registered here: stored in the ConfigStore under its own name,
# since no YAML file of conf/ makes it (schema.register_configs).
REGISTERED: Set[Tuple[str, str]] = set()


def register_strategy(name: str, spec: strategies.StrategySpec, task: Any) -> None:
    """Adds strategy=name.

    Args:
        name: the option's name.
        spec: its driver half, a StrategySpec instance whose `name` is name and whose `config`
            is its dataclass (extending xpdist.core.strategies.StrategyBase, `name` defaulting to name).
        task: its task half: a module, or the module's path, with build(tf, cfg, plan) (and
            server(tf, cfg) where non-chief tasks serve a coordinator).

    Raises:
        ValueError: the names disagree or the dataclass extends no StrategyBase.
        KeyError: strategy=name is registered already.
    """
    _add("strategy", name, spec, spec.name, spec.config, task)


def register_engine(name: str, config: type, engine: Any) -> None:
    """Adds cluster=name.

    Args:
        name: the option's name.
        config: its dataclass, extending xpdist.core.clusters.ClusterBase, `name` defaulting to name.
        engine: its Engine subclass (xpdist.driver.engines.Engine), or "module:Class".

    Raises:
        ValueError: the names disagree or the dataclass extends no ClusterBase.
        KeyError: cluster=name is registered already.
    """
    _add("cluster", name, config, name, config, engine)


def register_data_source(name: str, spec: data_sources.DataSourceSpec, task: Any) -> None:
    """Adds dataset=name.

    Args:
        name: the option's name.
        spec: its driver half, a DataSourceSpec instance whose `name` is name and whose `config`
            is its dataclass (extending a base of xpdist.core.data_sources, `name` defaulting to name).
        task: its task half: a module, or the module's path, with load(cfg, plan, launch_dir, strategy).

    Raises:
        ValueError: the names disagree or the dataclass extends no DatasetBase.
        KeyError: dataset=name is registered already.
    """
    _add("dataset", name, spec, spec.name, spec.config, task)


def unregister(group: str, name: str) -> None:
    """Removes an option registered here (group: strategy, cluster or dataset), e.g. a test's toy."""
    options, half, _ = _SEAMS[group]
    options.unregister(name)
    registry.remove_half(group, half, name)
    REGISTERED.discard((group, name))
    _forget_stored(group, name)


def _forget_stored(group: str, name: str) -> None:
    """Takes the option's entries (schema.register_configs) out of Hydra's ConfigStore, where
    they would still compose. The store has no public removal: its repo is a tree of dicts."""
    from hydra.core.config_store import ConfigStore

    stored = ConfigStore.instance().repo.get(group, {})
    for entry in (f"{name}.yaml", f"base_{name}.yaml"):
        stored.pop(entry, None)


# Each group with a public seam: its registry, the name of the half that lives in one process
# only (registry.add_half), and the dataclass its options' configs extend.
_SEAMS = {"strategy": (strategies.STRATEGIES, "task", strategies.StrategyBase),
          "cluster": (clusters.CLUSTERS, "engine", clusters.ClusterBase),
          "dataset": (data_sources.DATA_SOURCES, "task", data_sources.DatasetBase)}


def _add(group: str, name: str, item: Any, spec_name: str, config: type, half: Any) -> None:
    options, half_name, base = _SEAMS[group]
    _check(name, group, spec_name, config, base)
    options.register(name)(item)
    registry.add_half(group, half_name, name, half)
    REGISTERED.add((group, name))


def _check(name: str, group: str, spec_name: str, config: type, base: type) -> None:
    if spec_name != name:
        raise ValueError(f"{group}={name}: its spec is named {spec_name!r}; give it name = {name!r}")
    if not (dataclasses.is_dataclass(config) and isinstance(config, type) and issubclass(config, base)):
        raise ValueError(f"{group}={name}: its config must be a dataclass extending {base.__module__}.{base.__name__}")
    default = {f.name: f.default for f in dataclasses.fields(config)}.get("name")
    if default != name:
        raise ValueError(f"{group}={name}: the `name` field of {config.__name__} defaults to {default!r}; "
                         f"give it name: str = {name!r}")
