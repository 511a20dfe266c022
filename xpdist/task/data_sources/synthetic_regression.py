"""dataset=synthetic_regression: the guide's ones-to-ones data (plus optional noise), made from the seed."""

from __future__ import annotations

from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    ds = cfg.dataset
    x = 1.0 + ds.noise * rng.standard_normal((ds.num_examples, ds.num_features))
    y = x.mean(axis=1, keepdims=True) + ds.noise * rng.standard_normal((ds.num_examples, 1))
    return x.astype("float32"), y.astype("float32")
