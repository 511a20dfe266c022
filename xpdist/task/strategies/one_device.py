"""strategy=one_device: OneDeviceStrategy on the plan's first device."""

from __future__ import annotations


def build(tf, cfg, plan):
    return tf.distribute.OneDeviceStrategy(plan.devices[0])
