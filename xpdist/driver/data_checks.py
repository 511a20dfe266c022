"""Preflight checks of the dataset: its keys, files, folder or function, before TensorFlow starts."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

from xpdist.core import datafiles
from xpdist.core import plan as planning
from xpdist.core.errors import ConfigError

# tf.io.FixedLenFeature's dtypes.
TFRECORD_DTYPES = ("float32", "int64", "string")


def check_source(cfg, launch_dir: Path) -> None:
    """dataset: its options, and its files, folder or function, checked without TensorFlow."""
    _check_input_options(cfg)
    name = cfg.dataset.name
    if name == "tfrecord":
        _check_tfrecord(cfg, launch_dir)
    elif name == "image_folder":
        if not cfg.dataset.path:
            raise ConfigError("dataset.path", '""', "dataset=image_folder needs a folder",
                              "Set dataset.path=/path/to/folder with one subfolder per class.")
        datafiles.image_files(planning.resolve_path(cfg.dataset.path, launch_dir))
    elif name == "custom":
        check_target(cfg, "dataset", "Give module.function of a function that returns a tf.data.Dataset "
                      "(docs/data.md), with its package installed or on PYTHONPATH.")
        if cfg.dataset.num_examples is None and cfg.trainer.steps_per_epoch is None:
            raise ConfigError("trainer.steps_per_epoch", None, "dataset=custom with dataset.num_examples=null has "
                              "no known size, so an epoch has no length",
                              "Set trainer.steps_per_epoch=N, or dataset.num_examples to the examples per epoch.")
    if name in ("tfrecord", "custom") and cfg.dataset.validation_split:
        key = "dataset.validation_files" if name == "tfrecord" else "dataset.num_validation_examples"
        raise ConfigError("dataset.validation_split", cfg.dataset.validation_split,
                          f"dataset={name} does not split its data", f"Set dataset.validation_split=0 and use {key}.")
    if name != "npz":
        return
    if not cfg.dataset.path:
        raise ConfigError("dataset.path", '""', "dataset=npz needs a file", "Set dataset.path=/path/to/data.npz.")
    path = planning.resolve_path(cfg.dataset.path, launch_dir)
    if not path.is_file():
        raise ConfigError("dataset.path", cfg.dataset.path, f"no such file ({path})", "Point it at an existing .npz file.")
    import zipfile

    import numpy as np

    try:
        with np.load(path) as arrays:
            missing = [k for k in ("x", "y") if k not in arrays.files]
            lengths = None if missing else (len(arrays["x"]), len(arrays["y"]))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # empty, cut short, not a zip
        raise ConfigError("dataset.path", cfg.dataset.path, f"not a readable .npz file ({err or type(err).__name__})",
                          "Save it with numpy.savez(path, x=..., y=...).") from None
    if missing:
        raise ConfigError("dataset.path", cfg.dataset.path, f"the file has no array(s) {missing}",
                          "Save it with numpy.savez(path, x=..., y=...).")
    if lengths[0] != lengths[1]:
        raise ConfigError("dataset.path", cfg.dataset.path, f"x has {lengths[0]} examples but y has {lengths[1]}",
                          "Save one label per example: numpy.savez(path, x=x, y=y) with len(x) == len(y).")


def _check_input_options(cfg) -> None:
    ds = cfg.dataset
    if ds.shuffle_buffer < 0:
        raise ConfigError("dataset.shuffle_buffer", ds.shuffle_buffer, "must be 0 or more", "Use 0 or a buffer size.")
    if ds.prefetch < -1:
        raise ConfigError("dataset.prefetch", ds.prefetch, "must be -1 (autotune), 0 (none) or a number of batches",
                          "Use dataset.prefetch=-1.")
    if not ds.cache:
        raise ConfigError("dataset.cache", '""', "must be none, memory or a file path", "Use dataset.cache=none.")


def _check_tfrecord(cfg, launch_dir: Path) -> None:
    ds = cfg.dataset
    fix = "Set dataset.features={NAME: {dtype: float32, shape: [8]}, label: {dtype: int64, shape: []}}."
    if not ds.features:
        raise ConfigError("dataset.features", "{}", "dataset=tfrecord needs the features to parse", fix)
    for feature, spec in ds.features.items():
        if not isinstance(spec, Mapping) or spec.get("dtype") not in TFRECORD_DTYPES or \
                not isinstance(spec.get("shape", []), Sequence):
            raise ConfigError(f"dataset.features.{feature}", spec,
                              f"each feature needs dtype ({', '.join(TFRECORD_DTYPES)}) and shape (a list)", fix)
    if ds.label not in ds.features:
        raise ConfigError("dataset.label", ds.label, f"not one of dataset.features ({', '.join(ds.features)})",
                          "Name the feature that holds the label.")
    if len(ds.features) < 2:
        raise ConfigError("dataset.features", list(ds.features), "only the label is given; the model needs inputs",
                          fix)
    datafiles.match_files(ds.files, "dataset.files", launch_dir)
    if ds.validation_files:
        datafiles.match_files(ds.validation_files, "dataset.validation_files", launch_dir)


def check_target(cfg, group: str, fix: str) -> None:
    """<group>._target_ names a module.function whose top-level package can be found (see
    preflight._check_model_target: nothing is imported)."""
    target = cfg[group]._target_
    top = target.split(".")[0]
    if "." not in target or not top:
        raise ConfigError(f"{group}._target_", target or '""', "it is not a dotted path (module.function)", fix)
    if importlib.util.find_spec(top) is None:
        raise ConfigError(f"{group}._target_", target, f"no module '{top}' can be imported here", fix)
