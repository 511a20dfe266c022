"""The CLI rejects bad input with one line on stderr, exit code 2, and no MLflow run.

These run the real `python -m xpdist` in a process of its own, forked from the zygote
(tests/zygote.py: Python and the driver already imported); preflight rejects the config before
any MLflow run is created or TensorFlow is imported, so each takes a fraction of a second.
"""

from __future__ import annotations

import pytest

from tests.helpers import Xpdist
from tests.helpers import closed_port


def assert_rejected(xpdist: Xpdist, proc, key: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"xpdist: error: {key}=")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout.strip() == ""
    # No run at all: the store was never even created.
    assert not (xpdist.workdir / "mlflow.db").exists()
    assert not (xpdist.workdir / "mlruns").exists()
    return lines[0]


@pytest.mark.parametrize("overrides, key, says", [
    (["cross_ops=hierarchical"], "cross_ops", "use strategy=mirrored"),
    (["strategy=mirrored", "devices.logical_cpus=2", "dataset.per_replica_batch_size=60"],
     "dataset.per_replica_batch_size", "60 x 2 replicas = 120"),
    (["dataset=npz", "dataset.path=missing.npz"], "dataset.path", "missing.npz"),
    (["strategy=mirrored", "cross_ops=hierarchical", "cross_ops.num_packs=-1"], "cross_ops.num_packs", "no packing"),
    (["tracking.register_model=bad/name:x"], "tracking.register_model", "cannot contain '/' or ':'"),
    (["tracking.register_model=m", "tracking.model_alias=v1 bad"], "tracking.model_alias", "not ' '"),
    (["tracking.experiment="], "tracking.experiment", "MLflow needs an experiment name"),
])
def test_bad_config_is_one_line_and_exit_2(xpdist, overrides, key, says):
    line = assert_rejected(xpdist, xpdist.run(*overrides, timeout=120, fork="check"), key)
    assert says in line
    assert not (xpdist.workdir / "outputs").exists()  # no half-written output folder either


def test_unreachable_tracking_server(xpdist):
    uri = f"http://127.0.0.1:{closed_port()}"
    line = assert_rejected(xpdist, xpdist.run(f"tracking.uri={uri}", timeout=120, fork="check"), "tracking.uri")
    assert uri in line and "does not answer" in line


def test_file_store_is_refused_before_training(xpdist, tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    line = assert_rejected(xpdist, xpdist.run(f"tracking.uri={uri}", timeout=120, fork="check"), "tracking.uri")
    assert "file store" in line and "sqlite:///" in line
    assert not (xpdist.workdir / "outputs").exists() and not (tmp_path / "mlruns").exists()


def test_unreachable_tracking_server_from_the_environment(xpdist):
    uri = f"http://127.0.0.1:{closed_port()}"
    proc = xpdist.run(timeout=120, env={"MLFLOW_TRACKING_URI": uri}, fork="check")
    assert uri in assert_rejected(xpdist, proc, "tracking.uri")


@pytest.mark.parametrize("overrides, key, says", [
    (["strategy=mirrord"], "strategy", "Did you mean strategy=mirrored? Use one of: central_storage, default,"),
    (["recipe=quickstar"], "recipe", "Did you mean recipe=quickstart?"),  # a typo in a recipe's name
    (["trainer.epochs=two"], "trainer.epochs", "trainer.epochs takes a whole number, not 'two'. "
                                               "Use e.g. trainer.epochs=2."),  # a wrong type
    (["trainer.epoch=3"], "trainer.epoch", "trainer=fit has no key 'epoch'. Did you mean trainer.epochs? "
                                           "Its keys are: name, epochs,"),
    (["+trainer.epoch=3"], "trainer.epoch", "nothing would read it"),  # the trap of Hydra's own hint
    (["+unknown.key=1"], "unknown.key", "the config has no key 'unknown'"),
    (["model.filters=[8]"], "model.filters", "model=linear has no key 'filters'"),  # a key of another option
    (["+recipe=quickstart"], "+recipe", "Drop the +: recipe=quickstart"),
    (["model=custom", "model._target_=no_such_package.build"], "model._target_", "no module 'no_such_package'"),
])
def test_bad_config_from_hydra_or_the_schema_is_one_line_and_exit_2(xpdist, overrides, key, says):
    line = assert_rejected(xpdist, xpdist.run(*overrides, timeout=120, fork="check"), key)
    assert says in line and "HYDRA_FULL_ERROR" not in line and "To append" not in line
    assert not (xpdist.workdir / "outputs").exists()


def test_a_sweep_with_a_bad_value_exits_2_with_one_line(xpdist, store_uri):
    """Hydra composes each job of a sweep when it starts: the bad one stops the sweep, exit 2.
    (store_uri: a migrated store in place; the sweep opens it for its parent run.)"""
    proc = xpdist.run("trainer.epochs=two,1", multirun=True, tiny=False, timeout=120, fork="check")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("xpdist: error:")]
    assert errors == [line for line in proc.stderr.strip().splitlines()]
    assert len(errors) == 1 and errors[0].startswith("xpdist: error: trainer.epochs=two: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert all(run.info.status != "RUNNING" for run in xpdist.runs())
