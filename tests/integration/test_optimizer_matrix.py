"""Every single-process strategy x trainer x optimizer trains one epoch to a finite loss.

Adam (like SGD with momentum) has slot variables; SGD without momentum has none. Keras 3
created them inside the custom loop's first traced step, which failed under
MirroredStrategy ("You must feed a value for placeholder tensor 'cond/else/_1/cond/
Placeholder_1'"): see xpdist.task.train.common.build_optimizer.

The 20 cells run several to a task process of one Keras flavour and logical CPU count
(tests/integration/matrix.py), beside the precision matrix's cells (tests/integration/conftest.py).
"""

from __future__ import annotations

import math
from typing import Dict, List

import pytest


pytestmark = pytest.mark.slow

STRATEGIES = {
    "default": ["strategy=default"],
    "one_device": ["strategy=one_device"],
    "mirrored": ["strategy=mirrored", "devices.logical_cpus=2"],
    "central_storage": ["strategy=central_storage", "devices.logical_cpus=2"],
    "multi_worker_mirrored": ["strategy=multi_worker_mirrored"],  # cluster=local: one worker
}
TRAINERS = ("fit", "ctl")
OPTIMIZERS = ("sgd", "adam")
CELLS = {(s, t, o): STRATEGIES[s] + [f"trainer={t}", f"optimizer={o}"]
         for s in STRATEGIES for t in TRAINERS for o in OPTIMIZERS}


def _name(cell: tuple) -> str:
    return "-".join(cell)


def matrix_cells() -> Dict[str, List[str]]:
    """{cell name: overrides}, for the session's matrices fixture (tests/integration/conftest.py)."""
    return {_name(cell): overrides for cell, overrides in CELLS.items()}


# The first test of the two matrices to run takes over 60 s: its setup trains both matrices'
# cells (the matrices fixture, tests/integration/conftest.py).
@pytest.fixture(scope="module")
def matrix(matrices) -> Dict[str, dict]:
    return matrices["test_optimizer_matrix"]


@pytest.mark.parametrize("cell", CELLS, ids=_name)
def test_trains_one_epoch_to_a_finite_loss(matrix, cell):
    found = matrix[_name(cell)]
    assert "error" not in found, f"{_name(cell)}: {found['error']}"
    assert found["epochs"] == 1, found
    assert math.isfinite(found["loss"]), found


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_fit_and_ctl_report_the_same_loss(matrix, strategy, optimizer):
    """Same seed, data and global batch: the custom loop's loss is Model.fit's (to float32 sums)."""
    fit, ctl = (matrix[_name((strategy, trainer, optimizer))] for trainer in TRAINERS)
    if "error" in fit or "error" in ctl:
        pytest.skip("a cell failed: see test_trains_one_epoch_to_a_finite_loss")
    assert ctl["loss"] == pytest.approx(fit["loss"], rel=1e-4)
