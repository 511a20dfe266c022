"""strategy=tpu: the replica count comes from TensorFlow in the task, and the run says what it was.

No TPU here: the plumbing is tested on its own, with the count a TPU system of 8 cores would
report: the plan redone for it, resolved.json written and read back, and the params logged
into a real MLflow store once known (never the planning guess of 1).
"""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.unit.unit_helpers import plain
from xpdist.core.plan import RESOLVED_BY_TASK, make_plan, with_replicas
from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver.jobs import job as job_module


def _tpu_plan(tmp_path: Path, *overrides: str):
    cfg = plain("strategy=tpu", "optimizer.lr_scaling=linear", "dataset.num_examples=1000", *overrides)
    return cfg, make_plan(cfg, tmp_path)


def test_plan_follows_the_replicas_tensorflow_reports(tmp_path):
    cfg, plan = _tpu_plan(tmp_path)
    assert plan.num_replicas == 1  # all that can be known before TensorFlow runs
    resolved = with_replicas(cfg, plan, 8)
    per_replica = plan.per_replica_batch_size
    assert resolved.num_replicas == 8
    assert resolved.global_batch_size == 8 * per_replica
    assert resolved.learning_rate == plan.learning_rate * 8  # linear scaling on the real global batch
    assert resolved.steps_per_epoch == plan.num_train // (8 * per_replica)
    assert resolved.run_name.endswith("8r")
    assert with_replicas(cfg, plan, 1) == plan


def test_params_logged_once_known(tmp_path, store_uri):
    cfg, plan = _tpu_plan(tmp_path)
    config = OmegaConf.to_container(cfg)
    created = job_module._creation_params(config, plan)
    assert not set(RESOLVED_BY_TASK) & set(created)  # no guess in the run

    uri = store_uri
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("tpu")).info.run_id
    job = JobDir(tmp_path / "job")
    job.root.mkdir()
    result = job_module.JobResult(status="FINISHED")
    job_module._log_resolved(uri, run_id, job, plan, result)  # the task died before its strategy existed
    assert not client.get_run(run_id).data.params

    job.write_resolved(with_replicas(cfg, plan, 8))  # what the task writes once TensorFlow has answered
    job_module._log_resolved(uri, run_id, job, plan, result)
    params = client.get_run(run_id).data.params
    assert params["num_replicas"] == "8"
    assert params["global_batch_size"] == str(8 * plan.per_replica_batch_size)
    assert float(params["learning_rate"]) == plan.learning_rate * 8
    assert (result.num_replicas, result.global_batch_size) == (8, 8 * plan.per_replica_batch_size)
