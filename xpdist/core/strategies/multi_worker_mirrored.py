"""strategy=multi_worker_mirrored: MultiWorkerMirroredStrategy over the workers of the cluster group.

communication tunes its collectives.
"""

from __future__ import annotations

from typing import List

from xpdist.core.devices import gpu_count
from xpdist.core.strategies import ClassStrategy, Keras3Fit, StrategySpec, WORKERS


class MultiWorkerMirrored(StrategySpec):
    name = "multi_worker_mirrored"
    config_base = ClassStrategy
    applies_to = ("communication",)  # MultiWorkerMirroredStrategy(communication_options=...)
    needs = WORKERS
    keras3_fit = Keras3Fit.cannot_train  # keras-team/keras#20585 (fails with 2 workers)
    fit_distributes_dataset = True

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        # Every GPU of every worker, else one (CPU) replica per worker.
        return workers * max(1, gpu_count())


SPEC = MultiWorkerMirrored()
