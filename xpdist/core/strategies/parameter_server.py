"""strategy=parameter_server: ParameterServerStrategy; a chief coordinates, workers compute, ps tasks hold variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional

from xpdist.core import rules
from xpdist.core.devices import gpu_count
from xpdist.core.strategies import CHIEF_WORKERS_PS, ClassStrategy, Keras3Fit, StrategySpec


class Partitioner(Enum):
    # Variables are not sharded across parameter servers.
    none = 0
    # tf.distribute.experimental.partitioners.MinSizePartitioner.
    min_size = 1
    # tf.distribute.experimental.partitioners.FixedShardsPartitioner.
    fixed = 2


@dataclass
class ParameterServerStrategy(ClassStrategy):
    name: str = "parameter_server"
    # How variables are sharded over the parameter servers: none, min_size or fixed.
    variable_partitioner: Partitioner = Partitioner.none
    # variable_partitioner=min_size: smallest shard, in bytes (default 256 KiB).
    min_shard_bytes: int = field(default=256 << 10, metadata=rules.at_least(1))
    # variable_partitioner=min_size: at most this many shards (null: one per parameter server).
    max_shards: Optional[int] = field(default=None, metadata=rules.at_least(1))
    # variable_partitioner=fixed: exactly this many shards (null: one per parameter server).
    num_shards: Optional[int] = field(default=None, metadata=rules.at_least(1))


class ParameterServer(StrategySpec):
    name = "parameter_server"
    config = ParameterServerStrategy
    needs = CHIEF_WORKERS_PS
    keras3_fit = Keras3Fit.cannot_train  # keras-team/keras#18624 (not supported, maintainer statement)

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        # Steps are dispatched to one worker at a time: its GPUs are the replicas in sync.
        return max(1, gpu_count())


SPEC = ParameterServer()
