"""The CLI rejects bad input with one line on stderr, exit code 2, and no MLflow run.

These run the real `python -m xpdist` in a subprocess; preflight rejects the config before
any MLflow run is created or TensorFlow is imported, so each takes a few seconds.
"""

from __future__ import annotations

import pytest

from conftest import Xpdist
from unit_helpers import closed_port


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
])
def test_bad_config_is_one_line_and_exit_2(xpdist, overrides, key, says):
    line = assert_rejected(xpdist, xpdist.run(*overrides, timeout=120), key)
    assert says in line
    assert not (xpdist.workdir / "outputs").exists()  # no half-written output folder either


def test_unreachable_tracking_server(xpdist):
    uri = f"http://127.0.0.1:{closed_port()}"
    line = assert_rejected(xpdist, xpdist.run(f"tracking.uri={uri}", timeout=120), "tracking.uri")
    assert uri in line and "does not answer" in line


def test_file_store_is_refused_before_training(xpdist, tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    line = assert_rejected(xpdist, xpdist.run(f"tracking.uri={uri}", timeout=120), "tracking.uri")
    assert "file store" in line and "sqlite:///" in line
    assert not (xpdist.workdir / "outputs").exists() and not (tmp_path / "mlruns").exists()


def test_unreachable_tracking_server_from_the_environment(xpdist):
    uri = f"http://127.0.0.1:{closed_port()}"
    proc = xpdist.run(timeout=120, env={"MLFLOW_TRACKING_URI": uri})
    assert uri in assert_rejected(xpdist, proc, "tracking.uri")


def test_misspelled_key_fails_at_compose_time(xpdist):
    proc = xpdist.run("trainer.epoch=3", timeout=120)
    assert proc.returncode != 0
    assert "trainer.epoch" in proc.stderr and "Traceback" not in proc.stderr
    assert not (xpdist.workdir / "mlflow.db").exists()
