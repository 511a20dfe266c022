"""dataset=digits: scikit-learn's bundled 8x8 digits, 1,797 images of 10 classes."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec

@dataclass
class DigitsDataset(InMemoryDataset):
    name: str = "digits"
    validation_split: float = 0.2


class Digits(InMemorySpec):
    name = "digits"
    config = DigitsDataset
    images = True

    def size(self, cfg, launch_dir) -> int:
        return 1797  # sklearn.datasets.load_digits, known without importing scikit-learn

    def input_shape(self, cfg, launch_dir):
        return (8, 8, 1)


SPEC = Digits()
