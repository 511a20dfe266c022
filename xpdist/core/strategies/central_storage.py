"""strategy=central_storage: CentralStorageStrategy, variables on the CPU, computation mirrored."""

from __future__ import annotations

from typing import List

from xpdist.core.errors import ConfigError
from xpdist.core.strategies import Keras3Fit, LocalDevicesStrategy, StrategySpec


class CentralStorage(StrategySpec):
    name = "central_storage"
    config_base = LocalDevicesStrategy
    replicas_in_one_process = True
    # Measured: the weights match the other strategies, the metrics Model.fit logs do not.
    keras3_fit = Keras3Fit.wrong_metrics
    fit_distributes_dataset = True

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        return len(devices)

    def preflight(self, cfg) -> None:
        # Keras' LossScaleOptimizer, which mixed_float16 trains with, refuses this strategy in the
        # task after TensorFlow has started ("Mixed precision is not supported with the
        # tf.distribute.Strategy: CentralStorageStrategy"; the custom loop fails on an
        # AggregatingVariable): say it before anything runs. mixed_bfloat16 scales no loss and trains.
        if cfg.trainer.precision == "mixed_float16":
            raise ConfigError("trainer.precision", "mixed_float16",
                              "Keras' loss scaling for mixed_float16 is not supported under CentralStorageStrategy",
                              "Use trainer.precision=mixed_bfloat16 or float32, or strategy=mirrored.")
        super().preflight(cfg)


SPEC = CentralStorage()
