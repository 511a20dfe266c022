"""The data source seam, driver half: what xpdist knows about each `dataset` option, without TensorFlow.

Each module of this package (digits.py, tfrecord.py, ...) is one data source and holds its
schema dataclass (the keys of dataset=NAME, extending one of the bases below) and
its `SPEC`, a `DataSourceSpec` that answers every question the driver has about it: its schema
(`config`), the shared
input options it honours (`honours`, exactly the shared keys of its schema dataclass), how many
training and validation examples a config gives (`split_sizes`), its preflight checks
(`preflight`), its input shape where it is known before TensorFlow runs (`input_shape`), and
how the run records its data (`record`). In-memory and streamed sources alike: the plan,
preflight and the run's dataset inputs ask the spec, none compares a source's name. The task
half (how tf.data reads it) is the module of the same name in xpdist/task/data_sources/.

Adding a data source `foo` is three files: `foo.py` here, `xpdist/task/data_sources/foo.py`
and `conf/dataset/foo.yaml`; every list of data sources (the key checks, --help, the
configuration reference) is read from DATA_SOURCES. A user's package registers its own with
`xpdist.core.options.register_data_source` (docs/contributing.md).

Example:
    n_train, n_val = data_sources.of(cfg).split_sizes(cfg, launch_dir, global_batch)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, ClassVar, Dict, List, Optional, Tuple

from omegaconf import MISSING

from xpdist.core.errors import ConfigError
from xpdist.core.registry import Registry

# ---- the schema the sources share: each source's dataclass extends one of these ------------

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


def _shuffle_buffer(value) -> None:
    if value < 0:
        raise ConfigError("dataset.shuffle_buffer", value, "must be 0 or more", "Use 0 or a buffer size.")


def _prefetch(value) -> None:
    if value < -1:
        raise ConfigError("dataset.prefetch", value, "must be -1 (autotune), 0 (none) or a number of batches",
                          "Use dataset.prefetch=-1.")


def _cache(value) -> None:
    if not value:
        raise ConfigError("dataset.cache", '""', "must be none, memory or a file path", "Use dataset.cache=none.")


def _no_check(value) -> None:
    """Typed by the schema (a bool, an enum or a float): Hydra refuses a bad value."""


# The input options a source may offer, each with its check. A source that offers one honours
# it: the value changes what its pipeline does (tests/unit/test_data_source_seam.py).
SHARED_OPTIONS: Dict[str, Callable[[object], None]] = {
    "validation_split": _no_check, "shuffle_buffer": _shuffle_buffer, "prefetch": _prefetch, "cache": _cache,
    "drop_remainder": _no_check, "auto_shard_policy": _no_check,
}

# (source, digest) of one split, as MLflow records a dataset; None where the split has no source.
Source = Optional[Tuple[str, str]]


class DataSourceSpec:
    """One `dataset` option, as the driver sees it. Subclass it, one per module.

    Class attributes:
        name: the option's name, the same as its module's.
        config: its schema, a dataclass extending DatasetBase (or InMemoryDataset, FileDataset).
        honours: the SHARED_OPTIONS its pipeline honours, the same as its schema's shared keys.
        source_type: how MLflow records where the data comes from: "code" or "local" (files).
        images: its examples can be images (a conv net's input), named where model=cnn is refused.
        validation_fix: what to do instead of validation_split, for a source that does not honour it.
        validation_key, validation_example: the dataset key that gives this source validation data,
            and a value of it for the fix a message suggests (validation_hint).
    """

    name: ClassVar[str] = ""
    config: ClassVar[type] = DatasetBase
    honours: ClassVar[Tuple[str, ...]] = ()
    source_type: ClassVar[str] = "code"
    images: ClassVar[bool] = False
    validation_fix: ClassVar[str] = "Set dataset.validation_split=0."
    validation_key: ClassVar[str] = "validation_split"
    validation_example: ClassVar[str] = "0.2"

    def validation_hint(self) -> str:
        """How to give this source validation data, for an error's fix: `Set dataset.KEY (e.g. VALUE)`."""
        return f"Set dataset.{self.validation_key} (e.g. {self.validation_example})"

    def has_validation(self, cfg) -> bool:
        """Whether the config gives this source validation data (its validation_key set)."""
        return bool(cfg.dataset.get(self.validation_key))

    def resolve(self, cfg) -> "DataSourceSpec":
        """The spec that answers for this config: itself (dataset=plugin: the class its _target_ names)."""
        return self

    def split_sizes(self, cfg, launch_dir: Path, global_batch: int) -> Tuple[int, int]:
        """(training, validation) examples of one epoch."""
        raise NotImplementedError

    def preflight(self, cfg, launch_dir: Path) -> None:
        """This source's checks, before any run exists. Overrides call super().preflight first.

        Raises:
            ConfigError: naming the key at fault.
        """
        for key in self.honours:
            SHARED_OPTIONS[key](cfg.dataset[key])
        if "validation_split" not in self.honours and cfg.dataset.validation_split:
            raise ConfigError("dataset.validation_split", cfg.dataset.validation_split,
                              f"dataset={self.name} does not split its data", self.validation_fix)

    def input_shape(self, cfg, launch_dir: Path) -> Optional[Tuple[int, ...]]:
        """One example's input shape, or None where only TensorFlow can tell (a user's function)."""
        return None

    def record(self, cfg, launch_dir: Path) -> Dict[str, Source]:
        """{"train": source, "validation": source}: what identifies the data of each split.

        The default suits data made by code: the source names the option, and the digest
        hashes its keys and the seed (the same keys and seed make the same data).
        """
        described = json.dumps(dict(cfg.dataset), sort_keys=True, default=str) + f"|seed={cfg.seed}"
        source = (f"xpdist:{self.name}", hashlib.sha256(described.encode()).hexdigest()[:16])
        return {"train": source, "validation": source}

    def record_name(self, cfg) -> str:
        """The prefix of the recorded datasets' names (`digits` -> `digits-train`)."""
        return self.name

    def schema(self, cfg) -> dict:
        """The recorded datasets' schema (features and label), {} where it is not known up front."""
        return {}


class InMemorySpec(DataSourceSpec):
    """A source that the task loads whole as NumPy arrays; validation_split holds out a fraction."""

    honours = ("validation_split", "shuffle_buffer", "prefetch")

    def size(self, cfg, launch_dir: Path) -> int:
        """Examples in the whole data set, before validation_split."""
        return int(cfg.dataset.num_examples)

    def split_sizes(self, cfg, launch_dir: Path, global_batch: int) -> Tuple[int, int]:
        n = self.size(cfg, launch_dir)
        n_val = int(round(n * float(cfg.dataset.validation_split)))
        return n - n_val, n_val


DATA_SOURCES: Registry[DataSourceSpec] = Registry("dataset", package=__name__, attribute="SPEC")


# The spec of dataset=NAME; an unknown name raises KeyError listing the known ones and the nearest.
get = DATA_SOURCES.get


def of(cfg) -> DataSourceSpec:
    """The spec of the config's data source (cfg.dataset.name; dataset=plugin: the user's class)."""
    return get(cfg.dataset.name).resolve(cfg)


def describe(cfg, plan, launch_dir: Path) -> List[dict]:
    """What the run trains and validates on, as MLflow records a dataset (mlflow.entities.Dataset).

    Worked out in the driver from the files themselves (names, sizes, times) or the config,
    so the run shows its data from the start, and the task needs neither MLflow nor a
    protocol file for it. The data source's spec says what identifies each split.

    Returns:
        One dict per context: name, digest, source_type, source, schema (JSON), profile (JSON),
        context ("training" or "validation").
    """
    spec = of(cfg)
    sources = spec.record(cfg, launch_dir)
    out = []
    for split, context, count in (("train", "training", plan.num_train), ("validation", "validation", plan.num_val)):
        if sources.get(split) is None or not count:
            continue
        source, key = sources[split]
        out.append(dict(name=f"{spec.record_name(cfg)}-{split}", digest=key, source_type=spec.source_type,
                        source=source, schema=json.dumps(spec.schema(cfg), default=str),
                        profile=json.dumps({"num_examples": int(count)}), context=context))
    return out
