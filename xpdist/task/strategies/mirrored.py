"""strategy=mirrored: MirroredStrategy over the plan's devices, reducing with the cross_ops option."""

from __future__ import annotations

from typing import Callable

from xpdist.core.registry import Registry
from xpdist.task.strategies import strategy_class

# cross_ops option -> MirroredStrategy's cross_device_ops (None: TensorFlow's choice).
CROSS_OPS: Registry[Callable] = Registry("cross_ops")


@CROSS_OPS.register("auto")
def _auto(tf, ops):
    return None


@CROSS_OPS.register("nccl")
def _nccl(tf, ops):
    return tf.distribute.NcclAllReduce(num_packs=ops.num_packs)


@CROSS_OPS.register("hierarchical")
def _hierarchical(tf, ops):
    return tf.distribute.HierarchicalCopyAllReduce(num_packs=ops.num_packs)


@CROSS_OPS.register("reduction_to_one_device")
def _reduction_to_one_device(tf, ops):
    return tf.distribute.ReductionToOneDevice(reduce_to_device=ops.reduce_to_device or None)


def cross_device_ops(tf, cfg):
    """MirroredStrategy's cross_device_ops for cross_ops=<name>."""
    return CROSS_OPS.get(cfg.cross_ops.name)(tf, cfg.cross_ops)


def build(tf, cfg, plan):
    cls = strategy_class(tf, cfg, tf.distribute.MirroredStrategy)
    return cls(devices=plan.devices, cross_device_ops=cross_device_ops(tf, cfg))
