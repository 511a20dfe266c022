"""The config schema: the whole config's dataclass, and every option of each Hydra config group.

Each option's dataclass lives with the option: a strategy's in its module of
xpdist/core/strategies/, a data source's in xpdist/core/data_sources/, a cluster option's in
xpdist/core/clusters/, the training pieces' in schema/groups.py, schema/optim.py and
schema/training.py, each registered where it is defined. OPTIONS reads them from those
registries, so an option (xpdist's or a user package's, xpdist/core/options.py) is listed
once, where it is defined. Each option's dataclass is stored in Hydra's ConfigStore as `<group>/base_<name>`, and the
option's YAML file (conf/<group>/<name>.yaml) extends it through its defaults list, carrying
values only. So a key that the chosen option does not have (`model=linear model.filters=[8]`),
a misspelled key or a wrong type fails when Hydra composes the config, with Hydra's message.
`name` is fixed by each option's dataclass: the code dispatches on it, and no file repeats it.
This module imports no TensorFlow: the process that composes configs never needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from xpdist.core import clusters, data_sources, docs, options as user_options, rules, strategies
from xpdist.core.clusters import ClusterBase
from xpdist.core.data_sources import DatasetBase
from xpdist.core.errors import ConfigError, did_you_mean
from xpdist.core.registry import Registry
from xpdist.core.schema import help_text
from xpdist.core.schema.groups import COMMUNICATIONS, CROSS_OPS, CommunicationBase, CrossOpsBase, MODELS, ModelBase
from xpdist.core.schema.optim import OPTIMIZERS, OptimizerBase, TRAINERS, TrainerBase
from xpdist.core.schema.training import CALLBACKS, LOSSES, LossBase, SCHEDULES, ScheduleBase
from xpdist.core.strategies import StrategyBase


class KerasFlavour(Enum):
    # tf-keras exactly where Keras 3 cannot train (Model.fit under multi-worker or PS), else Keras 3.
    auto = 0
    keras3 = 1
    legacy = 2


class ResizeKeep(Enum):
    # The global batch and learning rate stay; each replica's batch is re-derived.
    global_batch = 0
    # Each replica's batch stays; the global batch follows the replicas, the learning rate
    # follows optimizer.lr_scaling, reached by a warmup (tracking.resize_warmup_steps).
    per_replica_batch = 1


# ---- keys outside the groups ---------------------------------------------------------------

@dataclass
class DevicesConfig:
    # Split the CPU into this many logical devices (TensorFlow's virtual devices), so that
    # mirrored and central_storage run that many replicas without a GPU. 1: no split.
    logical_cpus: int = 1
    # Peak FLOP/s of all the devices the run trains on together, for the run's mfu (achieved
    # FLOP/s / this). null: from xpdist/task/measure/flops.py's table of GPUs, times the GPUs that
    # train; on a CPU or an unlisted device no mfu is logged.
    peak_flops: Optional[float] = None


@dataclass
class TrackingConfig:
    # MLflow tracking URI (null: MLFLOW_TRACKING_URI, else sqlite:///<launch dir>/mlflow.db).
    uri: Optional[str] = None
    # MLflow experiment name.
    experiment: str = "xpdist"
    # Run name (null: derived from strategy, cross_ops or communication, and replicas).
    run_name: Optional[str] = None
    # Log the trained model as the run's `model`: an MLflow model (mlflow.keras flavour, or
    # mlflow.tensorflow under tf-keras) with signature and input example, and model.keras.
    log_model: bool = True
    # Continue this FAILED or KILLED run (its id) from its last checkpoint, into the same
    # MLflow run; every other key must be as it was, but the size keys (devices.logical_cpus,
    # cluster.workers, cluster.ps: docs/lifecycle.md). null: a new run.
    resume: Optional[str] = None
    # A resumed run at another replica count (devices.logical_cpus, cluster.workers, ...):
    # keep its global batch (and learning rate), or its per-replica batch (docs/lifecycle.md).
    resize_keep: ResizeKeep = ResizeKeep.global_batch
    # resize_keep=per_replica_batch: optimizer steps over which the learning rate rises from
    # the run's last rate to the new one (null: the schedule's warmup_epochs, else one epoch; 0: at once).
    resize_warmup_steps: Optional[int] = field(default=None, metadata=rules.at_least(0, "Use 0 for at once."))
    # Seconds between two heartbeats of the driver on its run (the xpdist.heartbeat tag).
    heartbeat_s: float = 10.0
    # A RUNNING run whose heartbeat is older than this many seconds (and than 3 of its own
    # heartbeat_s) is taken for lost and closed as FAILED by the next xpdist command on its
    # store, or by `python -m xpdist.tracking.reap`.
    heartbeat_timeout_s: float = 300.0
    # Register the logged model under this name in the Model Registry, a new version per run.
    register_model: Optional[str] = None
    # Point this alias of the registered model at the run's version (models:/NAME@ALIAS loads it).
    model_alias: Optional[str] = None
    # Record CPU, memory and (where present) GPU figures as system/... metrics.
    system_metrics: bool = True
    # Seconds between two system metric samples.
    system_metrics_interval_s: float = 10.0


@dataclass
class Config:
    strategy: StrategyBase = MISSING
    cross_ops: CrossOpsBase = MISSING
    communication: CommunicationBase = MISSING
    cluster: ClusterBase = MISSING
    model: ModelBase = MISSING
    dataset: DatasetBase = MISSING
    optimizer: OptimizerBase = MISSING
    trainer: TrainerBase = MISSING
    loss: LossBase = MISSING
    schedule: ScheduleBase = MISSING
    # Keras callbacks, several at once: callbacks=[early_stopping,terminate_on_nan]; each
    # chosen option fills its own key (callbacks.early_stopping.patience=3).
    callbacks: Dict[str, Any] = field(default_factory=dict)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Keras flavour: auto, keras3 or legacy (tf-keras).
    keras: KerasFlavour = KerasFlavour.auto
    # Seed for weights, data and shuffling.
    seed: int = 42
    # Show TensorFlow's logs and full tracebacks.
    verbose: bool = False


# The config groups of which one option is chosen, in the order they appear in conf/config.yaml,
# each with the registry of its options (an option's dataclass: registry.get(name) or its spec's
# `config`).
_REGISTRIES: Dict[str, Tuple[Registry, Callable[[Any], type]]] = {
    "strategy": (strategies.STRATEGIES, lambda spec: spec.config),
    "cross_ops": (CROSS_OPS, lambda cls: cls),
    "communication": (COMMUNICATIONS, lambda cls: cls),
    "cluster": (clusters.CLUSTERS, lambda cls: cls),
    "model": (MODELS, lambda cls: cls),
    "dataset": (data_sources.DATA_SOURCES, lambda spec: spec.config),
    "optimizer": (OPTIMIZERS, lambda cls: cls),
    "trainer": (TRAINERS, lambda cls: cls),
    "loss": (LOSSES, lambda cls: cls),
    "schedule": (SCHEDULES, lambda cls: cls),
}
GROUPS = tuple(_REGISTRIES)
# Groups of which several options are chosen at once: each option fills its own key of the group.
_MULTI_REGISTRIES: Dict[str, Registry] = {"callbacks": CALLBACKS}


class _Options(Mapping):
    """group -> {option name: its dataclass}, read from the registries at each access, so that
    an option registered since (a user's package) is in it. Every list of options (the key
    checks, the ConfigStore, --help, the configuration reference) is this view."""

    def __init__(self, registries: Mapping[str, Any], schema_of: Callable[[str, Any], type]):
        self._registries, self._schema_of = registries, schema_of

    def __getitem__(self, group: str) -> Dict[str, type]:
        registry = self._registries[group]
        return {name: self._schema_of(group, registry.get(name)) for name in registry}

    def __iter__(self) -> Iterator[str]:
        return iter(self._registries)

    def __len__(self) -> int:
        return len(self._registries)


OPTIONS: Mapping[str, Dict[str, type]] = _Options({g: r for g, (r, _) in _REGISTRIES.items()},
                                                  lambda group, item: _REGISTRIES[group][1](item))
MULTI_GROUPS: Mapping[str, Dict[str, type]] = _Options(_MULTI_REGISTRIES, lambda group, cls: cls)
# The prefix of the ConfigStore entry an option file extends: defaults: [base_<name>].
SCHEMA_PREFIX = "base_"


def register_configs() -> None:
    """Stores the schema in Hydra's ConfigStore: `base_config`, and `<group>/base_<name>` per option.

    conf/config.yaml names base_config first in its defaults list, and each option file
    names its own base_<name>: every key of every option is typed, and a key the chosen
    option does not have fails at compose time. An option of a user's package has no file
    in conf/: it is stored as `<group>/<name>` too, so that `group=name` composes its
    dataclass's defaults. The option lists of --help are registered here as well (core/schema/help_text.py).
    """
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    for group, options in OPTIONS.items():
        for name, cls in options.items():
            store.store(group=group, name=SCHEMA_PREFIX + name, node=cls)
            if (group, name) in user_options.REGISTERED:
                store.store(group=group, name=name, node=cls)
    for group, options in MULTI_GROUPS.items():
        for name, cls in options.items():  # conf/callbacks/x.yaml fills callbacks.x
            store.store(group=group, name=SCHEMA_PREFIX + name, node={name: cls})
    help_text.register_resolver(OPTIONS, MULTI_GROUPS)


def fields_of(cls: type) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def check_keys(config: Mapping[str, Any]) -> None:
    """Refuses keys that the schema of the chosen options does not know.

    Hydra lets `+group.key=value` append a key to any node, even a typed one, and no code
    would ever read it: a misspelled `+trainer.epoch=3` would be silently ignored. A key
    that is missing means `<group>.name` was overridden with another option's name.

    Then the values: each key's rule, declared on its field (xpdist/core/rules.py), is
    checked for the chosen options and the keys outside the groups.

    Args:
        config: the composed config as plain data, without the hydra node.

    Raises:
        ConfigError: naming the first unknown key, or the first value its rule refuses.
    """
    _refuse_unknown(config, Config, "", "the config")
    for key, cls in (("devices", DevicesConfig), ("tracking", TrackingConfig)):
        _refuse_unknown(config[key], cls, f"{key}.", key)
    for group, options in MULTI_GROUPS.items():
        for name, value in config[group].items():
            if name not in options:
                raise ConfigError(f"{group}.{name}", value, f"{group} has no option {name}",
                                  f"Choose among {group}=[{','.join(options)}].")
            _refuse_unknown(value, options[name], f"{group}.{name}.", f"{group}={name}")
    for group, options in OPTIONS.items():
        name = config[group].get("name")
        if name not in options:
            raise ConfigError(f"{group}.name", name, f"{group}.name is fixed by each {group} option",
                              f"Choose one of {group}={', '.join(options)}.")
        _refuse_unknown(config[group], options[name], f"{group}.", f"{group}={name}")
        if set(config[group]) != set(fields_of(options[name])):
            raise ConfigError(f"{group}.name", name, f"{group}.name is fixed by each {group} option",
                              f"Choose the option instead: {group}={name}.")
    _check_values(config)


def _check_values(config: Mapping[str, Any]) -> None:
    for key, cls in (("devices", DevicesConfig), ("tracking", TrackingConfig)):
        rules.check(config[key], cls, f"{key}.")
    for group, options in OPTIONS.items():
        rules.check(config[group], options[config[group]["name"]], f"{group}.")
    for group, options in MULTI_GROUPS.items():
        for name, value in config[group].items():
            rules.check(value, options[name], f"{group}.{name}.")


def _refuse_unknown(node: Mapping[str, Any], cls: type, prefix: str, owner: str) -> None:
    known = fields_of(cls)
    for key, value in node.items():
        if key not in known:
            full = f"{prefix}{key}"
            while isinstance(value, Mapping) and len(value) == 1:  # +a.b=1 appended {'b': 1} at a
                inner, value = next(iter(value.items()))
                full += f".{inner}"
            hint = did_you_mean(key, known, prefix).strip()
            raise ConfigError(full, value, f"{owner} has no key '{key}', so nothing would read it",
                              f"{hint + ' Otherwise drop' if hint else 'Drop'} it; the keys of {owner} are: "
                              f"{', '.join(known)} (see {docs.page()}).")
