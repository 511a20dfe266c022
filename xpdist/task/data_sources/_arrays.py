"""Arrays: an in-memory data set, loaded whole as NumPy arrays, shuffled once and split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Tuple

import numpy as np


@dataclass
class Arrays:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    # regression or classification: decides the loss and metrics.
    kind: str
    num_outputs: int

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def in_memory(cfg, plan, launch_dir: Path, make: Callable) -> Arrays:
    """make(cfg, rng, launch_dir) -> (x, y), shuffled once with the run's seed, validation split off.

    Integer labels mean classification (as many classes as the largest label + 1), others a
    regression with one output per label column.
    """
    rng = np.random.default_rng(cfg.seed)
    x, y = make(cfg, rng, launch_dir)
    if np.issubdtype(y.dtype, np.integer):
        kind, outputs = "classification", int(y.max()) + 1
    else:
        y = y.astype("float32").reshape(len(y), -1)
        kind, outputs = "regression", int(y.shape[1])
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    n_train = plan.num_train
    return Arrays(x[:n_train], y[:n_train], x[n_train:], y[n_train:], kind, outputs)
