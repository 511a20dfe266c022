"""Which task of which cluster this process is: TF_CONFIG or SLURM's variables, parsed once.

The driver uses it to decide whether it records the run (only the chief's driver does) and
how many workers the plan counts; the task uses it to decide whether it writes the shared
outputs, and how TensorFlow finds the cluster. Nothing else reads TF_CONFIG or SLURM_* for that.

Which of them a process reads is its `cluster` option's `place` (a class attribute of its
dataclass, xpdist/core/clusters/): one process reads nothing, TF_CONFIG_PLACE the TF_CONFIG
variable, SLURM_PLACE the variables srun sets. An engine that starts its tasks another way
names one of these places (Ray Train, for one, sets TF_CONFIG); none of this module knows
the engines by name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Mapping, Optional

from xpdist.core import clusters, strategies
from xpdist.core.errors import ConfigError

# Job names TF_CONFIG may use.
TF_CONFIG_JOBS = ("chief", "worker", "ps", "evaluator")
# The places a cluster option's tasks learn their part from (clusters.ClusterBase.place).
ALONE_PLACE, TF_CONFIG_PLACE, SLURM_PLACE = "", "TF_CONFIG", "SLURM"


@dataclasses.dataclass(frozen=True)
class TaskId:
    """One task of a cluster: its job (chief, worker or ps) and index within it."""

    kind: str
    index: int

    @property
    def name(self) -> str:
        """As TensorFlow and the logs name it: worker:1."""
        return f"{self.kind}:{self.index}"

    @property
    def file_name(self) -> str:
        """As its log and metric files are named: worker-1."""
        return f"{self.kind}-{self.index}"


@dataclasses.dataclass(frozen=True)
class ClusterEnv:
    """This process's place in its cluster.

    Attributes:
        kind: the cluster option (cfg.cluster.name).
        task_type: chief, worker or ps ("worker" for a single process).
        task_index: the task's index within its type.
        num_workers: the tasks that compute (workers, and the chief where there is one).
        spec: TF_CONFIG's cluster (job -> addresses), when there is one.
        place: what it was read from: ALONE_PLACE, TF_CONFIG_PLACE or SLURM_PLACE.
    """

    kind: str
    task_type: str = "worker"
    task_index: int = 0
    num_workers: int = 1
    spec: Optional[Dict[str, List[str]]] = None
    place: str = ALONE_PLACE

    @property
    def in_cluster(self) -> bool:
        """Its option runs tasks that talk to each other (even a cluster of one task)."""
        return self.place != ALONE_PLACE

    @property
    def srun_started(self) -> bool:
        """srun started the tasks: TensorFlow finds them with SlurmClusterResolver, not TF_CONFIG."""
        return self.place == SLURM_PLACE

    @property
    def is_chief(self) -> bool:
        """The chief (coordinator under parameter_server, else worker 0) records and saves."""
        if self.spec and "chief" in self.spec:
            return self.task_type == "chief"
        return self.task_type in ("worker", "chief") and self.task_index == 0

    @property
    def task_name(self) -> str:
        return TaskId(self.task_type, self.task_index).name

    @property
    def peers(self) -> List[str]:
        """The other tasks that compute with this one (chief and workers of TF_CONFIG's cluster),
        e.g. ["worker:1"]; empty where the cluster is not known here (alone, or started by srun)."""
        return [TaskId(job, index).name for job in ("chief", "worker") for index in range(len((self.spec or {}).get(job, [])))
                if (job, index) != (self.task_type, self.task_index)]

    @property
    def file_name(self) -> str:
        return TaskId(self.task_type, self.task_index).file_name

    @classmethod
    def from_environ(cls, kind: str, environ: Mapping[str, str] = os.environ) -> "ClusterEnv":
        """Reads what the option's place says (TF_CONFIG, SLURM_*, or nothing for one process).

        A malformed TF_CONFIG reads as a single task: preflight's check_tf_config reports it.
        """
        option = clusters.get(kind) if kind in clusters.CLUSTERS else clusters.ClusterBase
        return _READERS[option.place](kind, environ)


def _alone(kind: str, environ: Mapping[str, str]) -> ClusterEnv:
    return ClusterEnv(kind)


def _from_slurm(kind: str, environ: Mapping[str, str]) -> ClusterEnv:
    return ClusterEnv(kind, "worker", int(environ.get("SLURM_PROCID", "0") or 0), slurm_tasks(environ),
                      place=SLURM_PLACE)


def _from_tf_config(kind: str, environ: Mapping[str, str]) -> ClusterEnv:
    raw = environ.get("TF_CONFIG")
    if not raw:
        return ClusterEnv(kind, place=TF_CONFIG_PLACE)
    try:
        config = json.loads(raw)
        spec, task = dict(config["cluster"]), dict(config["task"])
        workers = len(spec.get("worker", [])) + len(spec.get("chief", []))
        return ClusterEnv(kind, str(task["type"]), int(task["index"]), max(1, workers), spec, TF_CONFIG_PLACE)
    except (ValueError, KeyError, TypeError):
        return ClusterEnv(kind, place=TF_CONFIG_PLACE)


_READERS = {ALONE_PLACE: _alone, TF_CONFIG_PLACE: _from_tf_config, SLURM_PLACE: _from_slurm}


def slurm_tasks(environ: Mapping[str, str] = os.environ) -> int:
    """Tasks of this SLURM job step, as SlurmClusterResolver counts them."""
    return max(1, int(environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS") or 1))


def check_tf_config(raw: Optional[str], strategy: str) -> dict:
    """Validates a TF_CONFIG value; returns it parsed.

    Raises:
        ConfigError: naming TF_CONFIG, what is wrong and what to do.
    """
    def bad(why: str, fix: str = "Set TF_CONFIG as described in docs/clusters.md.") -> ConfigError:
        return ConfigError("TF_CONFIG", raw if raw is None or len(raw) < 120 else raw[:117] + "...", why, fix)

    if not raw:
        raise bad("cluster=tf_config needs the TF_CONFIG environment variable", "Set it, or use cluster=localhost.")
    try:
        spec = json.loads(raw)
    except ValueError as err:
        raise bad(f"not valid JSON ({err.msg} at character {err.pos})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("cluster"), dict) or not spec["cluster"]:
        raise bad("no 'cluster' mapping of job names to address lists")
    task = spec.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise bad("no 'task' with 'type' and 'index'")
    for job, addresses in spec["cluster"].items():
        if job not in TF_CONFIG_JOBS:
            raise bad(f"unknown job type '{job}' in cluster (known: {', '.join(TF_CONFIG_JOBS)})")
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise bad(f"cluster.{job} must be a list of host:port strings")
    kind, index = task["type"], task["index"]
    if kind not in TF_CONFIG_JOBS:
        raise bad(f"unknown task type '{kind}' (known: {', '.join(TF_CONFIG_JOBS)})")
    if kind == "evaluator":
        raise bad("xpdist runs no side-car evaluator task (validation runs in the training loop)",
                  "Drop the evaluator from the cluster manager's job.")
    jobs = spec["cluster"].get(kind, [])
    if not isinstance(index, int) or not 0 <= index < len(jobs):
        raise bad(f"task index {index} is out of range: cluster.{kind} has {len(jobs)} address(es)")
    needs = strategies.get(strategy).needs
    if needs.coordinator:  # a coordinator dispatches to every job it needs: each must be there
        for needed in needs.jobs:
            if not spec["cluster"].get(needed):
                raise bad(f"{strategy} needs a '{needed}' job in cluster (the chief runs the coordinator)")
    return spec
