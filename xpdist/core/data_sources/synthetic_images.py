"""dataset=synthetic_images: random images and labels, made in memory from the seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec

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


class SyntheticImages(InMemorySpec):
    name = "synthetic_images"
    config = SyntheticImagesDataset
    images = True

    def input_shape(self, cfg, launch_dir):
        return tuple(int(d) for d in cfg.dataset.image_shape)


SPEC = SyntheticImages()
