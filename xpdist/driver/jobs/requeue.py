"""A SLURM job that SLURM requeued (preemption, `scontrol requeue`) continues its MLflow run.

SLURM starts a requeued batch job again with the same SLURM_JOB_ID and SLURM_RESTART_COUNT
above 0, so the job script's output folder (`outputs/slurm-$SLURM_JOB_ID/task-$SLURM_PROCID`)
is the same: the task finds its checkpoints and its metric file there and resumes, as after a
`cluster.max_restarts` restart on localhost. What is left is the run: the chief's driver tags
every run it makes under SLURM with the job (xpdist.slurm_job), and a requeued one reopens
the newest run with that tag instead of making a new one.

Each task of a multi-task job has its own output folder (task-$SLURM_PROCID), and only the
chief's holds the checkpoints: a requeued task that is not the chief copies them from the
run's job directory (its xpdist.job_dir tag, else its `checkpoints/` artifacts) before it
starts, so every worker restores the chief's epoch, as on cluster=localhost, where they share
one job directory. Restored from their own empty folders, the workers started over while the
chief went on, and the job failed in its first collective (a requeue seen with 2 tasks).

(A stand-in for `tracking.resume=RUN_ID`, which resumes any FAILED or KILLED run; this needs
no run id in the job script.)
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver.jobs import resume
from xpdist.tracking import store

TAG = "xpdist.slurm_job"
RESTARTS_TAG = "xpdist.slurm_restarts"


def job_key(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """<cluster>/<job id> of the SLURM job this process runs in, None outside SLURM."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return f"{environ.get('SLURM_CLUSTER_NAME', 'slurm')}/{job}"


def restarts(environ: Mapping[str, str] = os.environ) -> int:
    """How many times SLURM requeued this job (0: its first start)."""
    try:
        return int(environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def tags(environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """The tag that lets a requeued start of this job find its run."""
    key = job_key(environ)
    return {TAG: key} if key else {}


def find_run(uri: str, experiment: str, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The run a requeued job continues: the newest of its experiment tagged with this job."""
    key = job_key(environ)
    if key is None or restarts(environ) == 0:
        return None
    mlflow_client = store.client(uri)
    found = store.retry(mlflow_client.get_experiment_by_name, experiment)
    if found is None:
        return None
    runs = store.retry(mlflow_client.search_runs, [found.experiment_id], f"tags.`{TAG}` = '{key}'",
                       max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


def reopen(uri: str, run_id: str, environ: Mapping[str, str] = os.environ) -> str:
    """Marks the run RUNNING again, without its old error, with the job's restart count; returns its id."""
    store.reopen(uri, run_id, lambda run: {RESTARTS_TAG: str(restarts(environ))})
    return run_id


def fetch_chiefs_checkpoints(uri: str, experiment: str, job: JobDir, environ: Mapping[str, str] = os.environ) -> int:
    """A requeued job's task that is not the chief: the chief's checkpoints into its own job
    directory; returns their epoch (0: not requeued, or nothing saved yet)."""
    run_id = find_run(uri, experiment, environ)
    if run_id is None:
        return 0
    mlflow_client = store.client(uri)
    return resume.fetch_checkpoints(mlflow_client, store.retry(mlflow_client.get_run, run_id), job)
