"""strategy=one_device: OneDeviceStrategy on strategy.devices[0]."""

from __future__ import annotations

from xpdist.core.strategies import StrategySpec


class OneDevice(StrategySpec):
    name = "one_device"
    fit_distributes_dataset = True
    auto_steps_per_execution = True


SPEC = OneDevice()
