"""strategy=default: TensorFlow's default strategy."""

from __future__ import annotations


def build(tf, cfg, plan):
    return tf.distribute.get_strategy()
