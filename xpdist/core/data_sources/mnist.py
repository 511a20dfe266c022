"""dataset=mnist: keras.datasets.mnist's 60,000 training images, downloaded by the task."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec

@dataclass
class MnistDataset(InMemoryDataset):
    name: str = "mnist"
    per_replica_batch_size: int = 64
    validation_split: float = 0.1


class Mnist(InMemorySpec):
    name = "mnist"
    config = MnistDataset
    images = True

    def size(self, cfg, launch_dir) -> int:
        return 60000  # known without downloading: the driver never fetches data

    def input_shape(self, cfg, launch_dir):
        return (28, 28, 1)


SPEC = Mnist()
