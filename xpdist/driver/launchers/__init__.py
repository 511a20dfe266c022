"""Launchers, one per `cluster` option: how many task processes, where, with which TF_CONFIG.

    local      one task process on this machine
    localhost  a multi-process cluster on 127.0.0.1 (launchers/localhost.py)
    tf_config  the cluster manager started this process as one task; TF_CONFIG says which
    slurm      srun started this process as one task; SLURM_* say which
"""

from __future__ import annotations

from typing import Callable, Dict

from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.jobdir import JobDir
from xpdist.core.plan import Plan
from xpdist.core.registry import Registry
from xpdist.driver import standby
from xpdist.driver.launchers import localhost, process
from xpdist.driver.launchers.outcome import Outcome, outcome_from

Launcher = Callable[[object, Plan, JobDir, Dict[str, str]], "Outcome"]
LAUNCHERS: Registry[Launcher] = Registry("cluster")


@LAUNCHERS.register("local")
def _local(cfg, plan: Plan, job: JobDir, env: Dict[str, str]) -> Outcome:
    proc = standby.claim([str(job.root)], env)  # the task started with the command, if it is there
    proc = process.adopt(proc) if proc else process.start(process.task_command(job.root), env)
    code = process.wait(proc)
    standby.refill()  # the next job's task imports TensorFlow while this job's run is closed
    return outcome_from(job, code)


@LAUNCHERS.register("localhost")
def _localhost(cfg, plan: Plan, job: JobDir, env: Dict[str, str]) -> Outcome:
    return localhost.run(cfg, job, env)


def _in_place(cfg, plan: Plan, job: JobDir, env: Dict[str, str]) -> Outcome:
    """A cluster manager started this process as one task of the cluster; its task process
    runs here with the environment it was given."""
    code = process.run_one(process.task_command(job.root), env)
    return outcome_from(job, code, chief=ClusterEnv.from_environ(cfg.cluster.name).is_chief)


LAUNCHERS.register("tf_config")(_in_place)
LAUNCHERS.register("slurm")(_in_place)


def run(cfg, plan: Plan, job: JobDir, env: Dict[str, str]) -> Outcome:
    """Runs the job's task process(es) to the end."""
    return LAUNCHERS.get(cfg.cluster.name)(cfg, plan, job, env)
