"""A run whose driver is lost is closed FAILED by the reaper; a live one, or one not xpdist's, never."""

from __future__ import annotations

import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from tests.helpers import REPO, xpdist_env
from xpdist.tracking import reap
from xpdist.tracking.heartbeat import HEARTBEAT_TAG, INTERVAL_TAG


def _run(client, experiment_id, tags):
    return client.create_run(experiment_id, tags=tags).info.run_id


def test_close_stale_closes_only_lost_runs(tmp_path, store_uri):
    uri = store_uri
    client = MlflowClient(tracking_uri=uri)
    first = client.create_experiment("a")
    second = client.create_experiment("b")
    now = time.time()
    lost = _run(client, first, {HEARTBEAT_TAG: f"{now - 120:.0f}", INTERVAL_TAG: "1"})
    lost_elsewhere = _run(client, second, {HEARTBEAT_TAG: f"{now - 120:.0f}", INTERVAL_TAG: "1"})
    alive = _run(client, first, {HEARTBEAT_TAG: f"{now:.0f}", INTERVAL_TAG: "1"})
    # Its own interval is long: 60 s without a beat is not yet three of them.
    slow = _run(client, first, {HEARTBEAT_TAG: f"{now - 60:.0f}", INTERVAL_TAG: "30"})
    foreign = _run(client, first, {})  # not made by xpdist: no heartbeat, never touched

    closed = reap.close_stale(uri, timeout_s=30)

    assert sorted(closed) == sorted([lost, lost_elsewhere])
    for run_id in closed:
        run = client.get_run(run_id)
        assert run.info.status == "FAILED"
        assert run.data.tags["xpdist.error"].startswith("driver lost; last heartbeat at ")
    for run_id in (alive, slow, foreign):
        assert client.get_run(run_id).info.status == "RUNNING"
    assert reap.close_stale(uri, timeout_s=30) == []


def test_reap_command(tmp_path, store_uri):
    uri = store_uri
    client = MlflowClient(tracking_uri=uri)
    run_id = _run(client, client.create_experiment("a"), {HEARTBEAT_TAG: f"{time.time() - 100:.0f}"})
    out = subprocess.run([sys.executable, "-m", "xpdist.tracking.reap", "--uri", uri, "--timeout-s", "40"],
                         cwd=REPO, env=xpdist_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"closed run {run_id} as FAILED" in out.stdout
    assert "1 stale run(s) closed" in out.stdout
    assert client.get_run(run_id).info.status == "FAILED"


def test_missing_store_is_not_created(tmp_path):
    assert reap.close_stale(f"sqlite:///{tmp_path / 'none.db'}") == []
    assert not (tmp_path / "none.db").exists()
