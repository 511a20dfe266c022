"""Strategies of your own, TensorFlow's side. Imported by the task process only.

AnnouncedMirroredStrategy is a subclass of a tf.distribute strategy, named by strategy._target_:
xpdist builds it with the arguments it gives TensorFlow's class under the option your YAML
extends (here strategy=mirrored: `devices` and `cross_device_ops`), and plans, checks and
logs the run as that option.

`build` is the task half of strategy=pinned, an option of its own (my_options.py).
"""

from __future__ import annotations

import tensorflow as tf


class AnnouncedMirroredStrategy(tf.distribute.MirroredStrategy):
    """MirroredStrategy that says which devices it mirrors over when it starts: the shape of
    any subclass (take TensorFlow's arguments, pass them on, add what you need)."""

    def __init__(self, devices=None, cross_device_ops=None):
        super().__init__(devices=devices, cross_device_ops=cross_device_ops)
        print(f"my_strategies: mirroring over {', '.join(self.extended.worker_devices)}", flush=True)


def build(tf_module, cfg, plan):
    """strategy=pinned: OneDeviceStrategy on strategy.device."""
    print(f"my_strategies: pinned to {cfg.strategy.device}", flush=True)
    return tf_module.distribute.OneDeviceStrategy(cfg.strategy.device)
