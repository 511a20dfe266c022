"""strategy=central_storage: CentralStorageStrategy over the plan's devices."""

from __future__ import annotations

from xpdist.task.strategies import strategy_class


def build(tf, cfg, plan):
    return strategy_class(tf, cfg, tf.distribute.experimental.CentralStorageStrategy)(compute_devices=plan.devices)
