"""The layering of xpdist/ holds, and the driver process never imports TensorFlow.

The contracts live in pyproject.toml ([tool.importlinter]); `lint-imports` from the
repository root checks the same. Each check runs in a fresh interpreter, so what pytest or an
earlier test imported cannot hide or fake an import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.helpers import REPO, xpdist_env

LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the xpdist package found first on PYTHONPATH=root."""
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml") if root != REPO else None
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=xpdist_env({"PYTHONPATH": str(root)}),
                          capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "8 kept" in done.stdout, done.stdout


def test_import_contracts_catch_a_cycle_and_tensorflow_in_the_driver(tmp_path):
    """The contracts are not vacuous: a copy of xpdist with a cycle, a TF import and an upward import breaks them."""
    shutil.copytree(REPO / "xpdist", tmp_path / "xpdist", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "xpdist" / "core" / "errors.py").open("a") as f:
        f.write("\nfrom xpdist.core import plan  # noqa\n")  # plan imports errors: a cycle in core
    with (tmp_path / "xpdist" / "driver" / "checks" / "preflight.py").open("a") as f:
        f.write("\nimport tensorflow  # noqa\n")
    with (tmp_path / "xpdist" / "driver" / "engines" / "local.py").open("a") as f:
        f.write("\nfrom xpdist.driver.jobs import job  # noqa\n")  # an engine reaching up to the job
    done = lint(tmp_path)
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if " BROKEN" in line]  # "BROKEN (1 ignored import)"
    assert any("No import cycle" in line for line in broken), done.stdout
    assert any("never imports TensorFlow" in line for line in broken), done.stdout
    assert any("Driver rooms" in line for line in broken), done.stdout


def imported_modules(stderr: str) -> List[str]:
    """Every module `python -X importtime` reported importing (one line per import)."""
    return [line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")]


def driver_imports(workdir: Path, *args: str) -> tuple:
    """Runs the driver in a fresh interpreter; returns (process, modules it imported)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "xpdist", *args], cwd=workdir,
                          env=xpdist_env(), capture_output=True, text=True, timeout=300)
    return done, imported_modules(done.stderr)


def assert_no_tensorflow(modules: List[str]) -> None:
    assert "hydra" in modules and "xpdist.driver.checks.preflight" in modules, modules[:20]  # the probe works
    tf = [m for m in modules if m.split(".")[0] in ("tensorflow", "keras", "tf_keras")]
    assert not tf, tf[:10]


def test_driver_composes_and_rejects_without_tensorflow(tmp_path):
    done, modules = driver_imports(tmp_path, "--cfg", "job", "strategy=mirrored", "devices.logical_cpus=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert_no_tensorflow(modules)

    # Rejected by preflight (after the plan is computed): the checks run, still no TensorFlow.
    done, modules = driver_imports(tmp_path, "cross_ops=hierarchical")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "xpdist: error: cross_ops=" in done.stderr
    assert_no_tensorflow(modules)
    assert "xpdist.core.plan" in modules


@pytest.mark.slow
def test_driver_of_a_real_run_never_imports_tensorflow(tmp_path):
    """The whole driver side of a one-epoch run: MLflow run, task process, relay, close.

    The task process imports TensorFlow; -X importtime is not passed on to it, so what is
    reported is the driver's own imports.
    """
    done, modules = driver_imports(tmp_path, "trainer.epochs=1", "trainer.progress=false")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlflow" in modules  # the driver did record the run
    assert_no_tensorflow(modules)
