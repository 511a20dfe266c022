"""strategy=tpu: TPUStrategy on the TPU that strategy.tpu names."""

from __future__ import annotations

from xpdist.task.strategies import strategy_class


def build(tf, cfg, plan):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=cfg.strategy.tpu or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return strategy_class(tf, cfg, tf.distribute.TPUStrategy)(resolver)
