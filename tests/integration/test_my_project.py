"""examples/my_project: a user's own model, data and recipe, composed with xpdist's groups
through --config-dir, train to FINISHED from the project's directory."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, Xpdist, xpdist_env

pytestmark = pytest.mark.slow


def test_my_project_recipe_runs_its_own_model_and_data(tmp_path):
    project = tmp_path / "my_project"
    shutil.copytree(REPO / "examples" / "my_project", project, ignore=shutil.ignore_patterns("data", "__pycache__"))
    subprocess.run([sys.executable, "make_data.py"], cwd=project, check=True, timeout=60)

    done = subprocess.run([sys.executable, "-m", "xpdist", "--config-dir", "conf", "recipe=blobs_mirrored",
                           "trainer.epochs=1", "trainer.progress=false"],
                          cwd=project, env=xpdist_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    runs = Xpdist(project).runs()
    assert [r.info.status for r in runs] == ["FINISHED"]
    params = runs[0].data.params
    assert params["model._target_"] == "my_models.wide_and_deep", params
    assert params["dataset.path"] == "data/blobs.npz" and params["num_replicas"] == "2", params
    assert "accuracy" in runs[0].data.metrics  # integer labels: a classification run
