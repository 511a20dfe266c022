"""Fixtures of the integration tests."""

from __future__ import annotations

from typing import Dict

import pytest

from tests.conftest import xpdist_with_store
from tests.helpers import Xpdist


@pytest.fixture
def xpdist(request, tmp_path) -> Xpdist:
    """`python -m xpdist` in tmp_path, with a migrated store in place (see xpdist_with_store)."""
    return xpdist_with_store(request, tmp_path)


# Over 60 s (the optimizer matrix alone took 49 s, the precision matrix 82 s, in a loaded full
# run): 32 cells in six task processes (eight before the two shared them), at most eight cells
# each, one Keras flavour and logical CPU count each.
@pytest.fixture(scope="session")
def matrices(request, tmp_path_factory) -> Dict[str, Dict[str, dict]]:
    """The optimizer and precision matrices' cells, trained together (tests/integration/matrix.py):
    both modules' cells share a task process where they share a Keras flavour and logical CPU
    count, so that each such process imports TensorFlow once for both. Only the cells of the
    modules collected in this session train; tests/conftest.py groups the two files for xdist.

    Returns:
        {module name: {cell name: what matrix.run found}}.
    """
    from tests.integration import matrix, test_optimizer_matrix, test_precision_matrix

    collected = {item.path.name for item in request.session.items}
    cells = {}
    for module in (test_optimizer_matrix, test_precision_matrix):
        name = module.__name__.rsplit(".", 1)[1]
        if f"{name}.py" in collected:
            cells.update({f"{name}:{cell}": overrides for cell, overrides in module.matrix_cells().items()})
    found = matrix.run_grouped(tmp_path_factory.mktemp("matrices"), cells, timeout=600)
    by_module: Dict[str, Dict[str, dict]] = {}
    for key, result in found.items():
        module, cell = key.split(":", 1)
        by_module.setdefault(module, {})[cell] = {**result, "name": cell}
    return by_module
