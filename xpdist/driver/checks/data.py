"""Preflight checks of the dataset, before TensorFlow starts: each data source checks its own keys,
files, folder or function (xpdist/core/data_sources/)."""

from __future__ import annotations

from pathlib import Path

from xpdist.core import data_sources
from xpdist.core.targets import check_target  # noqa: F401  (preflight checks model._target_ with it)


def check_source(cfg, launch_dir: Path) -> None:
    """dataset: its shared options, and its files, folder or function, checked without TensorFlow.

    Raises:
        ConfigError: naming the key at fault.
    """
    data_sources.of(cfg).preflight(cfg, launch_dir)
