"""Every accepted precision x jit_compile x trainer combination trains to a finite loss.

jit_compile=true under mirrored with 2 replicas failed under fit and ctl (keras-team/keras#19005):
preflight refuses it, and test_preflight checks the refusal.

Cells run several to a task process, as in test_optimizer_matrix (whose task side runs
them): mirrored on 2 logical CPUs and multi_worker_mirrored on one worker, under fit and
ctl. A real multi-worker cluster with mixed precision is in test_models.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest

pytestmark = pytest.mark.slow

MATRIX_TASK = Path(__file__).with_name("test_optimizer_matrix.py")
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


def _run_process(root: Path, cells: List[tuple]) -> Dict[str, dict]:
    from tests.helpers import xpdist_env

    named = json.dumps([[_name(c), CELLS[c]] for c in cells])
    proc = subprocess.run([sys.executable, str(MATRIX_TASK), str(root), named],
                          env=xpdist_env(), capture_output=True, text=True, timeout=400)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CELL "):
            found = json.loads(line[5:])
            results[found["name"]] = found
    for cell in cells:
        results.setdefault(_name(cell), {"error": f"exit {proc.returncode}\n{proc.stderr[-3000:]}"})
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Dict[str, dict]:
    from tests.integration.harness import JOBS

    root = tmp_path_factory.mktemp("precision-matrix")
    # One process per strategy and trainer: the logical CPUs and the Keras flavour are fixed per process.
    groups: Dict[tuple, List[tuple]] = {}
    for cell in CELLS:
        groups.setdefault(cell[:2], []).append(cell)
    results: Dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        for found in pool.map(lambda cells: _run_process(root, cells), groups.values()):
            results.update(found)
    return results


@pytest.mark.parametrize("cell", CELLS, ids=_name)
def test_trains_one_epoch_to_a_finite_loss(matrix, cell):
    found = matrix[_name(cell)]
    assert "error" not in found, f"{_name(cell)}: {found['error']}"
    assert found["epochs"] == 1, found
    assert math.isfinite(found["loss"]), found
