"""dataset=digits: scikit-learn's bundled 8x8 digits, 1,797 images of 10 classes."""

from __future__ import annotations

from xpdist.core.data_sources import InMemorySpec


class Digits(InMemorySpec):
    name = "digits"
    images = True

    def size(self, cfg, launch_dir) -> int:
        return 1797  # sklearn.datasets.load_digits, known without importing scikit-learn

    def input_shape(self, cfg, launch_dir):
        return (8, 8, 1)


SPEC = Digits()
