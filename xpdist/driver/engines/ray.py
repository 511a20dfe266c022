"""cluster=ray: the job's tasks on a Ray cluster, one Ray actor per task, no shared directory.

The driver reserves the tasks with a placement group (one bundle of cluster.cpus_per_task,
gpus_per_task and resources per task, laid out by cluster.placement), starts one actor
(_ray_node.Node) in each bundle, asks each for an address and port free on its node, and
hands every task its TF_CONFIG. Each actor unpacks the job files the driver sends as bytes
into a directory of its own node and runs `python -m xpdist.task` there. While they train the
driver polls the actors: each task's new log lines land in this job directory's logs/ (the
chief's follow on the terminal, as with localhost), the chief's metric lines in
metrics.jsonl, which the driver relays to MLflow as for any engine, and run.json goes the
other way. At the end the chief's result, model and checkpoints come back as bytes before
the outcome is read. No path of the driver's machine is used on a node.

A lost actor or node fails the job in one line naming the task, or restarts every task while
cluster.max_restarts allows (in the same placement group, which Ray re-places on the nodes
left); the tasks resume from the chief's checkpoints, brought back by the driver or kept on
cluster.checkpoint_dir. Ctrl-C or SIGTERM stops the tasks, kills the actors and removes the
placement group; if the driver dies, Ray ends both with it (they are the driver's, not
detached). Ray is imported only when a job runs with cluster=ray.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import math
import os
import re
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional

from xpdist.core import strategies
from xpdist.core.clusterenv import TaskId
from xpdist.core.errors import ConfigError
from xpdist.driver.engines import Engine, _ray_node
from xpdist.driver.engines.localhost import Localhost
from xpdist.driver.launchers import follow, process
from xpdist.driver.launchers.localhost import FINISH_GRACE_S, POLL_S, TaskFailed, last_error, tf_config
from xpdist.driver.launchers.outcome import Outcome, describe_exit, may_retry, outcome_from

# Seconds an actor may take to answer a poll before its task counts as lost (its node is gone
# or cut off); Ray's own health checks declare a dead node after about 30 s by default.
ANSWER_S = 60.0
# The job files a task starts from (JobDir attribute names): the spec, and what a restarted
# task resumes from (the metric file: epochs already logged are not logged again).
JOB_FILES = ("spec", "config", "overrides", "run_ready", "metrics", "checkpoints", "backup")
# Variables of the driver's environment that reach the tasks besides the job's own: settings
# of xpdist, TensorFlow and Keras. The rest (PATH, HOME, ...) is the node's.
FORWARDED = re.compile(r"^(XPDIST_|TF_|KERAS_)")
# Never sent: TF_CONFIG is each task's own; a task records nothing in MLflow (the driver does),
# so the tracking URI, which may carry a password, stays here.
KEPT_HERE = re.compile(r"^(TF_CONFIG$|MLFLOW_)")
# Seconds between two tries to start the tasks while Ray re-places a lost node's bundle.
RETRY_PLACE_S = 2.0
# The exit code of a task whose actor was lost: as if killed, which a restart may cure.
LOST = -signal.SIGKILL
# `ray start --head` records its address here (Ray's default temp dir), where address=auto looks.
RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


class Ray(Engine):
    name = "ray"

    def __init__(self, cfg, plan, job):
        super().__init__(cfg, plan, job)
        self.needs = strategies.of(cfg).needs
        counts = {"chief": 1, "worker": cfg.cluster.workers, "ps": cfg.cluster.ps}
        self.tasks = [TaskId(kind, i) for kind in self.needs.jobs for i in range(counts[kind])]
        self.chief = TaskId(self.needs.chief_job, 0)
        self.actors: Dict[TaskId, object] = {}
        self.codes: Dict[TaskId, Optional[int]] = {}  # each task's exit code, None while it runs
        self.lost: Dict[TaskId, str] = {}  # tasks whose actor or node was lost, and Ray's word for it
        self.ready: set = set()  # tasks that have started (their ready marker)
        self.tolerated: set = set()  # parameter_server workers that died, training went on
        self.run_ready_sent, self.started_at = False, 0.0
        self.env: Dict[str, str] = {}
        self.pg = None
        self.owns_ray = False
        self.follower: Optional[follow.LogFollower] = None

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        Localhost.preflight(cfg, needs)  # the keys both engines share: workers, ps, max_restarts, start_timeout_s
        c = cfg.cluster
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("cluster", "ray", "Ray is not installed in this Python",
                              "Install the extra: pip install 'xpdist[ray]'.")
        if c.address not in ("auto", "local") and not re.fullmatch(r"[\w.\-]+:\d{1,5}", str(c.address)):
            raise ConfigError("cluster.address", c.address, "expected auto, local or host:port of the head's GCS",
                              "Use e.g. cluster.address=10.0.0.5:6379, or cluster.address=local.")
        if c.address == "auto" and not os.environ.get("RAY_ADDRESS") and not RAY_CURRENT_CLUSTER.exists():
            raise ConfigError("cluster.address", "auto", "no Ray cluster runs on this machine (RAY_ADDRESS unset, "
                              "no `ray start`)", "Start one with `ray start --head`, or use cluster.address=local.")
        if c.cpus_per_task <= 0 or c.gpus_per_task < 0:
            key, value = ("cluster.cpus_per_task", c.cpus_per_task) if c.cpus_per_task <= 0 else \
                ("cluster.gpus_per_task", c.gpus_per_task)
            raise ConfigError(key, value, "a task's bundle needs CPUs above 0 and GPUs of 0 or more",
                              "Use e.g. cluster.cpus_per_task=1 cluster.gpus_per_task=0.")
        bad = {k: v for k, v in c.resources.items() if not isinstance(v, (int, float)) or v < 0}
        if bad:
            raise ConfigError("cluster.resources", dict(bad), "each custom resource is an amount of 0 or more",
                              "Use e.g. cluster.resources={accelerator_a: 1}.")

    @classmethod
    def describe(cls, cfg, plan) -> str:
        needs = strategies.get(plan.strategy).needs
        ps = f" and {cfg.cluster.ps} parameter server(s)" if needs.has_ps else ""
        chief = " a chief," if "chief" in needs.jobs else ""
        return (f"cluster=ray (address={cfg.cluster.address}):{chief} {cfg.cluster.workers} worker(s){ps}, each a "
                f"Ray actor with {cfg.cluster.cpus_per_task:g} CPU(s), placed by {cfg.cluster.placement}")

    # ---- the job -------------------------------------------------------------------------------

    def start(self, env: Dict[str, str]) -> None:
        """Notes the job's environment; Ray is reached in follow(), where a failure is an outcome."""
        self.env = {k: v for k, v in env.items()
                    if (os.environ.get(k) != v or FORWARDED.match(k)) and not KEPT_HERE.match(k)}
        self.follower = follow.follow_chief(self.job.log_of(self.chief.file_name), self.chief.name, self.job.logs)

    def follow(self) -> Outcome:
        try:
            self._connect()
            self._reserve()
        except _Unplaced as err:
            return Outcome("FAILED", str(err))
        most, restarts = self.cfg.cluster.max_restarts, 0
        while True:
            try:
                self._start_tasks(restarts + 1)
                code = self._watch()
            except TaskFailed as failure:
                if restarts >= most or not failure.retryable or process.aborted():
                    self._bring_back(_ray_node.OUTPUTS)  # the chief's checkpoints, if it answers: a resume needs them
                    return Outcome("FAILED", str(failure), restarts)
                restarts += 1
                self._restart(f"{failure}; restarting every task ({restarts}/{most})")
                continue
            if code == 0:
                self._wait_others()
            self._bring_back(_ray_node.OUTPUTS)
            outcome = outcome_from(self.job, code)
            if (outcome.status == "FAILED" and restarts < most and code != 0
                    and outcome.retryable and not process.aborted()):
                restarts += 1
                self._restart(f"{self.chief.name} failed: {outcome.error}; restarting every task ({restarts}/{most})")
                continue
            if outcome.status == "FAILED" and outcome.error:
                outcome.error = f"{self.chief.name} failed: {outcome.error}"
            outcome.restarts = restarts
            self._end_tasks()
            return outcome

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Signals every task (SIGINT lets the chief save), waits up to process.GRACE_S for them to end."""
        for actor in self.actors.values():
            actor.signal.remote(first)
        deadline = time.monotonic() + process.GRACE_S
        with process.signals_deferred() as again:
            while self.actors and not again and time.monotonic() < deadline:
                if all(code is not None for code in self._poll().values()):
                    break
                time.sleep(POLL_S)

    def close(self) -> None:
        import ray

        with process.signals_deferred():  # a second Ctrl-C must not leave actors or the placement group
            self._end_tasks()
            if self.pg is not None:
                with contextlib.suppress(Exception):  # Ray gone (its head lost): nothing left to remove
                    ray.util.remove_placement_group(self.pg)
                self.pg = None
            if self.owns_ray and ray.is_initialized():
                ray.shutdown()
            if self.follower is not None:
                self.follower.stop()

    # ---- Ray -----------------------------------------------------------------------------------

    def _connect(self) -> None:
        c, n = self.cfg.cluster, len(self.tasks)
        if c.address not in ("auto", "local") and "RAY_AUTH_MODE" not in os.environ and _token_here():
            # Ray 2.60 turns tokens on for clusters started on this machine (`ray start --head`)
            # but reads an explicit address as a remote cluster without them: the client then
            # sends no token and the head refuses it. A token found here says the user has one.
            os.environ["RAY_AUTH_MODE"] = "token"  # read when Ray is first imported: set before
        import ray

        if ray.is_initialized():  # this process is a Ray task already (a sweep's job): its cluster
            return
        quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        try:
            if c.address == "local":
                resources = {k: float(v) * n for k, v in c.resources.items()}
                ray.init(address="local", num_cpus=math.ceil(c.cpus_per_task * n), resources=resources, **quiet)
            else:
                ray.init(address=str(c.address), **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise _Unplaced(str(ConfigError("cluster.address", c.address, f"Ray could not be reached "
                                            f"({process_line(err)})", "Check `ray status` on that machine."))) from None
        self.owns_ray = True

    def _reserve(self) -> None:
        """The placement group: one bundle per task, ready within cluster.start_timeout_s."""
        import ray
        from ray.util.placement_group import placement_group

        c = self.cfg.cluster
        bundle = {"CPU": float(c.cpus_per_task), **{k: float(v) for k, v in c.resources.items()}}
        if c.gpus_per_task:
            bundle["GPU"] = float(c.gpus_per_task)
        self.pg = placement_group([dict(bundle) for _ in self.tasks], strategy=str(c.placement).upper())
        try:
            ray.get(self.pg.ready(), timeout=float(c.start_timeout_s))
        except ray.exceptions.GetTimeoutError:
            raise _Unplaced(f"cluster: Ray could not place {len(self.tasks)} task(s) of {bundle} within "
                            f"cluster.start_timeout_s={c.start_timeout_s:g} s (free now: "
                            f"{ray.available_resources()}). Lower cluster.workers or the resources per task, "
                            "or add nodes.") from None

    def _start_tasks(self, attempt: int) -> None:
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
                ).remote(task.file_name, task == self.chief)
            self.codes = {task: None for task in self.tasks}
            try:
                addresses = self._ask({t: a.address.remote() for t, a in self.actors.items()},
                                      max(1.0, deadline - time.monotonic()))
                break
            except TaskFailed:
                # An actor placed on a node that has just died, before Ray has noticed (it misses
                # a few health checks first): once it has, it places the bundle on a live node.
                self._end_tasks()
                if time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_PLACE_S)
        spec: Dict[str, List[str]] = {}
        for task in self.tasks:
            spec.setdefault(task.kind, []).append(addresses[task])
        self.job.result.unlink(missing_ok=True)
        files = _ray_node.pack(self.job, JOB_FILES)
        self.run_ready_sent = self.job.run_ready.exists()
        shared = self._shared_dir()
        self.job.logs.mkdir(parents=True, exist_ok=True)
        for task, actor in self.actors.items():
            with open(self.job.log_of(task.file_name), "a") as log:
                log.write(f"--- xpdist: start {task.name} on Ray, attempt {attempt}, TF_CONFIG {tf_config(spec, task)}\n")
            env = dict(self.env)
            if self.needs.coordinator:
                env["GRPC_FAIL_FAST"] = "use_caller"  # as on localhost: fail fast, the coordinator retries
            actor.start.remote(files, env, tf_config(spec, task), shared)
        self.started_at = time.monotonic()
        self.lost, self.ready, self.tolerated = {}, set(), set()

    def _shared_dir(self) -> Optional[str]:
        """This job's directory under cluster.checkpoint_dir: the job directory's name and a hash of its path."""
        if not self.cfg.cluster.checkpoint_dir:
            return None
        key = hashlib.sha1(str(self.job.root.resolve()).encode()).hexdigest()[:10]
        return str(Path(self.cfg.cluster.checkpoint_dir) / f"{self.job.root.name}-{key}")

    def _ask(self, refs: Dict[TaskId, object], timeout: float) -> Dict[TaskId, object]:
        """Each task's answer; a task whose actor (or node) is gone raises TaskFailed."""
        import ray

        answers = {}
        for task, ref in refs.items():
            try:
                answers[task] = ray.get(ref, timeout=timeout)
            except ray.exceptions.RayError as err:
                raise TaskFailed(task, f"its Ray actor or node was lost ({process_line(err)})") from None
        return answers

    def _poll(self) -> Dict[TaskId, Optional[int]]:
        """Each live task's exit code (None: running); appends its new log and metric lines here."""
        import ray

        refs = {t: a.poll.remote() for t, a in self.actors.items() if self.codes.get(t) is None}
        for task, ref in refs.items():
            try:
                state = ray.get(ref, timeout=ANSWER_S)
            except ray.exceptions.RayError as err:
                self.codes[task] = LOST
                self.lost[task] = process_line(err)
                continue
            self.codes[task] = state["code"]
            if state["ready"]:
                self.ready.add(task)
            for data, path in ((state["log"], self.job.log_of(task.file_name)), (state["metrics"], self.job.metrics)):
                if data:
                    with open(path, "ab") as out:
                        out.write(data)
        return self.codes

    def _watch(self) -> int:
        """Polls until the chief ends; returns its exit code (Cluster.watch's rules, over Ray)."""
        while True:
            codes = self._poll()
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
                self._task_died(task, codes[task])
            if code is not None:
                return code
            if time.monotonic() - self.started_at > float(self.cfg.cluster.start_timeout_s):
                late = [t for t in self.tasks if t not in self.ready and codes[t] is None]
                if late:
                    raise TaskFailed(late[0], f"it did not start within cluster.start_timeout_s="
                                              f"{self.cfg.cluster.start_timeout_s:g} s (log: {self._log(late[0])})")
                self.started_at = float("inf")
            time.sleep(POLL_S)

    def _task_died(self, task: TaskId, code: int) -> None:
        if task in self.lost:
            how = f"its Ray actor or node was lost ({self.lost[task]})"
        else:
            how = f"{last_error(self._log(task)) or describe_exit(code, self.job).replace('the task', 'it')} " \
                  f"(log: {self._log(task)})"
        workers = [t for t in self.tasks if t.kind == "worker"]
        if not (self.needs.coordinator and task.kind == "worker") or \
                all(self.codes[t] not in (None, 0) for t in workers):
            raise TaskFailed(task, how, may_retry(code))
        self.tolerated.add(task)  # ClusterCoordinator moves this worker's steps to the workers left
        print(f"xpdist: {task.name} died ({how}); the coordinator goes on with the other workers", flush=True)

    def _wait_others(self) -> None:
        """After the chief finished: multi_worker_mirrored workers end on their own; servers are stopped."""
        deadline = time.monotonic() + (0 if self.needs.coordinator else FINISH_GRACE_S)
        while time.monotonic() < deadline and any(code is None for code in self._poll().values()):
            time.sleep(POLL_S)

    def _bring_back(self, parts) -> None:
        """The chief's files (_ray_node.OUTPUTS or RECOVERY) into this job directory, if its actor lives."""
        import shutil

        try:
            data = self._ask({self.chief: self.actors[self.chief].outputs.remote(parts is _ray_node.RECOVERY)},
                             ANSWER_S)[self.chief]
        except (TaskFailed, KeyError):
            return
        for name in parts:
            path = getattr(self.job, name)
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        _ray_node.unpack(data, self.job.root)

    def _restart(self, message: str) -> None:
        if not self.cfg.cluster.checkpoint_dir:
            self._bring_back(_ray_node.RECOVERY)
        self._end_tasks()
        print(f"xpdist: {message}", flush=True)
        with open(self.job.log_of("launcher"), "a") as log:
            log.write(message + "\n")

    def _end_tasks(self) -> None:
        """Every actor closed (its task killed, its directory removed) and killed."""
        import ray

        closing = [actor.close.remote() for actor in self.actors.values()]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=10)
        for actor in self.actors.values():
            with contextlib.suppress(Exception):  # an actor whose node is gone is dead already
                ray.kill(actor)
        self.actors = {}

    def _log(self, task: TaskId) -> Path:
        return self.job.log_of(task.file_name)


def _token_here() -> bool:
    """Whether this machine has a Ray token where Ray looks for one (its value is never read here)."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").exists())


class _Unplaced(Exception):
    """Ray could not be reached, or could not place the tasks: the job fails in this one line."""


def process_line(err: BaseException) -> str:
    """An exception's type and first line (Ray's messages run to many lines)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


ENGINE = Ray
