"""The project's own data source, a dataset option of xpdist without editing xpdist.

conf/dataset/rings.yaml extends xpdist's `plugin` option and names this class in `_target_`.
The driver (no TensorFlow) asks it how many examples there are and checks its keys before a
run exists; the task calls arrays() and xpdist shuffles, splits and batches what it returns.
"""

from __future__ import annotations

from xpdist.core.data_sources import InMemorySpec
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
