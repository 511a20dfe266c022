"""strategy=default: TensorFlow's default strategy, one replica and no distribution."""

from __future__ import annotations


from xpdist.core.strategies import StrategyBase, StrategySpec


class Default(StrategySpec):
    name = "default"
    config_base = StrategyBase
    uses_devices = False  # TensorFlow places ops itself
    auto_steps_per_execution = True


SPEC = Default()
