"""dataset=image_folder: class subfolders of images, read by keras.utils.image_dataset_from_directory."""

from __future__ import annotations

import sys
from pathlib import Path

from xpdist.core import datafiles
from xpdist.core.plan import resolve_path
from xpdist.task.data_sources import _stream


def load(cfg, plan, launch_dir: Path, strategy) -> _stream.Streams:
    """The folder's two splits: 3-channel images of dataset.image_size, one class per subfolder."""
    classes, _ = datafiles.image_files(resolve_path(cfg.dataset.path, launch_dir))
    return _stream.streams(_stream.FileSplit, cfg, plan, launch_dir, strategy, (*cfg.dataset.image_size, 3),
                           "classification", len(classes), source=sys.modules[__name__])


def num_files(cfg, launch_dir: Path, split: str) -> int:
    return 0  # Keras reads the folder as one list: its files cannot be dealt out to workers


def examples(tf, cfg, launch_dir: Path, split: str, training: bool, seed, context=None):
    """(image scaled to [0, 1], class index) examples of the training or validation subset.

    Keras splits the file list after shuffling it with the run's seed, so every task of a
    run (and both subsets) agree on which file is held out. Keras reads the folder as one list
    of files: pipelines can only split it by example.
    """
    ds = cfg.dataset
    subset = {"train": "training", "validation": "validation"}[split] if ds.validation_split else None
    images = tf.keras.utils.image_dataset_from_directory(
        str(resolve_path(ds.path, launch_dir)), labels="inferred", label_mode="int", batch_size=None,
        image_size=tuple(ds.image_size), shuffle=True, seed=cfg.seed,
        validation_split=ds.validation_split or None, subset=subset, verbose=False)
    images = images.map(lambda x, y: (x / 255.0, y), num_parallel_calls=tf.data.AUTOTUNE)
    shard = context is not None and context.num_input_pipelines > 1 and ds.auto_shard_policy != "off"
    return images, shard
