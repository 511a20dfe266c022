"""dataset=tfrecord: TFRecord files of tf.train.Example, parsed by dataset.features."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from xpdist.core import datafiles


def files(cfg, launch_dir: Path, split: str) -> List[str]:
    key = "dataset.files" if split == "train" else "dataset.validation_files"
    globs = cfg.dataset.files if split == "train" else cfg.dataset.validation_files
    return [str(p) for p in datafiles.match_files(globs, key, launch_dir)]


def _feature_spec(tf, cfg):
    return {name: tf.io.FixedLenFeature(list(spec.get("shape", [])), getattr(tf, spec["dtype"]))
            for name, spec in cfg.dataset.features.items()}


def examples(tf, cfg, paths: List[str], training: bool, seed):
    """(features, label) examples of the files, read with parallel interleave."""
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

    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def describe(cfg) -> Tuple[Tuple[int, ...], str, int]:
    """(input shape, kind, outputs) from dataset.features, without reading a record."""
    ds = cfg.dataset
    inputs = [list(spec.get("shape", [])) for k, spec in ds.features.items() if k != ds.label]
    shape = tuple(inputs[0]) if len(inputs) == 1 else (sum(_size(s) for s in inputs),)
    if ds.num_classes:
        return shape, "classification", int(ds.num_classes)
    return shape, "regression", _size(list(ds.features[ds.label].get("shape", [])))


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
