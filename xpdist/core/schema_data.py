"""The schema of the `dataset` group: one dataclass per data source, listed in DATASETS.

A source has only the shared input options it honours (xpdist/core/data_sources/ says which
each one offers, and tests/unit/test_data_source_seam.py checks that they agree): a key a run
logs must change what the run does. The in-memory sources keep their exact seeded
permutation and so have no cache, drop_remainder or auto_shard_policy; the custom source's
function shuffles, caches and shards itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf


def _open_mapping() -> DictConfig:
    """An empty mapping that takes new keys without `+` (see schema._open_mapping)."""
    return OmegaConf.create({}, flags={"struct": False})


class AutoShardPolicy(Enum):
    # By file where there are at least as many files as workers, else by example.
    auto = 0
    # Each worker reads whole files of its own.
    file = 1
    # Every worker reads every file and keeps every N-th example.
    data = 2
    # No sharding: every worker reads all of the data.
    off = 3


class Compression(Enum):
    none = 0
    GZIP = 1
    ZLIB = 2


@dataclass
class DatasetBase:
    # Fixed by each option, and what the code dispatches on: choose another with dataset=NAME.
    name: str = MISSING
    # Examples in each replica's batch; the global batch is this x the number of replicas.
    per_replica_batch_size: int = 32
    # Fraction of the examples held out for validation (0 disables validation). tfrecord and
    # custom do not split their data: they take validation_files / num_validation_examples.
    validation_split: float = 0.0
    # Batches prepared ahead: -1 lets tf.data tune it (AUTOTUNE), 0 disables prefetching.
    prefetch: int = -1


@dataclass
class InMemoryDataset(DatasetBase):
    # Shuffle buffer in examples. 0: each pass is an exact seeded permutation of the whole
    # training set, identical whatever the strategy or trainer; N > 0: tf.data's shuffle
    # with an N-example buffer (less memory, order depends on TensorFlow's seeding).
    shuffle_buffer: int = 0


@dataclass
class FileDataset(DatasetBase):
    # Shuffle buffer in examples; 0 shuffles the file order only.
    shuffle_buffer: int = 0
    # Cache the examples after reading: none, memory, or a file path (tf.data's cache file).
    cache: str = "none"
    # Drop a last partial validation batch (training batches are always whole).
    drop_remainder: bool = True
    # How a multi-worker run splits the input among workers (tf.data's AutoShardPolicy):
    # auto (by file where every worker gets a file, else by example), file, data, or off.
    auto_shard_policy: AutoShardPolicy = AutoShardPolicy.auto


@dataclass
class SyntheticRegressionDataset(InMemoryDataset):
    name: str = "synthetic_regression"
    per_replica_batch_size: int = 5
    # Number of examples.
    num_examples: int = 100
    # Features per example (the guide's example has 1).
    num_features: int = 1
    # Gaussian noise on the inputs and targets (0: the guide's ones-to-ones data).
    noise: float = 0.0


@dataclass
class SyntheticImagesDataset(InMemoryDataset):
    name: str = "synthetic_images"
    per_replica_batch_size: int = 64
    # Number of examples.
    num_examples: int = 2048
    # Image shape, height x width x channels.
    image_shape: List[int] = field(default_factory=lambda: [32, 32, 3])
    # Number of classes.
    num_classes: int = 10


@dataclass
class SyntheticTokensDataset(InMemoryDataset):
    name: str = "synthetic_tokens"
    per_replica_batch_size: int = 32
    # Number of examples (sequences).
    num_examples: int = 1024
    # Tokens per sequence.
    seq_len: int = 64
    # Token ids are 0..vocab_size-1, drawn uniformly.
    vocab_size: int = 1000
    # Number of classes of the sequence label.
    num_classes: int = 2


@dataclass
class DigitsDataset(InMemoryDataset):
    name: str = "digits"
    validation_split: float = 0.2


@dataclass
class NpzDataset(InMemoryDataset):
    name: str = "npz"
    # Path of a .npz file holding arrays `x` and `y` (relative to the launch directory).
    path: str = ""


@dataclass
class MnistDataset(InMemoryDataset):
    name: str = "mnist"
    per_replica_batch_size: int = 64
    validation_split: float = 0.1


@dataclass
class TfrecordDataset(FileDataset):
    name: str = "tfrecord"
    # Globs of TFRecord files of tf.train.Example (relative to the launch directory).
    files: List[str] = field(default_factory=list)
    # Globs of the validation files (empty: no validation).
    validation_files: List[str] = field(default_factory=list)
    # Feature name -> {dtype: float32|int64|string, shape: [..]}; the label is one of them.
    features: Dict[str, Any] = field(default_factory=_open_mapping)
    # The feature that is the label; the other features are the model's input (one feature:
    # that tensor; several: they are concatenated after flattening).
    label: str = "label"
    # Classes of an int64 label (labels 0..N-1); 0: the label is a regression target.
    num_classes: int = 0
    # Compression of the files: none, GZIP or ZLIB.
    compression: Compression = Compression.none


@dataclass
class ImageFolderDataset(FileDataset):
    name: str = "image_folder"
    # A directory with one subfolder of JPEG/PNG images per class (relative to the launch
    # directory); classes are the subfolder names in alphabetical order.
    path: str = ""
    # Images are resized to height x width.
    image_size: List[int] = field(default_factory=lambda: [64, 64])
    validation_split: float = 0.2


@dataclass
class CustomDataset(DatasetBase):
    name: str = "custom"
    # Dotted path of the user's function fn(input_context, batch_size, split, **kwargs)
    # returning a tf.data.Dataset of (features, labels) batches; see docs/data.md.
    _target_: str = "xpdist.task.data_sources.custom.example_dataset"
    # Extra keyword arguments for the function. Add one with dataset.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)
    # Training examples per epoch (its steps per epoch: this // global batch). null: the
    # size is unknown, and trainer.steps_per_epoch must be set.
    num_examples: Optional[int] = None
    # Validation examples per epoch (0: no validation, the function is not asked for it).
    num_validation_examples: int = 0
    # Classes of integer labels (labels 0..N-1); 0: labels are regression targets.
    num_classes: int = 0


@dataclass
class PluginDataset(InMemoryDataset):
    name: str = "plugin"
    # Dotted path of your own source: an InMemorySpec subclass (its driver half: size, checks)
    # with an arrays(cfg, rng, launch_dir) method returning (x, y) NumPy arrays; docs/data.md.
    _target_: str = "xpdist.core.data_sources.plugin.GaussianBlobs"
    # Your source's own keys, read by your class. Add one with dataset.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)


# Every option of the dataset group by name, in the order of docs/configuration.md.
DATASETS: Dict[str, type] = {cls.name: cls for cls in (
    SyntheticRegressionDataset, SyntheticImagesDataset, SyntheticTokensDataset, DigitsDataset, NpzDataset, MnistDataset,
    TfrecordDataset, ImageFolderDataset, CustomDataset, PluginDataset)}
