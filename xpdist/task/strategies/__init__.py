"""The strategy seam, task half: how TensorFlow builds each `strategy` option.

Each module of this package is one strategy option, named as its driver half in
xpdist/core/strategies/, and defines `build(tf, cfg, plan) -> tf.distribute.Strategy`; a
strategy whose non-chief tasks serve a coordinator instead of training also defines
`server(tf, cfg)`, the cluster resolver of a task that serves (None for the chief).
A config may name its own subclass of the strategy's TensorFlow class in `strategy._target_`
(a user's MirroredStrategy that does more, say): the builder calls `strategy_class`, which
gives that class, or TensorFlow's. Builders take `tf` from the task (xpdist/task/boot.py
imports TensorFlow once), so nothing here imports it. Runs in the task process only.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

from xpdist.core.registry import Registry

# A user's strategy (xpdist.core.options.register_strategy) adds its task half by path.
STRATEGIES: Registry[ModuleType] = Registry("strategy", package=__name__, half="task")


def configure_devices(tf, cfg) -> None:
    """Splits the CPU into devices.logical_cpus logical devices, before TF initialises."""
    n = int(cfg.devices.logical_cpus)
    if n > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def build(tf, cfg, plan):
    """Builds the strategy of cfg.strategy.name, after configure_devices."""
    return STRATEGIES.get(cfg.strategy.name).build(tf, cfg, plan)


def server(tf, cfg) -> Optional[Any]:
    """The cluster resolver of this task if it serves a coordinator rather than trains, else None."""
    serves = getattr(STRATEGIES.get(cfg.strategy.name), "server", None)
    return serves(tf, cfg) if serves is not None else None


def strategy_class(tf, cfg, default: type) -> type:
    """The class a builder calls: TensorFlow's `default`, or strategy._target_, a subclass of it
    called with the same arguments (the plan, checks and cluster stay those of the option).

    Raises:
        ValueError: the path cannot be imported, or names no subclass of `default`; one line
            naming strategy._target_.
    """
    target = cfg.strategy.get("_target_")
    if not target:
        return default
    from xpdist.task.targets import resolve

    cls = resolve(tf.keras, target, "strategy._target_")
    if not (isinstance(cls, type) and issubclass(cls, default)):
        raise ValueError(f"strategy._target_={target} is not a subclass of {default.__name__}, the class of "
                         f"strategy={cfg.strategy.name}: give a subclass of it.")
    return cls
