"""Checks that run before TensorFlow starts: each failure is one line naming the config key.

Nothing here imports TensorFlow, creates an MLflow run or writes a file, so a rejected
config leaves nothing behind.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path
from urllib.parse import urlparse

from xpdist.core import data_sources, plan as planning, schema, strategies
from xpdist.core.errors import ConfigError
from xpdist.driver import engines
from xpdist.driver.checks import data as data_checks
from xpdist.driver.checks import model as model_checks
from xpdist.driver.checks import strategy as strategy_checks
from xpdist.driver.checks import training as training_checks
from xpdist.tracking import names


def check(cfg, launch_dir: Path) -> planning.Plan:
    """Rejects configs that cannot run; returns the plan of one that can.

    Args:
        cfg: the composed config, enums as strings.
        launch_dir: the directory the command was run from (relative paths start there).

    Raises:
        ConfigError: the first problem found.
    """
    schema.check_keys(cfg)
    _check_strategy_options(cfg)
    strategy_checks.check(cfg)
    _check_cluster(cfg)
    _check_devices(cfg)
    _check_numbers(cfg)
    data_checks.check_source(cfg, launch_dir)
    _check_model_fits_data(cfg, launch_dir)
    model_checks.check(cfg, launch_dir)
    _check_model_target(cfg)
    _check_precision(cfg)
    _check_model_logging(cfg)
    plan = planning.make_plan(cfg, launch_dir)
    training_checks.check(cfg, plan)
    _check_xla(cfg, plan)
    _check_sizes(cfg, plan)
    return plan


def _check_strategy_options(cfg) -> None:
    spec = strategies.of(cfg)
    for group, what in strategies.TUNING_GROUPS.items():
        if cfg[group].name != "auto" and group not in spec.applies_to:
            tuned = " or ".join(strategies.names_where(lambda other: group in other.applies_to))
            raise ConfigError(group, cfg[group].name, f"{what} apply to strategy={tuned} only, not strategy={spec.name}",
                              f"Drop the override or use strategy={tuned}.")
    for key in ("cross_ops", "communication"):
        if cfg[key].name == "nccl" and planning.gpu_count() == 0:
            alternative = "auto or hierarchical" if key == "cross_ops" else "auto or ring"
            raise ConfigError(key, "nccl", "NCCL needs GPUs; this machine has none", f"Use {key}={alternative}.")
    spec.preflight(cfg)


def _check_cluster(cfg) -> None:
    """The engine's own checks (cluster=...), then what the strategy asks of any cluster."""
    spec = strategies.of(cfg)
    engines.of(cfg).preflight(cfg, spec.needs)
    if spec.needs.coordinator and cfg.trainer.name == "fit" and cfg.trainer.log_every_n_steps:
        raise ConfigError("trainer.log_every_n_steps", cfg.trainer.log_every_n_steps,
                          f"Model.fit under {spec.name} refuses batch-level callbacks",
                          "Set trainer.log_every_n_steps=0 (epoch metrics are still logged).")


def _check_devices(cfg) -> None:
    if cfg.devices.logical_cpus < 1:
        raise ConfigError("devices.logical_cpus", cfg.devices.logical_cpus, "must be 1 or more",
                          "Set it to the number of CPU replicas wanted.")
    gpus = planning.gpu_count()
    for name in cfg.strategy.get("devices", []):
        parsed = planning.parse_device(name)
        kind, index = parsed if parsed else (None, None)
        limit = {"cpu": cfg.devices.logical_cpus, "gpu": gpus}.get(kind, 0)
        if parsed is None or index >= limit:
            have = [f"/cpu:{i}" for i in range(cfg.devices.logical_cpus)] + [f"/gpu:{i}" for i in range(gpus)]
            raise ConfigError("strategy.devices", list(cfg.strategy.devices), f"device '{name}' does not exist here",
                              f"Use some of {have} (raise devices.logical_cpus for more CPU devices).")


def _check_numbers(cfg) -> None:
    """The data set's two shared numbers (each source sets its own defaults for them); the
    trainer's and optimizer's are rules on their fields (xpdist/core/rules.py), checked with the keys."""
    if cfg.dataset.per_replica_batch_size <= 0:
        raise ConfigError("dataset.per_replica_batch_size", cfg.dataset.per_replica_batch_size, "must be above 0",
                          "Set dataset.per_replica_batch_size to a positive value.")
    split = cfg.dataset.validation_split
    if not 0 <= split < 1:
        raise ConfigError("dataset.validation_split", split, "must be in [0, 1)", "Use e.g. 0.2, or 0 for none.")


def _check_precision(cfg) -> None:
    if str(cfg.trainer.jit_compile).lower() not in ("auto", "true", "false"):
        raise ConfigError("trainer.jit_compile", cfg.trainer.jit_compile, "must be auto, true or false",
                          "Use trainer.jit_compile=auto (Keras decides), true or false.")


def _check_model_logging(cfg) -> None:
    tracking = cfg.tracking
    names.check(tracking)  # MLflow's naming rules, which it would apply after the training
    if tracking.model_alias and not tracking.register_model:
        raise ConfigError("tracking.model_alias", tracking.model_alias,
                          "an alias names a version of a registered model",
                          "Set tracking.register_model=NAME as well.")
    if tracking.system_metrics_interval_s <= 0:
        raise ConfigError("tracking.system_metrics_interval_s", tracking.system_metrics_interval_s, "must be above 0",
                          "Use e.g. 10 (seconds), or tracking.system_metrics=false.")
    if tracking.register_model and not tracking.log_model:
        raise ConfigError("tracking.register_model", tracking.register_model, "tracking.log_model=false logs no model",
                          "Drop tracking.log_model=false.")


def _check_xla(cfg, plan: planning.Plan) -> None:
    """XLA with several replicas in one process fails at the first step, under fit and ctl alike:
    "Trying to access resource .../replica_1/... located in device CPU:1 from device CPU:0"
    (keras-team/keras#19005, tensorflow/tensorflow#53140; measured here on 2 logical CPUs).
    Every precision trained under every strategy here; only this combination is refused."""
    if (str(cfg.trainer.jit_compile).lower() == "true" and strategies.get(plan.strategy).replicas_in_one_process
            and plan.num_replicas > 1):
        raise ConfigError("trainer.jit_compile", "true",
                          f"XLA cannot compile a step over {plan.num_replicas} replicas of "
                          f"strategy={plan.strategy} in one process (keras-team/keras#19005)",
                          "Use trainer.jit_compile=auto, or strategy=multi_worker_mirrored, where XLA compiles "
                          "each worker's step.")


def _check_model_fits_data(cfg, launch_dir: Path) -> None:
    """model=cnn convolves images; on flat feature vectors it would fail deep inside Keras."""
    if cfg.model.name != "cnn":
        return
    shape = data_sources.of(cfg).input_shape(cfg, launch_dir)
    if shape is None or len(shape) in (2, 3):  # None: only TensorFlow knows (a user's function)
        return
    images = [name for name in data_sources.DATA_SOURCES if data_sources.get(name).images]
    raise ConfigError("model", "cnn", f"a conv net needs images (height x width [x channels]); "
                      f"dataset={cfg.dataset.name} has examples of shape {tuple(shape)}",
                      f"Use model=mlp or model=linear, or an image data set ({', '.join(images)}).")


def _check_model_target(cfg) -> None:
    """model._target_ must name an importable module before a run is created for it.

    The task resolves it with hydra.utils.get_method. Here the module is only looked up, not
    imported: a user's model module usually imports TensorFlow, which the driver never does.
    So the top-level package is found with importlib.util.find_spec, which executes no code;
    a misspelled function name still fails in the task, with get_method's message.
    """
    if cfg.model.name != "custom":
        return
    data_checks.check_target(cfg, "model", "Give module.function of a function that returns a Keras model, with its package "
                  "installed or on PYTHONPATH.")


def _check_sizes(cfg, plan: planning.Plan) -> None:
    # The fixes name the keys of the run's own data source: the one that gives it validation
    # data (validation_split, num_validation_examples, validation_files), and num_examples only
    # where the source has it (a folder of files has no such key).
    key = data_sources.of(cfg).validation_key
    split = key == "validation_split"
    more = ", or use more examples (dataset.num_examples)." if "num_examples" in cfg.dataset else \
        ", or give more training data."
    if plan.num_train < plan.global_batch_size:
        raise ConfigError(
            "dataset.per_replica_batch_size", plan.per_replica_batch_size,
            f"one global batch ({plan.per_replica_batch_size} x {plan.num_replicas} replicas = {plan.global_batch_size}) "
            f"is larger than the {plan.num_train} training examples of dataset={cfg.dataset.name}"
            + (f" ({plan.num_val} held back by dataset.validation_split={cfg.dataset.get('validation_split')})"
               if plan.num_val and split else ""),
            "Lower the batch size" + (" or dataset.validation_split" if plan.num_val and split else "") + more)
    if plan.num_val and plan.num_val < plan.global_batch_size:
        value = cfg.dataset.get(key)
        raise ConfigError(
            f"dataset.{key}", list(value) if key == "validation_files" else value,
            f"the {plan.num_val} validation examples are fewer than one global batch ({plan.global_batch_size})",
            "Raise the split, lower the batch size, or set dataset.validation_split=0." if split else
            f"Give more validation examples (dataset.{key}), lower the batch size, or give none.")


# Stores MLflow records into, by URI scheme (a database scheme may name a driver: postgresql+psycopg2).
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
_SERVERS = ("http", "https", "databricks", "databricks-uc", "uc")
# URIs MLflow takes as they are, without a scheme.
_BARE = ("databricks", "databricks-uc", "uc")
# Where MLflow finds the stores of its plugins.
_STORE_PLUGINS = "mlflow.tracking_store"
_USE_INSTEAD = ("Use tracking.uri=sqlite:///<dir>/mlflow.db (one file), http://HOST:PORT (an MLflow server), "
                "or drop tracking.uri to record into ./mlflow.db.")


def check_tracking_uri(uri: str) -> None:
    """Fails fast when MLflow would refuse the tracking URI, or its server does not answer.

    MLflow 3 refuses a file store (file:// or a plain path) when the run is created or closed,
    which came after the training here; checked before, it costs nothing.
    """
    scheme = urlparse(uri).scheme.lower()
    if uri in _BARE:
        return
    if scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("true", "1"):  # MLflow's own opt-in
            return
        raise ConfigError("tracking.uri", uri, "MLflow 3 no longer records into a file store", _USE_INSTEAD)
    known = scheme.split("+")[0] in _DATABASES or scheme in _SERVERS
    if not known and scheme not in {ep.name for ep in entry_points(group=_STORE_PLUGINS)}:
        raise ConfigError("tracking.uri", uri, f"MLflow has no store for URIs that start with {scheme}://",
                          _USE_INSTEAD)
    check_tracking_server(uri)


def check_tracking_server(uri: str) -> None:
    """Fails fast when an http(s) tracking URI does not answer."""
    if urlparse(uri).scheme not in ("http", "https"):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5):
            return
    except urllib.error.HTTPError:
        return  # the server answered, even if not with 200
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise ConfigError("tracking.uri", uri, f"the MLflow server does not answer ({reason})",
                          "Start it, fix the address, or drop tracking.uri to use ./mlflow.db.") from None
