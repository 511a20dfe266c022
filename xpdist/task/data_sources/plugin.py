"""dataset=plugin: the arrays of the user's own source (xpdist/core/data_sources/plugin.py)."""

from __future__ import annotations

from xpdist.core import data_sources
from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    """The arrays the user's spec makes with arrays(cfg, rng, launch_dir), shuffled and split here."""
    return in_memory(cfg, plan, launch_dir, data_sources.of(cfg).arrays)
