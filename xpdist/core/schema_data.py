"""The schema shared by the `dataset` options: the base dataclasses and their enums.

Each source's own dataclass lives with its spec, in its module of xpdist/core/data_sources/.
A source has only the shared input options it honours (xpdist/core/data_sources/ says which
each one offers, and tests/unit/test_data_source_seam.py checks that they agree): a key a run
logs must change what the run does. The in-memory sources keep their exact seeded
permutation and so have no cache, drop_remainder or auto_shard_policy; the custom source's
function shuffles, caches and shards itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from omegaconf import MISSING, DictConfig, OmegaConf


def open_mapping() -> DictConfig:
    """An empty mapping whose keys are the user's own: `model.kwargs.units=32` adds one, no `+`.

    Hydra closes every node of the composed config (struct mode), typed `Dict[K, V]` mappings
    included, so a new key would need `+`. A node that sets its own struct flag to False keeps
    it through composition: the keys of a user's function or feature spec cannot be known here.
    """
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
