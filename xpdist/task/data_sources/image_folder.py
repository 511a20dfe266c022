"""dataset=image_folder: class subfolders of images, read by keras.utils.image_dataset_from_directory."""

from __future__ import annotations

from pathlib import Path

from xpdist.core import datafiles
from xpdist.core.plan import resolve_path


def examples(tf, keras, cfg, launch_dir: Path, split: str):
    """(image scaled to [0, 1], class index) examples of the training or validation subset.

    Keras splits the file list after shuffling it with the run's seed, so every task of a
    run (and both subsets) agree on which file is held out.
    """
    ds = cfg.dataset
    subset = {"train": "training", "validation": "validation"}[split] if ds.validation_split else None
    images = keras.utils.image_dataset_from_directory(
        str(resolve_path(ds.path, launch_dir)), labels="inferred", label_mode="int", batch_size=None,
        image_size=tuple(ds.image_size), shuffle=True, seed=cfg.seed,
        validation_split=ds.validation_split or None, subset=subset, verbose=False)
    return images.map(lambda x, y: (x / 255.0, y), num_parallel_calls=tf.data.AUTOTUNE)


def describe(cfg, launch_dir: Path):
    classes, _ = datafiles.image_files(resolve_path(cfg.dataset.path, launch_dir))
    return (*cfg.dataset.image_size, 3), "classification", len(classes)
