"""strategy=default: TensorFlow's default strategy, one replica and no distribution."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.strategies import StrategyBase, StrategySpec

@dataclass
class DefaultStrategy(StrategyBase):
    name: str = "default"


class Default(StrategySpec):
    name = "default"
    config = DefaultStrategy
    uses_devices = False  # TensorFlow places ops itself
    auto_steps_per_execution = True


SPEC = Default()
