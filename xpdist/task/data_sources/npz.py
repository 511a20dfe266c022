"""dataset=npz: arrays `x` and `y` of the user's .npz file."""

from __future__ import annotations

import numpy as np

from xpdist.core.plan import resolve_path
from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    with np.load(resolve_path(cfg.dataset.path, launch_dir)) as arrays:
        return arrays["x"].astype("float32"), arrays["y"]
