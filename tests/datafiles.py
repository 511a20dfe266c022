"""Small TFRecord files and image folders written by tests (TFRecords in a subprocess: the
fast tier never imports TensorFlow)."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

import numpy as np

# Features of the TFRecords below, as dataset.features overrides.
FEATURES = ["+dataset.features.x={dtype: float32, shape: [8]}", "+dataset.features.label={dtype: int64, shape: []}"]

_WRITER = """
import sys, numpy as np, tensorflow as tf
out, shards, per_shard, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
for shard in range(shards):
    with tf.io.TFRecordWriter(f"{out}-{shard}.tfrecord") as w:
        for _ in range(per_shard):
            x = rng.normal(size=8).astype("float32")
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x.sum() > 0)]))}))
                .SerializeToString())
"""


# Shards already written in this test process, by (shards, per_shard, seed): writing costs a
# TensorFlow import in a subprocess (seconds), copying them costs nothing.
_WRITTEN: Dict[tuple, Path] = {}


def write_tfrecords(prefix: Path, shards: int = 4, per_shard: int = 64, seed: int = 0) -> None:
    """Writes <prefix>-<i>.tfrecord: tf.train.Example with x (8 floats) and label (0 or 1)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    key = (shards, per_shard, seed)
    if key not in _WRITTEN:
        made = Path(tempfile.mkdtemp(prefix="xpdist-tfrecords-"))
        atexit.register(shutil.rmtree, made, True)
        subprocess.run([sys.executable, "-c", _WRITER, str(made / "data"), str(shards), str(per_shard), str(seed)],
                       check=True, capture_output=True)
        _WRITTEN[key] = made / "data"
    for shard in range(shards):
        shutil.copyfile(f"{_WRITTEN[key]}-{shard}.tfrecord", f"{prefix}-{shard}.tfrecord")


def write_image_folder(root: Path, classes=("cat", "dog"), per_class: int = 24, size: int = 12) -> None:
    """JPEG and PNG images of random pixels, one subfolder per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = (rng.random((size, size, 3)) * 255).astype("uint8")
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
