"""strategy=one_device: OneDeviceStrategy on the plan's first device."""

from __future__ import annotations

from xpdist.task.strategies import strategy_class


def build(tf, cfg, plan):
    return strategy_class(tf, cfg, tf.distribute.OneDeviceStrategy)(plan.devices[0])
