"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from xpdist.core import plan as planning


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    """Every unit test checks as on a machine without GPUs, whatever this one has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    planning.gpu_count.cache_clear()
    yield
    planning.gpu_count.cache_clear()
