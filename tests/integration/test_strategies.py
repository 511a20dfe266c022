"""Every single-process strategy trains through the real CLI and is recorded in MLflow.

The same runs are the equivalence suite: with the same seed and global batch (8), every
strategy and both trainers end with the same weights. Their data has noise (so batch order
matters) and the linear model has its L2 term (so regularization scaling matters).
"""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
import yaml

from tests.helpers import LOG_MODEL, TINY
from tests.integration.harness import describe, git_checkout, run_many, store_template
from xpdist.tracking.params import SUMMARY_PARAMS

pytestmark = pytest.mark.slow

COMMON = ["seed=7", "dataset.noise=0.1", "dataset.num_examples=64", "trainer.epochs=2", LOG_MODEL]
EPOCHS = 2
# name -> (overrides, expected summary params that differ from one run to another)
RUNS = {
    "one_device-fit": (["strategy=one_device", "dataset.per_replica_batch_size=8"],
                       dict(strategy="one_device", num_replicas="1", devices="/cpu:0", run_name="one_device-1r")),
    "one_device-ctl": (["strategy=one_device", "dataset.per_replica_batch_size=8", "trainer=ctl"],
                       dict(strategy="one_device", trainer="ctl", num_replicas="1", devices="/cpu:0",
                            run_name="one_device-1r-ctl")),
    "mirrored2-auto-fit": (["strategy=mirrored", "devices.logical_cpus=2", "dataset.per_replica_batch_size=4"],
                           dict(strategy="mirrored", cross_ops="auto", num_replicas="2", devices="/cpu:0,/cpu:1",
                                run_name="mirrored-auto-2r")),
    "mirrored2-hierarchical-ctl": (
        ["strategy=mirrored", "cross_ops=hierarchical", "devices.logical_cpus=2", "dataset.per_replica_batch_size=4",
         "trainer=ctl"],
        dict(strategy="mirrored", cross_ops="hierarchical", trainer="ctl", num_replicas="2", devices="/cpu:0,/cpu:1",
             run_name="mirrored-hierarchical-2r-ctl")),
    "mirrored4-reduction-fit": (
        ["strategy=mirrored", "cross_ops=reduction_to_one_device", "devices.logical_cpus=4",
         "dataset.per_replica_batch_size=2"],
        dict(strategy="mirrored", cross_ops="reduction_to_one_device", num_replicas="4",
             devices="/cpu:0,/cpu:1,/cpu:2,/cpu:3", run_name="mirrored-reduction_to_one_device-4r")),
    "central_storage-fit": (["strategy=central_storage", "devices.logical_cpus=2", "dataset.per_replica_batch_size=4"],
                            dict(strategy="central_storage", keras="legacy", num_replicas="2",
                                 devices="/cpu:0,/cpu:1", run_name="central_storage-2r")),
    "central_storage-fit-keras3": (
        ["strategy=central_storage", "devices.logical_cpus=2", "dataset.per_replica_batch_size=4", "keras=keras3"],
        dict(strategy="central_storage", num_replicas="2", devices="/cpu:0,/cpu:1", run_name="central_storage-2r")),
    "mwms-ring-ctl": (["strategy=multi_worker_mirrored", "communication=ring", "dataset.per_replica_batch_size=8",
                       "trainer=ctl"],
                      dict(strategy="multi_worker_mirrored", communication="ring", trainer="ctl", num_replicas="1",
                           devices="/cpu:0", run_name="multi_worker_mirrored-ring-1r-ctl")),
    "mwms-auto-fit": (["strategy=multi_worker_mirrored", "dataset.per_replica_batch_size=8"],
                      dict(strategy="multi_worker_mirrored", communication="auto", keras="legacy", num_replicas="1",
                           devices="/cpu:0", run_name="multi_worker_mirrored-auto-1r")),
}
GIT_RUN = "one_device-fit"
DEFAULTS = dict(strategy=None, cross_ops="none", communication="none", cluster="local", model="linear",
                dataset="synthetic_regression", trainer="fit", keras="keras3", num_replicas=None,
                global_batch_size="8", per_replica_batch_size=None, learning_rate="0.01", devices=None)


# Over 60 s in the first test's setup (83 s in a fresh-clone CI run on a slow day here): every
# run of RUNS, each a CLI run with its own TensorFlow import, two at a time; the module's tests
# only read them.
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("strategies")
    commits = {}

    def setup(name, workdir):
        if name == GIT_RUN:  # launched from a git checkout: the run carries its commit
            commits[name] = git_checkout(workdir)

    done = run_many(root, store_template(root / "template"),
                    {name: COMMON + overrides for name, (overrides, _) in RUNS.items()}, setup=setup)
    done[GIT_RUN].commit = commits[GIT_RUN]
    return done


@pytest.mark.parametrize("name", RUNS)
def test_run_finished_with_the_summary_params(runs, name):
    done = runs[name]
    assert done.proc.returncode == 0, describe(done)
    assert done.run.info.status == "FINISHED", describe(done)
    expected = {**DEFAULTS, **RUNS[name][1]}
    expected["per_replica_batch_size"] = str(8 // int(expected["num_replicas"]))
    expected["tf_version"] = metadata.version("tensorflow")
    # Auto steps_per_execution: the 8 steps of an epoch in one call on one replica, else 1.
    expected["steps_per_execution"] = "8" if expected["strategy"] == "one_device" else "1"
    run_name = expected.pop("run_name")
    params = done.run.data.params
    assert set(SUMMARY_PARAMS) <= set(expected)
    assert {k: params.get(k) for k in expected} == expected
    assert done.run.info.run_name == run_name
    # The keys of the options the run used, and nothing else.
    assert params["trainer.epochs"] == str(EPOCHS) and params["seed"] == "7" and params["model.l2"] == "0.0001"
    assert not any(k.startswith(("model.filters", "model.hidden_units", "tracking.")) for k in params)
    if expected["strategy"] != "mirrored":  # cross_ops and communication keys only where they apply
        assert not any(k.startswith("cross_ops.") for k in params)
    assert any(k.startswith("communication.") for k in params) == (expected["strategy"] == "multi_worker_mirrored")
    if expected["cross_ops"] == "hierarchical":
        assert params["cross_ops.num_packs"] == "1"
    tags = done.run.data.tags
    for key in ("strategy", "cross_ops", "communication", "cluster"):
        assert tags[key] == expected[key]
    assert tags["xpdist.overrides"] == " ".join(TINY + COMMON + RUNS[name][0])
    assert "xpdist.error" not in tags
    if name == GIT_RUN:
        assert tags["mlflow.source.git.commit"] == done.commit
    else:
        assert "mlflow.source.git.commit" not in tags  # a temp directory is not a checkout


@pytest.mark.parametrize("name", RUNS)
def test_metrics_once_per_epoch(runs, name):
    done = runs[name]
    for metric in ("loss", "mae", "epoch_time_s", "examples_per_sec"):
        history = done.history(metric)
        assert [step for step, _ in history] == list(range(1, EPOCHS + 1)), (metric, history)
        assert all(np.isfinite(value) and value >= 0 for _, value in history), (metric, history)
    loss = [value for _, value in done.history("loss")]
    assert loss[-1] < loss[0]


@pytest.mark.parametrize("name", RUNS)
def test_artifacts(runs, name):
    done = runs[name]
    artifacts = done.artifacts()
    for path in ("config.yaml", "overrides.yaml", "model/model.keras"):
        assert path in artifacts, artifacts
    # A checkpoint per epoch, the last trainer.keep_checkpoints (2) of them.
    assert {"checkpoints/checkpoint", "checkpoints/ckpt-1.index", "checkpoints/ckpt-2.index"} <= set(artifacts)
    root = done.artifact_dir()
    config = yaml.safe_load((root / "config.yaml").read_text())
    assert config["strategy"]["name"] == done.run.data.params["strategy"]
    assert yaml.safe_load((root / "overrides.yaml").read_text())[-len(RUNS[name][0]):] == RUNS[name][0]


def test_summary_on_stdout(runs):
    done = runs["mirrored2-auto-fit"]
    out = done.proc.stdout
    assert f"xpdist: run mirrored-auto-2r FINISHED" in out
    assert f"run id: {done.run.info.run_id}" in out
    assert f"mlflow ui --host 127.0.0.1 --port 5000 --backend-store-uri {done.xpdist.uri}" in out
    assert "loss=" in out and "examples_per_sec=" in out


@pytest.mark.parametrize("name", [n for n in RUNS if n != "one_device-fit"])
def test_same_weights_as_one_device_fit(runs, name):
    """Same seed, same global batch: every strategy and trainer ends where one_device+fit does."""
    reference = runs["one_device-fit"].weights()
    weights = runs[name].weights()
    assert [w.shape for w in weights] == [w.shape for w in reference]
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


# Keras 3's loss tracker under CentralStorageStrategy over-counts: after steps of 8 examples its
# count reads 8, 24, 56 (not 8, 16, 24), so the logged loss is higher (2.27 and 1.32 where every
# other strategy logs 1.95 and 1.04) although the weights are identical. keras=auto therefore
# runs tf-keras there (central_storage-fit); forced Keras 3 still gets it wrong. Strict, so
# that a Keras fix shows up.
KERAS3_CENTRAL_STORAGE = pytest.mark.xfail(strict=True, reason="Keras 3 fit reports wrong metrics under central_storage")


@pytest.mark.parametrize("name", [pytest.param(n, marks=KERAS3_CENTRAL_STORAGE) if n == "central_storage-fit-keras3" else n
                                  for n in RUNS if n != "one_device-fit"])
def test_same_loss_as_one_device_fit(runs, name):
    """The logged loss is the same quantity whatever the strategy and trainer."""
    want = [v for _, v in runs["one_device-fit"].history("loss")]
    got = [v for _, v in runs[name].history("loss")]
    np.testing.assert_allclose(got, want, rtol=1e-4)
