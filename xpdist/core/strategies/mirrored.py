"""strategy=mirrored: MirroredStrategy, one replica per device of this process; cross_ops tunes it."""

from __future__ import annotations

from typing import List

from xpdist.core.strategies import LocalDevicesStrategy, StrategySpec


class Mirrored(StrategySpec):
    name = "mirrored"
    config_base = LocalDevicesStrategy
    applies_to = ("cross_ops",)  # MirroredStrategy(cross_device_ops=...)
    replicas_in_one_process = True
    fit_distributes_dataset = True

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        return len(devices)


SPEC = Mirrored()
