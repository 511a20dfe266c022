"""dataset=tfrecord: TFRecord files, counted and checked without TensorFlow (xpdist/core/datafiles.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from xpdist.core import datafiles
from xpdist.core.data_sources import Compression, DataSourceSpec, FileDataset
from xpdist.core.errors import ConfigError
from xpdist.core.rules import open_mapping

# tf.io.FixedLenFeature's dtypes.
DTYPES = ("float32", "int64", "string")
FIX = "Set dataset.features={NAME: {dtype: float32, shape: [8]}, label: {dtype: int64, shape: []}}."
# (key, the config's globs) of each split.
KEYS = {"train": ("dataset.files", "files"), "validation": ("dataset.validation_files", "validation_files")}


@dataclass
class TfrecordDataset(FileDataset):
    name: str = "tfrecord"
    # Globs of TFRecord files of tf.train.Example (relative to the launch directory).
    files: List[str] = field(default_factory=list)
    # Globs of the validation files (empty: no validation).
    validation_files: List[str] = field(default_factory=list)
    # Feature name -> {dtype: float32|int64|string, shape: [..]}; the label is one of them.
    features: Dict[str, Any] = field(default_factory=open_mapping)
    # The feature that is the label; the other features are the model's input (one feature:
    # that tensor; several: they are concatenated after flattening).
    label: str = "label"
    # Classes of an int64 label (labels 0..N-1); 0: the label is a regression target.
    num_classes: int = 0
    # Compression of the files: none, GZIP or ZLIB.
    compression: Compression = Compression.none


class Tfrecord(DataSourceSpec):
    name = "tfrecord"
    config = TfrecordDataset
    images = True
    validation_fix = "Set dataset.validation_split=0 and use dataset.validation_files."
    validation_key, validation_example = "validation_files", "[data/val-*.tfrecord]"
    honours = ("shuffle_buffer", "prefetch", "cache", "drop_remainder", "auto_shard_policy")
    source_type = "local"

    def split_sizes(self, cfg, launch_dir: Path, global_batch: int):
        def count(split):
            key, field = KEYS[split]
            files = datafiles.match_files(cfg.dataset[field], key, launch_dir)
            return sum(datafiles.count_records(f, cfg.dataset.compression, key) for f in files)

        return count("train"), count("validation") if cfg.dataset.validation_files else 0

    def preflight(self, cfg, launch_dir: Path) -> None:
        super().preflight(cfg, launch_dir)
        ds = cfg.dataset
        if not ds.features:
            raise ConfigError("dataset.features", "{}", "dataset=tfrecord needs the features to parse", FIX)
        for feature, spec in ds.features.items():
            if not isinstance(spec, Mapping) or spec.get("dtype") not in DTYPES or \
                    not isinstance(spec.get("shape", []), Sequence):
                raise ConfigError(f"dataset.features.{feature}", spec,
                                  f"each feature needs dtype ({', '.join(DTYPES)}) and shape (a list)", FIX)
        if ds.label not in ds.features:
            raise ConfigError("dataset.label", ds.label, f"not one of dataset.features ({', '.join(ds.features)})",
                              "Name the feature that holds the label.")
        if len(ds.features) < 2:
            raise ConfigError("dataset.features", list(ds.features), "only the label is given; the model needs inputs",
                              FIX)
        datafiles.match_files(ds.files, "dataset.files", launch_dir)
        if ds.validation_files:
            datafiles.match_files(ds.validation_files, "dataset.validation_files", launch_dir)

    def input_shape(self, cfg, launch_dir: Path):
        """One input feature as it is; several flattened and concatenated (the task parses them so)."""
        ds = cfg.dataset
        inputs = [[int(d) for d in spec.get("shape", [])] for k, spec in ds.features.items() if k != ds.label]
        if len(inputs) == 1:
            return tuple(inputs[0])
        return (sum(_size(shape) for shape in inputs),)

    def record(self, cfg, launch_dir: Path):
        sources = {}
        for split, (key, field) in KEYS.items():
            globs = cfg.dataset[field]
            sources[split] = (",".join(globs), datafiles.digest(datafiles.match_files(globs, key, launch_dir))) \
                if globs else None
        return sources

    def schema(self, cfg) -> dict:
        return {k: dict(v) for k, v in cfg.dataset.features.items()}


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


SPEC = Tfrecord()
