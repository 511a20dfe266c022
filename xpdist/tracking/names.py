"""MLflow's naming rules for experiments, registered models and aliases, checked before training.

MLflow checks these names only when it creates the experiment, or registers the model once
training is over; a bad name then cost the whole run and ended in a traceback. The rules are
copied from mlflow/utils/validation.py (MLflow 3.17: _validate_experiment_name,
_validate_model_name, _validate_model_alias_name, _validate_model_alias_name_reserved): those
functions are private, and importing that module takes about 2 s, as it imports most of MLflow.
tests/unit/test_mlflow_names.py checks that MLflow's own functions agree on every sample name.
"""

from __future__ import annotations

import posixpath
import re

from xpdist.core.errors import ConfigError

# MAX_EXPERIMENT_NAME_LENGTH, MAX_REGISTERED_MODEL_ALIAS_LENGTH.
MAX_EXPERIMENT_NAME_LENGTH = 500
MAX_ALIAS_LENGTH = 255
# _REGISTERED_MODEL_ALIAS_REGEX: alphanumerics, underscores and dashes only.
_ALIAS = re.compile(r"^[\w\-]*$")
# _REGISTERED_MODEL_ALIAS_VERSION_REGEX: v1, V2, ... name versions, not aliases.
_VERSION_ALIAS = re.compile(r"^[vV]\d+$")
_NOT_ALIAS = re.compile(r"[^\w\-]")


def check(tracking) -> None:
    """Refuses an experiment, registered model or alias name MLflow would refuse.

    Args:
        tracking: the config's tracking node.

    Raises:
        ConfigError: naming tracking.experiment, tracking.register_model or tracking.model_alias.
    """
    check_experiment(tracking.experiment)
    if tracking.register_model:
        check_model_name(tracking.register_model)
    if tracking.model_alias:
        check_alias(tracking.model_alias)


def check_experiment(name: str) -> None:
    if name is None or name == "":
        raise ConfigError("tracking.experiment", '""', "MLflow needs an experiment name",
                          "Drop tracking.experiment to use 'xpdist', or give a name.")
    if len(name) > MAX_EXPERIMENT_NAME_LENGTH:
        raise ConfigError("tracking.experiment", f"{name[:20]}...", f"MLflow takes names of at most "
                          f"{MAX_EXPERIMENT_NAME_LENGTH} characters, this one has {len(name)}", "Give a shorter name.")


def check_model_name(name: str) -> None:
    if name.strip() == "":
        raise ConfigError("tracking.register_model", repr(name), "a registered model needs a name",
                          "Give one, e.g. tracking.register_model=my_model, or drop the key.")
    bad = "".join(c for c in "/:" if c in name)
    if bad:
        raise ConfigError("tracking.register_model", name, f"MLflow's model names cannot contain '/' or ':' "
                          f"(this one has {' and '.join(repr(c) for c in bad)})",
                          f"Use e.g. tracking.register_model={re.sub(r'[/:]+', '-', name).strip('-.') or 'my_model'}.")
    normal = posixpath.normpath(name)  # path_not_unique: the name is also a path in the artifact store
    if normal != name or normal == "." or normal.startswith(("..", "/")):
        raise ConfigError("tracking.register_model", name, f"MLflow's model names are paths as well, and this "
                          f"one would read as {normal!r}", "Use letters, digits, '_', '-' and '.' alone.")


def check_alias(alias: str) -> None:
    if not _ALIAS.match(alias):
        bad = "".join(sorted(set(_NOT_ALIAS.findall(alias))))
        raise ConfigError("tracking.model_alias", alias, f"MLflow's aliases take letters, digits, '_' and '-' only, "
                          f"not {bad!r}", f"Use e.g. tracking.model_alias={_NOT_ALIAS.sub('_', alias)}.")
    if len(alias) > MAX_ALIAS_LENGTH:
        raise ConfigError("tracking.model_alias", f"{alias[:20]}...", f"MLflow takes aliases of at most "
                          f"{MAX_ALIAS_LENGTH} characters, this one has {len(alias)}", "Give a shorter alias.")
    if alias.lower() == "latest":  # MLflow's own name for the newest version
        raise ConfigError("tracking.model_alias", alias, "MLflow reserves the alias 'latest'",
                          "Use another alias, e.g. tracking.model_alias=champion.")
    if _VERSION_ALIAS.match(alias):
        raise ConfigError("tracking.model_alias", alias, f"MLflow reserves v<number> for versions ({alias} "
                          "would read as a version, not an alias)", "Use e.g. tracking.model_alias=release-1.")
