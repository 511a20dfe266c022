"""strategy=central_storage: CentralStorageStrategy, variables on the CPU, computation mirrored."""

from __future__ import annotations

from typing import List

from xpdist.core.strategies import Keras3Fit, LocalDevicesStrategy, StrategySpec


class CentralStorage(StrategySpec):
    name = "central_storage"
    config_base = LocalDevicesStrategy
    replicas_in_one_process = True
    # Measured here: the weights match the other strategies, the metrics Model.fit logs do not.
    keras3_fit = Keras3Fit.wrong_metrics
    fit_distributes_dataset = True

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        return len(devices)


SPEC = CentralStorage()
