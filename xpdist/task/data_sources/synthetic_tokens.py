"""dataset=synthetic_tokens: random token ids and labels, made from the seed (for model=transformer benchmarks)."""

from __future__ import annotations

import numpy as np

from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    ds = cfg.dataset
    x = rng.integers(0, ds.vocab_size, size=(ds.num_examples, ds.seq_len)).astype("int32")
    y = rng.integers(0, ds.num_classes, size=ds.num_examples).astype("int32")
    return x, y
