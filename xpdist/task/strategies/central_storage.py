"""strategy=central_storage: CentralStorageStrategy over the plan's devices."""

from __future__ import annotations


def build(tf, cfg, plan):
    return tf.distribute.experimental.CentralStorageStrategy(compute_devices=plan.devices)
