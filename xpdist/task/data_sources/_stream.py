"""Split and Streams: a streamed data set in the place of xpdist.task.data's arrays."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

from hydra.utils import get_method

from xpdist.core import strategies
from xpdist.task.data_sources import image_folder, pipeline, tfrecord


class DataError(RuntimeError):
    """Bad data found by the task: the message names the config key and the file or function."""


@dataclass
class Split:
    """One split ("train" or "validation") of a streamed source, batched on demand."""

    cfg: Any
    plan: Any
    launch_dir: Path
    split: str
    keras: Any
    strategy: Any

    def _examples(self, tf, training: bool, seed, context=None):
        name = self.cfg.dataset.name
        if name == "tfrecord":
            paths = tfrecord.files(self.cfg, self.launch_dir, self.split)
            paths, by_example = pipeline.shard_files(paths, self.cfg, context)
            return tfrecord.examples(tf, self.cfg, paths, training, seed), by_example
        examples = image_folder.examples(tf, self.keras, self.cfg, self.launch_dir, self.split)
        # Keras reads the folder as one list of files: pipelines can only split it by example.
        shard = context is not None and context.num_input_pipelines > 1 and self.cfg.dataset.auto_shard_policy != "off"
        return examples, shard

    def _user(self, tf, context, batch_size: int, training: bool):
        ds = call_user_function(tf, self.cfg, context, batch_size, self.split)
        ds = ds.repeat() if training else self._validation(tf, ds)
        return pipeline.prefetch(tf, ds, self.cfg).with_options(pipeline.options(tf, self.cfg))

    def global_batches(self, tf, training: bool):
        """Global batches for Model.fit (a custom source: per-replica batches, distributed here)."""
        if self.cfg.dataset.name == "custom":
            if strategies.get(self.plan.strategy).needs.coordinator:  # the coordinator's own validation batches
                return self._user(tf, None, self.plan.global_batch_size, training)
            return self.strategy.distribute_datasets_from_function(
                lambda context: self._user(tf, context, self.plan.per_replica_batch_size, training))
        examples, _ = self._examples(tf, training, self.cfg.seed)
        num_files = len(tfrecord.files(self.cfg, self.launch_dir, self.split)) if self.cfg.dataset.name == "tfrecord" else 0
        ds = pipeline.batches(tf, examples, self.cfg, self.plan.global_batch_size, training, self.cfg.seed,
                              num_files=num_files, num_workers=self.plan.num_workers)
        return ds if training else self._validation(tf, ds)

    def _validation(self, tf, ds):
        """The first validation_steps batches, with that cardinality declared: Keras 3's fit
        re-reads a finite validation set every epoch only when its length is known (a file
        reader's is not), else its second epoch stops with StopIteration."""
        steps = self.plan.validation_steps
        if self.plan.keras != "keras3":  # tf-keras re-reads it anyway; and under multi-worker
            return ds.take(steps)       # auto-sharding the declared length failed the assertion
        return ds.take(steps).apply(tf.data.experimental.assert_cardinality(steps))

    def dataset_fn(self, tf, training: bool):
        """Per-replica batches of one input pipeline, for distribute_datasets_from_function."""
        def fn(context):
            per_replica = context.get_per_replica_batch_size(self.plan.global_batch_size)
            if self.cfg.dataset.name == "custom":
                return self._user(tf, context, per_replica, training)
            examples, by_example = self._examples(tf, training, self.cfg.seed, context)
            ds = pipeline.batches(tf, examples, self.cfg, per_replica, training, self.cfg.seed, context, by_example)
            return ds if training else self._validation(tf, ds)

        return fn

    def worker_batches(self, tf):
        """A parameter_server worker's global batches, shuffled with the worker's own seed."""
        if self.cfg.dataset.name == "custom":
            return self._user(tf, None, self.plan.global_batch_size, training=True)
        seed = pipeline.worker_seed(tf)
        examples, _ = self._examples(tf, True, seed)
        return pipeline.batches(tf, examples, self.cfg, self.plan.global_batch_size, True, seed)


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


@dataclass
class Streams:
    """What the trainers read of a data set; the streamed counterpart of data.Arrays."""

    x_train: Split
    x_val: Optional[Split]
    kind: str
    num_outputs: int
    input_shape: Tuple[int, ...]
    y_train: None = None
    y_val: None = None


def load(tf, keras, cfg, plan, launch_dir: Path, strategy) -> Streams:
    """The streamed data set of cfg.dataset: its splits, and the shapes the model needs."""
    name = cfg.dataset.name
    if name == "tfrecord":
        shape, kind, outputs = tfrecord.describe(cfg)
    elif name == "image_folder":
        shape, kind, outputs = image_folder.describe(cfg, launch_dir)
    else:
        shape, kind, outputs = _describe_user(tf, cfg, plan)
    splits = [Split(cfg, plan, launch_dir, s, keras, strategy) for s in ("train", "validation")]
    return Streams(splits[0], splits[1] if plan.validation_steps else None, kind, outputs, shape)


def _describe_user(tf, cfg, plan):
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


def explain(tf, cfg, launch_dir: Path, err: Exception) -> Exception:
    """A DataError naming the key and the file for a TFRecord read that failed while training.

    TensorFlow's own message ("corrupted record at 12", "Feature: x ... could not be found")
    names neither, so on this error path alone each file is read again to find the first bad one.
    """
    if cfg.dataset.name != "tfrecord" or not isinstance(err, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
        return err
    spec = tfrecord._feature_spec(tf, cfg)
    compression = "" if cfg.dataset.compression == "none" else cfg.dataset.compression
    for split in ("train", "validation"):
        if split == "validation" and not cfg.dataset.validation_files:
            continue
        for path in tfrecord.files(cfg, launch_dir, split):
            records = tf.data.TFRecordDataset(path, compression_type=compression)
            try:
                for _ in records.map(lambda r: tf.io.parse_single_example(r, spec)):
                    pass
            except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as bad:
                key = "dataset.features" if isinstance(bad, tf.errors.InvalidArgumentError) else "dataset.files"
                reason = _tf_reason(bad.message)
                return DataError(f"{key}: {path} cannot be read as configured: {reason}")
    return err


def _tf_reason(message: str) -> str:
    """The part of a tf.data error a user can act on, without op names and device paths."""
    text = " ".join(re.sub(r"\[*\{\{[^}]*\}\}\]*|\[Op:[^\]]*\]|name:\s*$", " ", message).split())
    for marker in ("Feature: ", "corrupted record", "truncated record"):
        if marker in text:
            text = text[text.index(marker):]
            break
    return text[:200]
