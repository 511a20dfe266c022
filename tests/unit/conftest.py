"""Fixtures of the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Xpdist
from xpdist.core import plan as planning
from xpdist.driver.processes import standby


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    """Every unit test checks as on a machine without GPUs, whatever this one has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    planning.gpu_count.cache_clear()
    yield
    planning.gpu_count.cache_clear()


@pytest.fixture
def xpdist(tmp_path: Path) -> Xpdist:
    """`python -m xpdist` in tmp_path (its store created by the CLI), without the standby task.

    The unit tier's commands end before any training (refused, --check, --help, reports): a
    standby would be started only to be discarded, about half of each command's CPU time.
    tests/integration/test_standby.py checks the standby's part, a refused config included.
    """
    return Xpdist(tmp_path, env={standby.ENABLE_ENV: "0"})
