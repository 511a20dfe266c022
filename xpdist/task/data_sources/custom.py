"""dataset=custom: the user's own tf.data pipeline, and an example of the function it names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra.utils import get_method

from xpdist.core import strategies
from xpdist.task.data_sources import _pipeline, _stream
from xpdist.task.data_sources._stream import DataError


def load(cfg, plan, launch_dir: Path, strategy) -> _stream.Streams:
    """The function's two splits; the shapes come from the element_spec of its training data."""
    import tensorflow as tf

    return _stream.streams(UserSplit, cfg, plan, launch_dir, strategy, *_describe(tf, cfg, plan))


@dataclass
class UserSplit(_stream.Split):
    """A split whose per-replica batches the user's function makes; xpdist repeats and prefetches them."""

    def _batches(self, tf, context, batch_size: int, training: bool, endless: bool = False):
        ds = call_user_function(tf, self.cfg, context, batch_size, self.split)
        ds = ds.repeat() if training else self.validation(tf, ds, context, endless)
        return _pipeline.prefetch(tf, ds, self.cfg)

    def global_batches(self, tf, training: bool):
        """Per-replica batches distributed here for Model.fit (the coordinator's own validation
        batches as they are)."""
        if strategies.get(self.plan.strategy).needs.coordinator:
            return self._batches(tf, None, self.plan.global_batch_size, training)
        return self.strategy.distribute_datasets_from_function(
            lambda context: self._batches(tf, context, self.plan.per_replica_batch_size, training, endless=True))

    def dataset_fn(self, tf, training: bool):
        def fn(context):
            return self._batches(tf, context, context.get_per_replica_batch_size(self.plan.global_batch_size),
                                 training)

        return fn

    def worker_batches(self, tf):
        return self._batches(tf, None, self.plan.global_batch_size, training=True)


def call_user_function(tf, cfg, context, batch_size: int, split: str):
    """dataset._target_(context, batch_size, split, **kwargs), checked to be a tf.data.Dataset."""
    target = cfg.dataset._target_
    try:
        fn = get_method(target)
        ds = fn(context, batch_size, split, **dict(cfg.dataset.kwargs))
    except Exception as err:
        reason = " ".join(str(err).split())[:300] or type(err).__name__
        raise DataError(f"dataset._target_={target} raised {type(err).__name__}: {reason}") from err
    if not isinstance(ds, tf.data.Dataset) and not (split == "validation" and ds is None):
        raise DataError(f"dataset._target_={target} returned {type(ds).__name__}, not a tf.data.Dataset of "
                        "(features, labels) batches (docs/data.md)")
    return ds


def _describe(tf, cfg, plan):
    """Input shape, kind and outputs from the element_spec of the function's training data."""
    ds = call_user_function(tf, cfg, None, plan.per_replica_batch_size, "train")
    target = cfg.dataset._target_
    spec = ds.element_spec
    if not isinstance(spec, tuple) or len(spec) != 2:
        raise DataError(f"dataset._target_={target} returned elements {spec}, not (features, labels) pairs")
    features, labels = spec
    if labels.dtype.is_integer:
        if not cfg.dataset.num_classes:
            raise DataError(f"dataset._target_={target} returns integer labels but dataset.num_classes is 0; "
                            "set dataset.num_classes=N (labels 0..N-1), or return float targets")
        return tuple(features.shape[1:]), "classification", int(cfg.dataset.num_classes)
    outputs = labels.shape[-1] if labels.shape.rank and labels.shape.rank > 1 else 1
    return tuple(features.shape[1:]), "regression", int(outputs)


def example_dataset(input_context, batch_size, split, num_features=8, num_examples=512, seed=0):
    """An example of the function dataset._target_ names: random regression data.

    xpdist calls it in every task that reads data, once per input pipeline:

        fn(input_context, batch_size, split, **dataset.kwargs)

    Args:
        input_context: the tf.distribute.InputContext of this input pipeline (from
            strategy.distribute_datasets_from_function), or None where the strategy gives
            none. Shard by it: each pipeline must read its own part of the data
            (`ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)`,
            or better, a disjoint set of files).
        batch_size: examples per batch to return: the per-replica batch
            (dataset.per_replica_batch_size; the global batch is that x the replicas).
        split: "train" or "validation" (asked only when dataset.num_validation_examples > 0).
        num_features, num_examples, seed: this example's own keyword arguments, set with
            dataset.kwargs.NAME=VALUE.

    Returns:
        A tf.data.Dataset of (features, labels) batches of batch_size, or None for "validation"
        (no validation). Training data may be finite: xpdist repeats it. Labels are integer
        class indices 0..dataset.num_classes-1, or float targets where dataset.num_classes=0.
        The model's input shape and outputs are read from the dataset's element_spec.
    """
    import tensorflow as tf

    if split == "validation":
        return None
    rng = tf.random.Generator.from_seed(seed)
    x = rng.normal((num_examples, num_features))
    y = tf.reduce_mean(x, axis=1, keepdims=True)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(num_examples, seed=seed).batch(batch_size, drop_remainder=True)
