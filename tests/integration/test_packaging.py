"""A wheel installed non-editable into a fresh environment runs from a directory outside the
checkout: its configs ship inside the package.

The environment is a venv with --system-site-packages, so TensorFlow, MLflow and the other
dependencies come from this machine's Python instead of being installed again (no network).
The system site-packages also hold an editable install of some checkout; its finder is
appended to sys.meta_path, after the path-based finder, so the venv's own site-packages (where
the wheel goes) win. The test does not take that on trust: it checks that `xpdist.__file__`
is inside the venv for the venv's python (the driver starts tasks with that same python).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def clean_env() -> dict:
    """This machine's environment without anything pointing at a checkout or a store."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "TF_CONFIG")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run(cmd, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding the wheel built from this checkout."""
    root = tmp_path_factory.mktemp("packaging")
    # Built from a copy (links kept), so setuptools' build/ and egg-info stay out of the checkout.
    source = root / "source"
    for folder in ("xpdist", "hydra_plugins", "conf", "recipes"):
        shutil.copytree(REPO / folder, source / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    # No build isolation: setuptools is already here, and no package index is needed.
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", source],
        cwd=root)
    wheel = next((root / "dist").glob("xpdist-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "xpdist/conf/config.yaml" in names and "xpdist/conf/hydra/help/xpdist.yaml" in names
    assert any(n.startswith("xpdist/conf/recipe/") and n.endswith(".yaml") for n in names), names

    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], cwd=root)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel], cwd=root)
    return python


def test_installed_wheel_imports_from_the_venv(installed, tmp_path):
    where = run([installed, "-c", "import xpdist; print(xpdist.__file__)"], cwd=tmp_path).stdout.strip()
    venv = installed.parents[1]
    assert Path(where).is_relative_to(venv), where
    assert not Path(where).is_relative_to(REPO), where


def test_installed_wheel_composes_and_trains_outside_the_checkout(installed, tmp_path):
    done = run([installed, "-m", "xpdist", "--cfg", "job", "model=mlp"], cwd=tmp_path)
    assert "hidden_units:" in done.stdout, done.stdout  # the mlp option, read from the installed conf

    done = run([installed, "-m", "xpdist", "trainer.epochs=1", "trainer.progress=false"], cwd=tmp_path, timeout=600)
    assert "FINISHED" in done.stdout, done.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("xpdist")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")] == [1]
