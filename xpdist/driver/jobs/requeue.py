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
A job that comes back with another task count goes on at that size (resize.apply, as for
tracking.resume at another size).

(A stand-in for `tracking.resume=RUN_ID`, which resumes any FAILED or KILLED run; this needs
no run id in the job script.)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Mapping, Optional

from xpdist.core.plan import Plan, resolved_at_run_time
from xpdist.core.protocol.jobdir import JobDir, checkpoint_epoch
from xpdist.driver.jobs import resize, resume
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


def prepare(uri: str, cfg, plan: Plan, params_of: Callable[[Plan], Dict[str, str]], job: JobDir,
            chief: bool, environ: Mapping[str, str] = os.environ) -> Optional[resume.Resumed]:
    """The run a requeued SLURM job continues and how, None when it is not requeued.

    A task that is not the chief first copies the chief's checkpoints into its job directory.
    SLURM may bring the job back with another task count: each task then works out the plan at
    the run's batch sizes (resize.apply: the global batch kept by default), the chief prints
    the change and tags the run with it.

    Raises:
        ConfigError: a global batch the new replica count cannot divide (core/plan.py at_size).
    """
    run_id = find_run(uri, cfg.tracking.experiment, environ)
    if run_id is None:
        return None
    mlflow_client = store.client(uri)
    run = store.retry(mlflow_client.get_run, run_id)
    epoch = checkpoint_epoch(job.checkpoints) if chief else resume.fetch_checkpoints(mlflow_client, run, job)
    resumed = resume.Resumed(run_id, from_epoch=epoch, plan=dataclasses.replace(plan, run_name=run.info.run_name))
    if not resolved_at_run_time(plan) and run.data.params.get("num_replicas", "").isdigit():
        resize.apply(resumed, mlflow_client, run, cfg, params_of, run.data.params, say=chief)
    return resumed


def reopen(uri: str, resumed: resume.Resumed, environ: Mapping[str, str] = os.environ) -> str:
    """Marks the run RUNNING again, without its old error, with the job's restart count and its
    size if it changed; returns its id."""
    store.reopen(uri, resumed.run_id, lambda run: {RESTARTS_TAG: str(restarts(environ)), **resumed.tags})
    if resumed.replicas_before is not None:
        resize.log_replicas_before(uri, resumed.run_id, resumed.replicas_before, resumed.from_epoch)
    return resumed.run_id
