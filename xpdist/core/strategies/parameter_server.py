"""strategy=parameter_server: ParameterServerStrategy; a chief coordinates, workers compute, ps tasks hold variables."""

from __future__ import annotations

from typing import List

from xpdist.core.devices import gpu_count
from xpdist.core.strategies import CHIEF_WORKERS_PS, Keras3Fit, StrategySpec


class ParameterServer(StrategySpec):
    name = "parameter_server"
    needs = CHIEF_WORKERS_PS
    keras3_fit = Keras3Fit.cannot_train  # keras-team/keras#18624 (not supported, maintainer statement)

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        # Steps are dispatched to one worker at a time: its GPUs are the replicas in sync.
        return max(1, gpu_count())


SPEC = ParameterServer()
