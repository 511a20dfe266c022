"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest

from tests.conftest import xpdist_with_store
from tests.helpers import Xpdist


@pytest.fixture
def xpdist(request, tmp_path) -> Xpdist:
    """`python -m xpdist` in tmp_path, with a migrated store in place (see xpdist_with_store)."""
    return xpdist_with_store(request, tmp_path)
