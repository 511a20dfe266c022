"""Data sets (`dataset` options) and the tf.data pipelines that feed them to replicas.

Loaders return NumPy arrays; the pipelines batch them so that every replica's batch is
equal, shuffle with the run's seed, and prefetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np

from xpdist.core.plan import Plan, resolve_path
from xpdist.core.registry import Registry

DATASETS = Registry("dataset")


@dataclass
class Arrays:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    # regression or classification: decides the loss and metrics.
    kind: str
    num_outputs: int

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


@DATASETS.register("synthetic_regression")
def _synthetic_regression(cfg, rng, launch_dir):
    ds = cfg.dataset
    x = 1.0 + ds.noise * rng.standard_normal((ds.num_examples, ds.num_features))
    y = x.mean(axis=1, keepdims=True) + ds.noise * rng.standard_normal((ds.num_examples, 1))
    return x.astype("float32"), y.astype("float32")


@DATASETS.register("synthetic_images")
def _synthetic_images(cfg, rng, launch_dir):
    ds = cfg.dataset
    x = rng.random((ds.num_examples, *ds.image_shape), dtype=np.float32)
    y = rng.integers(0, ds.num_classes, size=ds.num_examples).astype("int32")
    return x, y


@DATASETS.register("digits")
def _digits(cfg, rng, launch_dir):
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images[..., None] / 16.0).astype("float32"), digits.target.astype("int32")


@DATASETS.register("npz")
def _npz(cfg, rng, launch_dir):
    with np.load(resolve_path(cfg.dataset.path, launch_dir)) as arrays:
        return arrays["x"].astype("float32"), arrays["y"]


@DATASETS.register("mnist")
def _mnist(cfg, rng, launch_dir):
    import tensorflow as tf

    try:
        (x, y), _ = tf.keras.datasets.mnist.load_data()
    except Exception as err:  # urllib, SSL and HTTP errors all mean "could not download"
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise RuntimeError(
            f"dataset=mnist could not be downloaded ({reason}); it needs network access. "
            "Offline, use dataset=digits, or dataset=npz with your own copy.") from err
    return (x[..., None] / 255.0).astype("float32"), y.astype("int32")


# Sources streamed from files or a user's function (xpdist.task.data_sources), never loaded whole.
STREAMED = ("tfrecord", "image_folder", "custom")


def load(cfg, plan: Plan, launch_dir: Path, strategy=None):
    """Loads cfg.dataset, shuffles it once with the run's seed and splits off validation.

    A streamed source returns data_sources.stream.Streams instead, whose splits stand in
    the place of the arrays' x in the batch functions below.
    """
    if cfg.dataset.name in STREAMED:
        import tensorflow as tf

        from xpdist.task.data_sources import stream

        return stream.load(tf, tf.keras, cfg, plan, launch_dir, strategy)
    rng = np.random.default_rng(cfg.seed)
    x, y = DATASETS.get(cfg.dataset.name)(cfg, rng, launch_dir)
    if np.issubdtype(y.dtype, np.integer):
        kind, outputs = "classification", int(y.max()) + 1
    else:
        y = y.astype("float32").reshape(len(y), -1)
        kind, outputs = "regression", int(y.shape[1])
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    n_train = plan.num_train
    return Arrays(x[:n_train], y[:n_train], x[n_train:], y[n_train:], kind, outputs)


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
    return _batches(tf, x, y, cfg, plan.global_batch_size, training).prefetch(tf.data.AUTOTUNE)


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
        return ds.unbatch().batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

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
    return ds.batch(plan.global_batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def explain(tf, cfg, launch_dir: Path, err: Exception) -> Exception:
    """The error to report for a TensorFlow error while training (see data_sources.stream.explain)."""
    if cfg.dataset.name not in STREAMED:
        return err
    from xpdist.task.data_sources import stream

    return stream.explain(tf, cfg, launch_dir, err)


def _streamed(x) -> bool:
    return not isinstance(x, np.ndarray)
