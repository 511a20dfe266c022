"""strategy=tpu: TPUStrategy on the TPU that strategy.tpu names."""

from __future__ import annotations


def build(tf, cfg, plan):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=cfg.strategy.tpu or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
