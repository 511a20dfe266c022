"""dataset=synthetic_images: random images and labels, made from the seed (for benchmarks)."""

from __future__ import annotations

import numpy as np

from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    ds = cfg.dataset
    x = rng.random((ds.num_examples, *ds.image_shape), dtype=np.float32)
    y = rng.integers(0, ds.num_classes, size=ds.num_examples).astype("int32")
    return x, y
