"""xpdist.sweep() on the real command: a parent run and its jobs' runs, a failed job among them."""

from __future__ import annotations

import pytest

import xpdist
from tests.helpers import TINY, Xpdist, xpdist_env

pytestmark = pytest.mark.slow


def test_a_real_sweep_returns_its_parent_and_children_as_mlflow_has_them(tmp_path):
    # The second job's global batch (200) is larger than the data (100 examples): it is
    # rejected before training and recorded FAILED, and the sweep goes on.
    swept = xpdist.sweep([*TINY, "trainer.epochs=1", "dataset.per_replica_batch_size=5,200"], cwd=tmp_path,
                         env=xpdist_env(), quiet=True)
    assert swept.status == "FAILED" and swept.error == "1 of 2 jobs failed"
    assert [(job.job, job.status) for job in swept.jobs] == [(0, "FINISHED"), (1, "FAILED")]
    assert swept.failed == [swept.jobs[1]] and "per_replica_batch_size" in swept.jobs[1].error
    finished = swept.jobs[0]
    assert finished.metrics["loss"] > 0 and finished.num_replicas == 1 and finished.global_batch_size == 5
    assert "dataset.per_replica_batch_size=5" in finished.overrides

    client = Xpdist(tmp_path).client()
    parent = client.get_run(swept.parent_run_id)
    assert parent.info.status == "FAILED" and parent.data.tags["xpdist.sweep"] == "true"
    for job in swept.jobs:
        assert client.get_run(job.run_id).data.tags["mlflow.parentRunId"] == swept.parent_run_id
    assert client.get_run(finished.run_id).data.metrics["loss"] == finished.metrics["loss"]
