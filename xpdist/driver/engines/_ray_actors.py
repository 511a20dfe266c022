"""cluster=ray's tasks as the driver holds them: Ray reached, the placement group, and one
actor per task (_ray_node.Node), started, polled, brought back and ended.

This is to engines/ray.py what processes/localhost.py's Cluster is to engines/localhost.py:
the tasks, while the engine is the policy (checks, restarts, Ctrl-C). Ray is imported inside
the functions: only a job with cluster=ray imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import shutil
import signal
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import TaskId
from xpdist.core.protocol.jobdir import JobDir
from xpdist.core.protocol.outcome import one_line
from xpdist.driver.engines import _ray_node
from xpdist.driver.processes import process
from xpdist.driver.processes.localhost import FINISH_GRACE_S, POLL_S, TaskFailed, last_error, tf_config
from xpdist.driver.processes.outcome import describe_exit, may_retry

# Seconds an actor may take to answer a poll before its task counts as lost (its node is gone
# or cut off); Ray's own health checks declare a dead node after about 30 s by default.
ANSWER_S = 60.0
# Seconds between two tries to start the tasks while Ray re-places a lost node's bundle.
RETRY_PLACE_S = 2.0
# The job files a task starts from (JobDir attribute names): the spec, and what a restarted
# task resumes from (the metric file: epochs already logged are not logged again).
JOB_FILES = ("spec", "config", "overrides", "run_ready", "metrics", "checkpoints", "backup")
# The exit code of a task whose actor was lost: as if killed, which a restart may cure.
LOST = -signal.SIGKILL


def distinct(addresses: Dict[TaskId, str], ask_again: Callable[[TaskId], str]) -> Dict[TaskId, str]:
    """The tasks' addresses, none twice. Each actor picks a free port on its node by itself
    (_ray_node.Node.address), and two tasks on one node were once handed the same one (a CI
    run: both TensorFlow servers at 192.0.2.2:37701, the second could not start). A task whose
    address an earlier task holds asks again (ask_again(task)) until it has one of its own:
    portpicker never hands one process the same port twice."""
    taken: Dict[TaskId, str] = {}
    for task, address in addresses.items():
        while address in taken.values():
            address = ask_again(task)
        taken[task] = address
    return taken


class Unplaced(Exception):
    """Ray could not be reached, or could not place the tasks: the job fails in this one line."""


def connect(c, tasks: int) -> bool:
    """Connects this process to the Ray cluster of cluster.address (c); returns whether it started
    or joined Ray itself (and so shuts it down after the job). Call ray.send_token_to first.

    Raises:
        Unplaced: Ray could not be reached.
    """
    import ray

    if ray.is_initialized():  # this process is a Ray task already (a sweep's job): its cluster
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        if c.address == "local":
            resources = {k: float(v) * tasks for k, v in c.resources.items()}
            ray.init(address="local", num_cpus=math.ceil(c.cpus_per_task * tasks), resources=resources, **quiet)
        else:
            ray.init(address=str(c.address), **quiet)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise Unplaced(str(ConfigError("cluster.address", c.address, f"Ray could not be reached ({one_line(err)})",
                                       "Check `ray status` on that machine."))) from None
    return True


def reserve(c, tasks: int):
    """The placement group: one bundle per task, ready within cluster.start_timeout_s.

    Raises:
        Unplaced: Ray could not place it in time.
    """
    import ray
    from ray.util.placement_group import placement_group

    bundle = {"CPU": float(c.cpus_per_task), **{k: float(v) for k, v in c.resources.items()}}
    if c.gpus_per_task:
        bundle["GPU"] = float(c.gpus_per_task)
    pg = placement_group([dict(bundle) for _ in range(tasks)], strategy=str(c.placement).upper())
    try:
        ray.get(pg.ready(), timeout=float(c.start_timeout_s))
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(pg)
        raise Unplaced(f"cluster: Ray could not place {tasks} task(s) of {bundle} within cluster.start_timeout_s="
                       f"{c.start_timeout_s:g} s (free now: {ray.available_resources()}). Lower cluster.workers "
                       "or the resources per task, or add nodes.") from None
    return pg


def job_key(job: JobDir) -> str:
    """A short key of the job directory (a hash of its path): names the job's directories on nodes."""
    return hashlib.sha1(str(job.root.resolve()).encode()).hexdigest()[:10]


class RayTasks:
    """The actors of one job in its placement group; start() may run again after end() (a restart).

    Args:
        cfg: the plain config.
        job: the driver's job directory.
        tasks: every task of the cluster, in bundle order; chief: the one that reports.
        needs: the strategy's ClusterNeeds.
        pg: the placement group (reserve()).
        env: the job's environment variables for the tasks.
    """

    def __init__(self, cfg, job: JobDir, tasks: List[TaskId], chief: TaskId, needs, pg, env: Dict[str, str]):
        self.cfg, self.job, self.tasks, self.chief, self.needs, self.pg = cfg, job, tasks, chief, needs, pg
        self.env = dict(env)
        if needs.coordinator:
            self.env["GRPC_FAIL_FAST"] = "use_caller"  # as on localhost: fail fast, the coordinator retries
        self.actors: Dict[TaskId, object] = {}
        self.codes: Dict[TaskId, Optional[int]] = {}  # each task's exit code, None while it runs
        self.lost: Dict[TaskId, str] = {}  # tasks whose actor or node was lost, and Ray's word for it
        self.ready: set = set()  # tasks that have started (their ready marker)
        self.tolerated: set = set()  # parameter_server workers that died, training went on
        self.run_ready_sent, self.started_at = False, 0.0

    def start(self, attempt: int) -> None:
        """One actor per bundle, each task's TF_CONFIG from the addresses they answer, the tasks started.

        Raises:
            TaskFailed: no actor could be placed within cluster.start_timeout_s.
        """
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        c = self.cfg.cluster
        node = ray.remote(_ray_node.Node)
        deadline = time.monotonic() + float(c.start_timeout_s)
        while True:
            for i, task in enumerate(self.tasks):
                where = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=i)
                self.actors[task] = node.options(
                    num_cpus=float(c.cpus_per_task), num_gpus=float(c.gpus_per_task),
                    resources={k: float(v) for k, v in c.resources.items()}, scheduling_strategy=where,
                ).remote(task.file_name, task == self.chief, job_key(self.job))
            self.codes = {task: None for task in self.tasks}
            try:
                addresses = self.ask({t: a.address.remote() for t, a in self.actors.items()},
                                     max(1.0, deadline - time.monotonic()))
                addresses = distinct(addresses, lambda t: self.ask(
                    {t: self.actors[t].address.remote()}, max(1.0, deadline - time.monotonic()))[t])
                break
            except TaskFailed:
                # An actor placed on a node that has just died, before Ray has noticed (it misses
                # a few health checks first): once it has, it places the bundle on a live node.
                self.end()
                if time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_PLACE_S)
        spec: Dict[str, List[str]] = {}
        for task in self.tasks:
            spec.setdefault(task.kind, []).append(addresses[task])
        self.job.result.unlink(missing_ok=True)
        files = _ray_node.pack(self.job, JOB_FILES)
        self.run_ready_sent = self.job.run_ready.exists()
        self.job.logs.mkdir(parents=True, exist_ok=True)
        for task, actor in self.actors.items():
            with open(self.log(task), "a") as log:
                log.write(f"--- xpdist: start {task.name} on Ray, attempt {attempt}, TF_CONFIG {tf_config(spec, task)}\n")
            actor.start.remote(files, self.env, tf_config(spec, task), self.shared_dir())
        self.started_at = time.monotonic()
        self.lost, self.ready, self.tolerated = {}, set(), set()

    def shared_dir(self) -> Optional[str]:
        """This job's directory under cluster.checkpoint_dir: the job directory's name and its key."""
        if not self.cfg.cluster.checkpoint_dir:
            return None
        return str(Path(self.cfg.cluster.checkpoint_dir) / f"{self.job.root.name}-{job_key(self.job)}")

    def ask(self, refs: Dict[TaskId, object], timeout: float) -> Dict[TaskId, object]:
        """Each task's answer; a task whose actor (or node) is gone raises TaskFailed."""
        import ray

        answers = {}
        for task, ref in refs.items():
            try:
                answers[task] = ray.get(ref, timeout=timeout)
            except ray.exceptions.RayError as err:
                raise TaskFailed(task, f"its Ray actor or node was lost ({one_line(err)})") from None
        return answers

    def poll(self) -> Dict[TaskId, Optional[int]]:
        """Each task's exit code (None: running); appends its new log and metric lines here."""
        import ray

        refs = {t: a.poll.remote() for t, a in self.actors.items() if self.codes.get(t) is None}
        for task, ref in refs.items():
            try:
                state = ray.get(ref, timeout=ANSWER_S)
            except ray.exceptions.RayError as err:
                self.codes[task], self.lost[task] = LOST, one_line(err)
                continue
            self.codes[task] = state["code"]
            if state["ready"]:
                self.ready.add(task)
            for data, path in ((state["log"], self.log(task)), (state["metrics"], self.job.metrics)):
                if data:
                    with open(path, "ab") as out:
                        out.write(data)
        return self.codes

    def watch(self) -> int:
        """Polls until the chief ends; returns its exit code (Cluster.watch's rules, over Ray).

        Raises:
            TaskFailed: the chief's actor was lost, another task died (a parameter_server worker
                only when none is left), or a task did not start within cluster.start_timeout_s.
        """
        while True:
            codes = self.poll()
            if not self.run_ready_sent and self.job.run_ready.exists():
                self.actors[self.chief].put.remote("run_ready", self.job.run_ready.read_bytes())
                self.run_ready_sent = True
            dead = [t for t, code in codes.items()
                    if t != self.chief and t not in self.tolerated and code not in (None, 0)]
            dead.sort(key=lambda t: codes[t] >= 0)  # a lost or killed task is the likelier cause
            code = codes[self.chief]
            if self.chief in self.lost:
                raise TaskFailed(self.chief, f"its Ray actor or node was lost ({self.lost[self.chief]})")
            if code is not None and not (dead and codes[dead[0]] < 0):
                return code
            for task in dead:
                self._died(task, codes[task])
            if code is not None:
                return code
            if time.monotonic() - self.started_at > float(self.cfg.cluster.start_timeout_s):
                late = [t for t in self.tasks if t not in self.ready and codes[t] is None]
                if late:
                    raise TaskFailed(late[0], f"it did not start within cluster.start_timeout_s="
                                              f"{self.cfg.cluster.start_timeout_s:g} s (log: {self.log(late[0])})")
                self.started_at = float("inf")
            time.sleep(POLL_S)

    def _died(self, task: TaskId, code: int) -> None:
        if task in self.lost:
            how = f"its Ray actor or node was lost ({self.lost[task]})"
        else:
            how = f"{last_error(self.log(task)) or describe_exit(code, self.job).replace('the task', 'it')} " \
                  f"(log: {self.log(task)})"
        workers = [t for t in self.tasks if t.kind == "worker"]
        if not (self.needs.coordinator and task.kind == "worker") or \
                all(self.codes[t] not in (None, 0) for t in workers):
            raise TaskFailed(task, how, may_retry(code))
        self.tolerated.add(task)  # ClusterCoordinator moves this worker's steps to the workers left
        print(f"xpdist: {task.name} died ({how}); the coordinator goes on with the other workers", flush=True)

    def wait_others(self) -> None:
        """After the chief finished: multi_worker_mirrored workers end on their own; servers are stopped."""
        deadline = time.monotonic() + (0 if self.needs.coordinator else FINISH_GRACE_S)
        while time.monotonic() < deadline and any(code is None for code in self.poll().values()):
            time.sleep(POLL_S)

    def bring_back(self, parts) -> None:
        """The chief's files (_ray_node.OUTPUTS or RECOVERY) into this job directory, if its actor answers."""
        try:
            data = self.ask({self.chief: self.actors[self.chief].outputs.remote(parts is _ray_node.RECOVERY)},
                            ANSWER_S)[self.chief]
        except (TaskFailed, KeyError):
            return
        for name in parts:
            path = getattr(self.job, name)
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        _ray_node.unpack(data, self.job.root)

    def signal(self, signum: int, grace_s: float) -> None:
        """Signals every task, and waits up to grace_s for them to end (a second Ctrl-C cuts it short)."""
        for actor in self.actors.values():
            actor.signal.remote(signum)
        deadline = time.monotonic() + grace_s
        with process.signals_deferred() as again:
            while self.actors and not again and time.monotonic() < deadline:
                if all(code is not None for code in self.poll().values()):
                    break
                time.sleep(POLL_S)

    def end(self) -> None:
        """Every actor closed (its task killed, its directory removed) and killed."""
        import ray

        closing = [actor.close.remote() for actor in self.actors.values()]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=10)
        for actor in self.actors.values():
            with contextlib.suppress(Exception):  # an actor whose node is gone is dead already
                ray.kill(actor)
        self.actors = {}

    def log(self, task: TaskId) -> Path:
        return self.job.log_of(task.file_name)
