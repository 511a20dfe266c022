"""Checks of a `_target_` (a user's dotted path) that import nothing, for the driver."""

from __future__ import annotations

import importlib.util


def check_target(cfg, group: str, fix: str) -> None:
    """<group>._target_ names a module.function whose top-level package can be found.

    Only the package is looked up (importlib.util.find_spec executes no code): a user's module
    usually imports TensorFlow, which the driver never does. The task resolves the whole path
    with hydra.utils.get_method, and a misspelled function name fails there.

    Raises:
        ConfigError: naming <group>._target_.
    """
    from xpdist.core.errors import ConfigError

    target = cfg[group]._target_
    top = target.split(".")[0]
    if "." not in target or not top:
        raise ConfigError(f"{group}._target_", target or '""', "it is not a dotted path (module.function)", fix)
    if importlib.util.find_spec(top) is None:
        raise ConfigError(f"{group}._target_", target, f"no module '{top}' can be imported here", fix)
