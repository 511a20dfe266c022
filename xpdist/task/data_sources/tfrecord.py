"""dataset=tfrecord: TFRecord files of tf.train.Example, parsed by dataset.features."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List, Tuple

from xpdist.core import datafiles
from xpdist.task.data_sources import _pipeline, _stream


def load(cfg, plan, launch_dir: Path, strategy) -> _stream.Streams:
    """The files' two splits; the shapes come from dataset.features, without reading a record."""
    return _stream.streams(_stream.FileSplit, cfg, plan, launch_dir, strategy, *describe(cfg),
                           source=sys.modules[__name__])


def files(cfg, launch_dir: Path, split: str) -> List[str]:
    key = "dataset.files" if split == "train" else "dataset.validation_files"
    globs = cfg.dataset.files if split == "train" else cfg.dataset.validation_files
    return [str(p) for p in datafiles.match_files(globs, key, launch_dir)]


def num_files(cfg, launch_dir: Path, split: str) -> int:
    return len(files(cfg, launch_dir, split))


def _feature_spec(tf, cfg):
    return {name: tf.io.FixedLenFeature(list(spec.get("shape", [])), getattr(tf, spec["dtype"]))
            for name, spec in cfg.dataset.features.items()}


def examples(tf, cfg, launch_dir: Path, split: str, training: bool, seed, context=None):
    """(features, label) examples of this pipeline's files, read with parallel interleave, and
    whether the pipeline must still shard them by example (fewer files than pipelines)."""
    paths, by_example = _pipeline.shard_files(files(cfg, launch_dir, split), cfg, context)
    ds = cfg.dataset
    compression = "" if ds.compression == "none" else ds.compression
    names = tf.data.Dataset.from_tensor_slices(paths)
    if training:  # a new file order every pass; examples are then shuffled by dataset.shuffle_buffer
        names = names.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    records = names.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
                               cycle_length=min(len(paths), 8), num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=not training)
    spec = _feature_spec(tf, cfg)
    label, inputs = ds.label, [k for k in ds.features if k != ds.label]

    def parse(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        if len(inputs) == 1:
            x = tf.cast(parsed[inputs[0]], tf.float32)
        else:
            x = tf.concat([tf.reshape(tf.cast(parsed[k], tf.float32), [-1]) for k in inputs], axis=0)
        y = parsed[label]
        return x, (y if ds.num_classes else tf.reshape(tf.cast(y, tf.float32), [-1]))

    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE), by_example


def describe(cfg) -> Tuple[Tuple[int, ...], str, int]:
    """(input shape, kind, outputs) from dataset.features, without reading a record."""
    from xpdist.core.data_sources import tfrecord

    ds = cfg.dataset
    shape = tfrecord.SPEC.input_shape(cfg, Path("."))
    if ds.num_classes:
        return shape, "classification", int(ds.num_classes)
    return shape, "regression", tfrecord._size(list(ds.features[ds.label].get("shape", [])))


def explain(tf, cfg, launch_dir: Path, err: Exception) -> Exception:
    """A DataError naming the key and the file for a TFRecord read that failed while training.

    TensorFlow's own message ("corrupted record at 12", "Feature: x ... could not be found")
    names neither, so on this error path alone each file is read again to find the first bad one.
    """
    if not isinstance(err, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
        return err
    spec = _feature_spec(tf, cfg)
    compression = "" if cfg.dataset.compression == "none" else cfg.dataset.compression
    for split in ("train", "validation"):
        if split == "validation" and not cfg.dataset.validation_files:
            continue
        for path in files(cfg, launch_dir, split):
            records = tf.data.TFRecordDataset(path, compression_type=compression)
            try:
                for _ in records.map(lambda r: tf.io.parse_single_example(r, spec)):
                    pass
            except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as bad:
                key = "dataset.features" if isinstance(bad, tf.errors.InvalidArgumentError) else "dataset.files"
                return _stream.DataError(f"{key}: {path} cannot be read as configured: {_tf_reason(bad.message)}")
    return err


def _tf_reason(message: str) -> str:
    """The part of a tf.data error a user can act on, without op names and device paths."""
    text = " ".join(re.sub(r"\[*\{\{[^}]*\}\}\]*|\[Op:[^\]]*\]|name:\s*$", " ", message).split())
    for marker in ("Feature: ", "corrupted record", "truncated record"):
        if marker in text:
            text = text[text.index(marker):]
            break
    return text[:200]
