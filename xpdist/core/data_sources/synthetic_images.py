"""dataset=synthetic_images: random images and labels, made in memory from the seed."""

from __future__ import annotations

from xpdist.core.data_sources import InMemorySpec


class SyntheticImages(InMemorySpec):
    name = "synthetic_images"
    images = True

    def input_shape(self, cfg, launch_dir):
        return tuple(int(d) for d in cfg.dataset.image_shape)


SPEC = SyntheticImages()
