"""Every accepted precision x jit_compile x trainer combination trains to a finite loss.

jit_compile=true under mirrored with 2 replicas failed under fit and ctl (keras-team/keras#19005):
preflight refuses it, and test_preflight checks the refusal.

Cells run several to a task process (tests/integration/matrix.py): mirrored on 2 logical
CPUs and multi_worker_mirrored on one worker, under fit and ctl, in the processes of the
optimizer matrix's cells of the same Keras flavour and CPU count (tests/integration/conftest.py). A real multi-worker cluster with mixed precision is in test_models.py.
"""

from __future__ import annotations

import math
from typing import Dict, List

import pytest


pytestmark = pytest.mark.slow

STRATEGIES = {
    "mirrored": ["strategy=mirrored", "devices.logical_cpus=2"],
    "multi_worker_mirrored": ["strategy=multi_worker_mirrored"],
}
SETTINGS = {
    "mixed_float16": ["trainer.precision=mixed_float16"],
    "mixed_bfloat16": ["trainer.precision=mixed_bfloat16"],
    "xla": ["trainer.jit_compile=true"],
    "mixed_bfloat16-xla": ["trainer.precision=mixed_bfloat16", "trainer.jit_compile=true"],
}
CELLS = {(s, t, p): STRATEGIES[s] + [f"trainer={t}", "optimizer=adam", "model=mlp"] + SETTINGS[p]
         for s in STRATEGIES for t in ("fit", "ctl") for p in SETTINGS
         if not (s == "mirrored" and "xla" in p)}


def _name(cell: tuple) -> str:
    return "-".join(cell)


def matrix_cells() -> Dict[str, List[str]]:
    """{cell name: overrides}, for the session's matrices fixture (tests/integration/conftest.py)."""
    return {_name(cell): overrides for cell, overrides in CELLS.items()}


# The first test of the two matrices to run takes over 60 s: its setup trains both matrices'
# cells (the matrices fixture, tests/integration/conftest.py).
@pytest.fixture(scope="module")
def matrix(matrices) -> Dict[str, dict]:
    return matrices["test_precision_matrix"]


@pytest.mark.parametrize("cell", CELLS, ids=_name)
def test_trains_one_epoch_to_a_finite_loss(matrix, cell):
    found = matrix[_name(cell)]
    assert "error" not in found, f"{_name(cell)}: {found['error']}"
    assert found["epochs"] == 1, found
    assert math.isfinite(found["loss"]), found
