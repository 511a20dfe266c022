"""examples/my_project: a user's own model, data and recipe, composed with xpdist's groups
through --config-dir, train to FINISHED from the project's directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, TINY, Xpdist, xpdist_env

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


def test_a_data_source_and_a_strategy_of_the_users_package_train_from_another_directory(tmp_path):
    """dataset=rings: my_sources.Rings, and strategy=announced_mirrored: my_strategies'
    MirroredStrategy subclass, each named by the project's YAML, found through PYTHONPATH from a
    working directory that is neither xpdist's checkout nor the project."""
    project = tmp_path / "my_project"
    shutil.copytree(REPO / "examples" / "my_project", project, ignore=shutil.ignore_patterns("data", "__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = xpdist_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(project)])})
    done = subprocess.run([sys.executable, "-m", "xpdist", "--config-dir", str(project / "conf"),
                           "recipe=rings_mirrored", "trainer.epochs=1", "trainer.progress=false"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    runs = Xpdist(elsewhere).runs()
    assert [r.info.status for r in runs] == ["FINISHED"]
    params = runs[0].data.params
    assert params["dataset"] == "plugin" and params["dataset._target_"] == "my_sources.Rings", params
    assert params["dataset.kwargs.num_examples"] == "600" and params["num_replicas"] == "2", params
    inputs = {tag.value: (d.dataset.name, json.loads(d.dataset.profile)["num_examples"])
              for d in runs[0].inputs.dataset_inputs for tag in d.tags if tag.key == "mlflow.data.context"}
    assert inputs == {"training": ("rings-train", 480), "validation": ("rings-validation", 120)}, inputs
    assert "val_accuracy" in runs[0].data.metrics
    # The subclass was built, with the devices strategy=mirrored plans (2 logical CPUs).
    assert params["strategy"] == "mirrored" and params["strategy._target_"] == "my_strategies.AnnouncedMirroredStrategy"
    announced = [line for line in done.stdout.splitlines() if line.startswith("my_strategies: mirroring over")]
    assert len(announced) == 1 and announced[0].count("device:CPU:") == 2, done.stdout[-2000:]

    refused = subprocess.run([sys.executable, "-m", "xpdist", "--config-dir", str(project / "conf"),
                              "dataset=rings", "dataset.kwargs.rings=1"],
                             cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "dataset.kwargs.rings=1: a classifier needs 2 rings" in refused.stderr, \
        refused.stderr[-2000:]


@pytest.mark.cluster
def test_an_engine_of_the_users_package_runs_a_cluster_from_another_directory(tmp_path):
    """cluster=notifying_localhost: my_engines.NotifyingLocalhost, a subclass of xpdist's localhost
    engine named by the project's YAML, runs a two-worker job and reports its outcome."""
    project = tmp_path / "my_project"
    shutil.copytree(REPO / "examples" / "my_project", project, ignore=shutil.ignore_patterns("data", "__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = xpdist_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(project)])})
    done = subprocess.run([sys.executable, "-m", "xpdist", "--config-dir", str(project / "conf"), *TINY,
                           "strategy=multi_worker_mirrored", "cluster=notifying_localhost", "cluster.workers=2",
                           "trainer.epochs=1", "dataset.num_examples=64"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    runs = Xpdist(elsewhere).runs()
    assert [r.info.status for r in runs] == ["FINISHED"]
    params = runs[0].data.params
    assert (params["cluster"], params["cluster._target_"]) == ("localhost", "my_engines.NotifyingLocalhost"), params
    assert params["num_replicas"] == "2", params
    assert (elsewhere / "notifications.txt").read_text() == "multi_worker_mirrored on 2 localhost workers: FINISHED\n"


def test_the_projects_registered_strategy_engine_and_data_source_train_from_another_directory(tmp_path):
    """strategy=pinned, cluster=journaled and dataset=spirals: options of the project's own,
    registered by my_options.py through xpdist.core.options (XPDIST_OPTIONS names it, as the
    project's entry point does once installed), with no YAML file and no --config-dir."""
    project = tmp_path / "my_project"
    shutil.copytree(REPO / "examples" / "my_project", project, ignore=shutil.ignore_patterns("data", "__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = xpdist_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(project)]), "XPDIST_OPTIONS": "my_options"})
    done = subprocess.run([sys.executable, "-m", "xpdist", "strategy=pinned", "cluster=journaled", "dataset=spirals",
                           "model=mlp", "model.hidden_units=[16]", "trainer.epochs=2", "trainer.progress=false",
                           "tracking.log_model=false"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "my_strategies: pinned to /cpu:0" in done.stdout, done.stdout[-2000:]

    runs = Xpdist(elsewhere).runs()
    assert [r.info.status for r in runs] == ["FINISHED"]
    params = runs[0].data.params
    assert (params["strategy"], params["cluster"], params["dataset"]) == ("pinned", "journaled", "spirals"), params
    assert (params["dataset.arms"], params["strategy.device"]) == ("3", "/cpu:0"), params
    assert "val_accuracy" in runs[0].data.metrics  # integer labels, validation_split 0.2
    assert (elsewhere / "journal.txt").read_text() == "pinned with spirals: FINISHED\n"

    helped = subprocess.run([sys.executable, "-m", "xpdist", "--help"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120)
    assert all(name in helped.stdout for name in ("pinned", "journaled", "spirals")), helped.stdout
    refused = subprocess.run([sys.executable, "-m", "xpdist", "dataset=spirals", "dataset.arms=1"],
                             cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.strip() == \
        "xpdist: error: dataset.arms=1: must be 2 or more. Use 2 or more arms.", refused.stderr[-2000:]
