"""The tf.data pipelines that feed a data set (`dataset` option) to the replicas.

In-memory sources are NumPy arrays; the pipelines here batch them so that every replica's
batch is equal, shuffle with the run's seed, and prefetch (dataset.prefetch). A streamed
source's splits batch themselves (xpdist/task/data_sources/_stream.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xpdist.core.plan import Plan
from xpdist.task.data_sources import SOURCES, _pipeline
from xpdist.task.data_sources._arrays import Arrays  # noqa: F401  (what load returns for in-memory data)


def load(cfg, plan: Plan, launch_dir: Path, strategy=None):
    """The data set of cfg.dataset, as its source's task half loads it (xpdist/task/data_sources/).

    An in-memory source returns Arrays, shuffled once with the run's seed, validation split
    off; a streamed source returns data_sources._stream.Streams, whose splits stand in the
    place of the arrays' x in the batch functions below.
    """
    return SOURCES.get(cfg.dataset.name).load(cfg, plan, launch_dir, strategy)


def _training_batches(tf, x, y, cfg, global_batch: int):
    """An endless stream of global batches, reshuffled on every pass over the data.

    Each pass is a permutation drawn by a stateless op seeded with (seed, pass number), so
    the order does not depend on TensorFlow's global or graph seeds. That matters: Keras
    hands a dataset to a strategy by rebuilding its graph, which re-seeds a stateful
    `shuffle`, so fit and ctl (or two strategies) would otherwise see different batches.
    dataset.shuffle_buffer > 0 trades that for a bounded tf.data shuffle buffer.
    """
    if cfg.dataset.shuffle_buffer:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(cfg.dataset.shuffle_buffer, seed=cfg.seed)
        return ds.batch(global_batch, drop_remainder=True).repeat()
    n = len(x)
    x_all, y_all = tf.constant(x), tf.constant(y)

    def one_pass(number):
        seed = tf.stack([tf.constant(cfg.seed, tf.int64), number])
        order = tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=seed)
        return tf.data.Dataset.from_tensor_slices(order).batch(global_batch, drop_remainder=True)

    batches = tf.data.Dataset.counter().flat_map(one_pass)
    return batches.map(lambda idx: (tf.gather(x_all, idx), tf.gather(y_all, idx)))


def _batches(tf, x, y, cfg, global_batch: int, training: bool):
    if training:
        return _training_batches(tf, x, y, cfg, global_batch)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)


def global_batches(tf, x, y, cfg, plan: Plan, training: bool):
    """Global batches for Model.fit; Keras splits each one across the replicas."""
    if _streamed(x):
        return x.global_batches(tf, training)
    return _pipeline.prefetch(tf, _batches(tf, x, y, cfg, plan.global_batch_size, training), cfg)


def replica_batches_fn(tf, x, y, cfg, plan: Plan, training: bool):
    """A dataset function for strategy.distribute_datasets_from_function.

    Every input pipeline draws the same seeded global batches and keeps its own slice of
    each, then splits it into per-replica batches, so that a step sees exactly the
    examples of one global batch, whatever the number of workers and replicas.
    """
    if _streamed(x):
        return x.dataset_fn(tf, training)

    def dataset_fn(context):
        ds = _batches(tf, x, y, cfg, plan.global_batch_size, training)
        per_pipeline = plan.global_batch_size // context.num_input_pipelines
        per_replica = context.get_per_replica_batch_size(plan.global_batch_size)
        ds = ds.unbatch().batch(per_pipeline).shard(context.num_input_pipelines, context.input_pipeline_id)
        return _pipeline.prefetch(tf, ds.unbatch().batch(per_replica, drop_remainder=True), cfg)

    return dataset_fn


def worker_batches(tf, x, y, cfg, plan: Plan):
    """Global batches for one parameter_server worker, repeated forever.

    Every worker runs this same pipeline graph, so a fixed seed would give every worker the
    same batches in the same order; the shuffle seed comes from each worker's clock instead.
    Parameter-server training is asynchronous, so it is not reproducible step by step anyway.
    """
    if _streamed(x):
        return x.worker_batches(tf)
    seed = tf.cast(tf.timestamp() * 1e6, tf.int64) % (2 ** 31)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(cfg.dataset.shuffle_buffer or len(x), seed=seed, reshuffle_each_iteration=True)
    return _pipeline.prefetch(tf, ds.batch(plan.global_batch_size, drop_remainder=True).repeat(), cfg)


def explain(tf, cfg, launch_dir: Path, err: Exception) -> Exception:
    """The error to report for a TensorFlow error while training: the source's own explanation
    where it has one (tfrecord names the file that cannot be read), else err itself."""
    source_explain = getattr(SOURCES.get(cfg.dataset.name), "explain", None)
    return source_explain(tf, cfg, launch_dir, err) if source_explain is not None else err


def _streamed(x) -> bool:
    return not isinstance(x, np.ndarray)
