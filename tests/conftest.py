"""Fixtures shared by every test tier (helpers live in tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Xpdist


@pytest.fixture
def xpdist(tmp_path: Path) -> Xpdist:
    """`python -m xpdist` in tmp_path, its MLflow store tmp_path/mlflow.db."""
    return Xpdist(tmp_path)
