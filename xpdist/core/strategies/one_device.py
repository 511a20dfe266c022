"""strategy=one_device: OneDeviceStrategy on strategy.devices[0]."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from xpdist.core.strategies import LocalDevicesStrategy, StrategySpec

@dataclass
class OneDeviceStrategy(LocalDevicesStrategy):
    name: str = "one_device"
    # The device to train on, as a list of which only the first entry is used, e.g. ["/gpu:1"].
    # Empty: the first GPU, else /cpu:0.
    devices: List[str] = field(default_factory=list)


class OneDevice(StrategySpec):
    name = "one_device"
    config = OneDeviceStrategy
    fit_distributes_dataset = True
    auto_steps_per_execution = True


SPEC = OneDevice()
