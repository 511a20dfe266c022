"""dataset=digits: scikit-learn's bundled 8x8 digits, scaled to [0, 1]."""

from __future__ import annotations

from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images[..., None] / 16.0).astype("float32"), digits.target.astype("int32")
