"""The project's own data sources, dataset options of xpdist without editing xpdist.

Rings: conf/dataset/rings.yaml extends xpdist's `plugin` option and names this class in
`_target_`. The driver (no TensorFlow) asks it how many examples there are and checks its keys
before a run exists; the task calls arrays() and xpdist shuffles, splits and batches what it
returns.

Spirals: dataset=spirals, an option of its own with its own keys (my_options.py registers it):
its dataclass says the keys, their defaults and rules; `load` is its task half.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xpdist.core import rules
from xpdist.core.data_sources import InMemoryDataset, InMemorySpec
from xpdist.core.errors import ConfigError


class Rings(InMemorySpec):
    """Points on concentric noisy rings in 2-D; the label is the ring. Keys: dataset.kwargs."""

    name = "rings"

    def size(self, cfg, launch_dir) -> int:
        return int(cfg.dataset.kwargs.num_examples)

    def input_shape(self, cfg, launch_dir):
        return (2,)

    def preflight(self, cfg, launch_dir) -> None:
        super().preflight(cfg, launch_dir)
        if cfg.dataset.kwargs.rings < 2:
            raise ConfigError("dataset.kwargs.rings", cfg.dataset.kwargs.rings, "a classifier needs 2 rings or more",
                              "Set dataset.kwargs.rings=3.")

    def arrays(self, cfg, rng, launch_dir):
        import numpy as np

        kw = cfg.dataset.kwargs
        y = rng.integers(0, kw.rings, size=self.size(cfg, launch_dir))
        angle = rng.uniform(0, 2 * np.pi, size=len(y))
        radius = 1.0 + y + kw.noise * rng.normal(size=len(y))
        x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
        return x.astype("float32"), y.astype("int32")


@dataclass
class SpiralsDataset(InMemoryDataset):
    """Points on interleaved noisy spiral arms in 2-D; the label is the arm."""

    name: str = "spirals"
    per_replica_batch_size: int = 16
    validation_split: float = 0.2
    # Number of examples.
    num_examples: int = 400
    # Spiral arms, one class each.
    arms: int = field(default=3, metadata=rules.at_least(2, "Use 2 or more arms."))
    # Gaussian noise on the points.
    noise: float = field(default=0.1, metadata=rules.at_least(0))


class Spirals(InMemorySpec):
    name = "spirals"
    config = SpiralsDataset

    def input_shape(self, cfg, launch_dir):
        return (2,)


def load(cfg, plan, launch_dir, strategy=None):
    """dataset=spirals, task half: the arrays, which xpdist shuffles, splits and batches."""
    from xpdist.task.data_sources import in_memory

    return in_memory(cfg, plan, launch_dir, _spirals)


def _spirals(cfg, rng, launch_dir):
    import numpy as np

    ds = cfg.dataset
    y = rng.integers(0, ds.arms, size=ds.num_examples)
    t = rng.uniform(0.2, 1.0, size=len(y))
    angle = 2 * np.pi * (1.5 * t + y / ds.arms)
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) + ds.noise * rng.normal(size=(len(y), 2))
    return x.astype("float32"), y.astype("int32")
