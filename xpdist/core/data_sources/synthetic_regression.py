"""dataset=synthetic_regression: the guide's ones-to-ones data, made in memory from the seed."""

from __future__ import annotations

from xpdist.core.data_sources import InMemorySpec


class SyntheticRegression(InMemorySpec):
    name = "synthetic_regression"

    def input_shape(self, cfg, launch_dir):
        return (int(cfg.dataset.num_features),)


SPEC = SyntheticRegression()
