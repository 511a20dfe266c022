"""cluster=localhost's processes: a real multi-process TensorFlow cluster on 127.0.0.1.

Every task is its own `python -m xpdist.task <job dir>` process with its own TF_CONFIG and
port, its output in <job dir>/logs/<type>-<index>.log. Separate processes, not in-process
servers: in-process parameter-server clusters can deadlock on a 2-core machine.

The launcher watches every task. The chief (worker 0 for multi_worker_mirrored, the
coordinator for parameter_server) ends the training; any other task that dies is a failure,
except a parameter_server worker, which ClusterCoordinator tolerates. A failure that a
restart may cure restarts the cluster while cluster.max_restarts allows (training resumes
from its recovery checkpoints): a task killed by a signal, lost (it did not start in time),
or failed with a network-type error (outcome.may_retry). A Python exception in user code,
config or data, or a full disk, is never retried: it would fail the same way again. Else it
stops every task and reports "<task> failed: <its error>". The restart policy and the
engine's checks are xpdist/driver/engines/localhost.py; this module is its processes.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import portpicker

from xpdist.core import strategies
from xpdist.core.clusterenv import TaskId as Task
from xpdist.core.protocol.jobdir import JobDir
from xpdist.core.protocol.taskenv import LAUNCHED_AT_ENV
from xpdist.driver.processes import process, standby
from xpdist.driver.processes.outcome import describe_exit, may_retry

# Seconds between two looks at the tasks.
POLL_S = 0.25
# Seconds the other tasks get to stop once a task has failed: their state is not kept.
FAILURE_GRACE_S = 3.0
# Seconds multi_worker_mirrored workers get to finish after the chief has finished.
FINISH_GRACE_S = 30.0


class TaskFailed(Exception):
    """A task of the cluster died or reported an error."""

    def __init__(self, task: Task, message: str, retryable: bool = True):
        self.task = task
        self.retryable = retryable  # a restart may cure it (see outcome.may_retry)
        super().__init__(f"{task.name} failed: {message}")


def free_ports(count: int) -> List[int]:
    """Ports free on 127.0.0.1 now, distinct.

    A port is free when picked and bound by TensorFlow a moment later; another process may
    take it in between. Such a collision makes a task fail to start its server, which the
    launcher sees as a failed task: with cluster.max_restarts it restarts on fresh ports.
    """
    return [portpicker.pick_unused_port() for _ in range(count)]


def cluster_spec(cfg) -> Tuple[Dict[str, List[str]], List[Task], Task]:
    """The cluster's jobs -> addresses, its tasks, and which task is the chief."""
    needs = strategies.of(cfg).needs
    counts = {"chief": 1, "worker": cfg.cluster.workers, "ps": cfg.cluster.ps}
    jobs = {kind: counts[kind] for kind in needs.jobs}
    ports = iter(free_ports(sum(jobs.values())))
    spec = {kind: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for kind, n in jobs.items()}
    tasks = [Task(kind, i) for kind, n in jobs.items() for i in range(n)]
    return spec, tasks, Task(needs.chief_job, 0)


def tf_config(spec: Dict[str, List[str]], task: Task) -> str:
    return json.dumps({"cluster": spec, "task": {"type": task.kind, "index": task.index}})


def last_error(log: Path) -> Optional[str]:
    """The one-line error a task printed last ("xpdist task: ..."), if any."""
    if not log.exists():
        return None
    lines = log.read_text(errors="replace").splitlines()
    found = [line.split("xpdist task: ", 1)[1] for line in lines if "xpdist task: " in line]
    return found[-1] if found else None


class Cluster:
    """The task processes of one job; start() may run again after a failure (a restart)."""

    def __init__(self, cfg, job: JobDir, env: Dict[str, str]):
        self.cfg, self.job, self.env = cfg, job, env
        # A coordinator's workers serve: one may die while training goes on, and none ends on its own.
        self.coordinated = strategies.of(cfg).needs.coordinator
        self.procs: Dict[Task, subprocess.Popen] = {}
        self.spec: Dict[str, List[str]] = {}
        self.tasks: List[Task] = []
        self.chief = Task("worker", 0)
        self.attempt = 0
        self.tolerated: set = set()  # parameter_server workers that died, training went on
        self.started_at = 0.0

    def start(self) -> None:
        """Starts every task on fresh ports."""
        self.attempt += 1
        self.spec, self.tasks, self.chief = cluster_spec(self.cfg)
        self.tolerated = set()
        self.job.logs.mkdir(parents=True, exist_ok=True)
        self.job.cluster_state.mkdir(parents=True, exist_ok=True)
        for task in self.tasks:
            self.job.ready_marker(task.file_name).unlink(missing_ok=True)
        self.job.result.unlink(missing_ok=True)
        self.started_at = time.monotonic()
        order = sorted(self.tasks, key=lambda t: t != self.chief)
        for task in order:
            # the standby is no longer needed after the last task, unless a restart may come
            self.start_task(task, last=task == order[-1] and not self.cfg.cluster.max_restarts)

    def start_task(self, task: Task, last: bool = False) -> None:
        self.job.ready_marker(task.file_name).unlink(missing_ok=True)
        log = open(self.log_of(task), "a")
        log.write(f"--- xpdist: start {task.name}, attempt {self.attempt}, TF_CONFIG {tf_config(self.spec, task)}\n")
        log.flush()
        env = dict(self.env, TF_CONFIG=tf_config(self.spec, task))
        if self.coordinated:
            env["GRPC_FAIL_FAST"] = "use_caller"  # the guide's setting: fail fast, let the coordinator retry
        if self.attempt > 1:  # a restart's first step counts from the restart
            env[LAUNCHED_AT_ENV] = repr(time.time())
        # Forked from the standby task where there is one (driver/processes/standby.py), which has imported
        # TensorFlow since the command started; its output goes to the task's log as well.
        claimed = standby.claim([str(self.job.root)], env, str(self.log_of(task)), last=last)
        with log:  # the child holds its own copy of the descriptor
            self.procs[task] = process.adopt(claimed) if claimed else \
                process.start(process.task_command(self.job.root), env, log)
        pids = {t.name: p.pid for t, p in self.procs.items()}
        self.job.tasks.write_text(json.dumps({"attempt": self.attempt, "pids": pids}, indent=2))

    def stop(self, first: int = signal.SIGTERM, grace_s: float = process.GRACE_S) -> None:
        process.stop(list(self.procs.values()), first=first, grace_s=grace_s)

    def watch(self) -> int:
        """Waits until the chief ends; returns its exit code.

        Raises:
            TaskFailed: another task died (a parameter_server worker only when none is left),
                or a task did not start within cluster.start_timeout_s.
        """
        while True:
            dead = [t for t, p in self.procs.items()
                    if t != self.chief and t not in self.tolerated and p.poll() not in (None, 0)]
            # A task killed by a signal is the likelier cause when the chief failed too.
            dead.sort(key=lambda t: self.procs[t].returncode >= 0)
            code = self.procs[self.chief].poll()
            if code is not None and not (dead and self.procs[dead[0]].returncode < 0):
                return code
            for task in dead:
                self._task_died(task, self.procs[task].returncode)
            if code is not None:
                return code
            self._check_started()
            # Woken by the chief's exit rather than at the next look: the run is closed that much sooner.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[self.chief].wait(timeout=POLL_S)

    def _task_died(self, task: Task, code: int) -> None:
        if not (self.coordinated and task.kind == "worker"):
            raise TaskFailed(task, self.describe(task, code), may_retry(code))
        if all(p.poll() not in (None, 0) for t, p in self.procs.items() if t.kind == "worker"):
            raise TaskFailed(task, self.describe(task, code) + f"; no {self.cfg.strategy.name} worker is left",
                             may_retry(code))
        # ClusterCoordinator moves this worker's steps to the workers left.
        self.tolerated.add(task)
        print(f"xpdist: {task.name} died ({self.describe(task, code)}); "
              "the coordinator goes on with the other workers", flush=True)

    def _check_started(self) -> None:
        if time.monotonic() - self.started_at < float(self.cfg.cluster.start_timeout_s):
            return
        for task in self.tasks:
            if not self.job.ready_marker(task.file_name).exists() and self.procs[task].poll() is None:
                raise TaskFailed(task, f"it did not start within cluster.start_timeout_s="
                                       f"{self.cfg.cluster.start_timeout_s:g} s (log: {self.log_of(task)})")
        self.started_at = float("inf")  # all started: stop checking

    def log_of(self, task: Task) -> Path:
        return self.job.log_of(task.file_name)

    def describe(self, task: Task, code: int) -> str:
        error = last_error(self.log_of(task))
        how = error or describe_exit(code, self.job).replace("the task", "it")
        return f"{how} (log: {self.log_of(task)})"

    def wait_others(self) -> None:
        """After the chief finished: MWMS workers end on their own; servers are stopped."""
        if not self.coordinated:
            deadline = time.monotonic() + FINISH_GRACE_S
            for proc in self.procs.values():  # each waited for, not looked at every POLL_S
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.stop(grace_s=FAILURE_GRACE_S)
