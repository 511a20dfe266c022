"""dataset=synthetic_regression: the guide's ones-to-ones data, made in memory from the seed."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec

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


class SyntheticRegression(InMemorySpec):
    name = "synthetic_regression"
    config = SyntheticRegressionDataset

    def input_shape(self, cfg, launch_dir):
        return (int(cfg.dataset.num_features),)


SPEC = SyntheticRegression()
