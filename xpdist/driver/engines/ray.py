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
cluster.checkpoint_dir. With cluster.min_workers, a multi_worker_mirrored job goes on with
the workers left instead, in a smaller placement group (_ray_lost.py). Ctrl-C or SIGTERM stops the tasks, kills the actors and removes the
placement group; if the driver dies, Ray ends both with it (they are the driver's, not
detached). Ray is imported only when a job runs with cluster=ray.

This module is the policy (checks, restarts, Ctrl-C); the actors of a job are
_ray_actors.RayTasks, and what each does on its node is _ray_node.Node.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
from pathlib import Path
from typing import Dict, List, Optional

from xpdist.core import strategies
from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import TaskId
from xpdist.core.protocol.outcome import Status
from xpdist.driver.engines import Engine, _ray_actors, _ray_node, _ray_lost, _restarts
from xpdist.driver.engines.localhost import Localhost
from xpdist.driver.processes import follow, process
from xpdist.driver.processes.localhost import TaskFailed
from xpdist.driver.processes.outcome import Outcome, Resized

# Variables of the driver's environment that reach the tasks besides the job's own: settings
# of xpdist, TensorFlow and Keras. The rest (PATH, HOME, ...) is the node's.
FORWARDED = re.compile(r"^(XPDIST_|TF_|KERAS_)")
# Never sent: TF_CONFIG is each task's own; a task records nothing in MLflow (the driver does),
# so the tracking URI, which may carry a password, stays here.
KEPT_HERE = re.compile(r"^(TF_CONFIG$|MLFLOW_)")
# The Hydra launcher of hydra/launcher=ray (hydra_plugins/xpdist_ray): each sweep job a Ray task.
SWEEP_LAUNCHER = "hydra_plugins.xpdist_ray.ray_launcher.RayLauncher"
# `ray start --head` records its address here (Ray's default temp dir), where address=auto looks.
RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


def send_token_to(address: str) -> None:
    """Before Ray is first imported (it reads RAY_AUTH_MODE then): Ray 2.60 turns tokens on for
    clusters started on this machine (`ray start --head`) but reads an explicit address as a
    remote cluster without them, so the client would send no token and the head refuse it. A
    token found here says the user has one."""
    if address not in ("auto", "local") and "RAY_AUTH_MODE" not in os.environ and token_here():
        os.environ["RAY_AUTH_MODE"] = "token"


def token_here() -> bool:
    """Whether this machine has a Ray token where Ray looks for one (its value is never read here)."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").exists())


def check_address(key: str, address) -> None:
    """A Ray address as cluster.address and hydra/launcher=ray take it: auto (the cluster this
    machine belongs to), local (a private one-node Ray) or host:port of the head's GCS.

    Raises:
        ConfigError: naming key.
    """
    if address not in ("auto", "local") and not re.fullmatch(r"[\w.\-]+:\d{1,5}", str(address)):
        raise ConfigError(key, address, "expected auto, local or host:port of the head's GCS",
                          f"Use e.g. {key}=10.0.0.5:6379, or {key}=local.")
    if address == "auto" and not os.environ.get("RAY_ADDRESS") and not RAY_CURRENT_CLUSTER.exists():
        raise ConfigError(key, "auto", "no Ray cluster runs on this machine (RAY_ADDRESS unset, no `ray start`)",
                          f"Start one with `ray start --head`, or use {key}=local.")


class Ray(_restarts.Restarting, Engine):
    name = "ray"

    def __init__(self, cfg, plan, job):
        super().__init__(cfg, plan, job)
        self.needs = strategies.of(cfg).needs
        counts = {"chief": 1, "worker": cfg.cluster.workers, "ps": cfg.cluster.ps}
        self.task_ids = [TaskId(kind, i) for kind in self.needs.jobs for i in range(counts[kind])]
        self.chief = TaskId(self.needs.chief_job, 0)
        self.env: Dict[str, str] = {}
        self.pg = None
        self.owns_ray = False
        self.tasks: Optional[_ray_actors.RayTasks] = None
        self.follower: Optional[follow.LogFollower] = None
        self.resized: List[Resized] = []  # each time the tasks went on with fewer workers
        self.unplaced: Optional[str] = None  # the smaller placement group could not be reserved

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        Localhost.preflight(cfg, needs)  # the keys both engines share: workers, ps, max_restarts, start_timeout_s
        c = cfg.cluster
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("cluster", "ray", "Ray is not installed in this Python",
                              "Install the extra: pip install 'xpdist[ray]'.")
        check_address("cluster.address", c.address)
        if c.cpus_per_task <= 0 or c.gpus_per_task < 0:
            key, value = ("cluster.cpus_per_task", c.cpus_per_task) if c.cpus_per_task <= 0 else \
                ("cluster.gpus_per_task", c.gpus_per_task)
            raise ConfigError(key, value, "a task's bundle needs CPUs above 0 and GPUs of 0 or more",
                              "Use e.g. cluster.cpus_per_task=1 cluster.gpus_per_task=0.")
        if c.min_workers is not None:
            _ray_lost.check(cfg, needs)
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

    @classmethod
    def schedules(cls, hydra_launcher) -> bool:
        """hydra/launcher=ray: Ray cancels a sweep's job (the sweep's Ctrl-C, or a user's
        ray.cancel): the job closes its run KILLED and returns, and the sweep's driver closes
        the rest."""
        return hydra_launcher.get("_target_") == SWEEP_LAUNCHER

    # ---- the job -------------------------------------------------------------------------------

    def start(self, env: Dict[str, str]) -> None:
        """Notes the job's environment; Ray is reached in follow(), where a failure is an outcome."""
        self.env = {k: v for k, v in env.items()
                    if (os.environ.get(k) != v or FORWARDED.match(k)) and not KEPT_HERE.match(k)}
        self.follower = follow.follow_chief(self.job.log_of(self.chief.file_name), self.chief.name, self.job.logs)

    def follow(self) -> Outcome:
        send_token_to(self.cfg.cluster.address)
        try:
            self.owns_ray = _ray_actors.connect(self.cfg.cluster, len(self.task_ids))
            self.pg = _ray_actors.reserve(self.cfg.cluster, len(self.task_ids))
        except _ray_actors.Unplaced as err:
            return Outcome(Status.FAILED, str(err))
        tasks = self.tasks = _ray_actors.RayTasks(self.cfg, self.job, self.task_ids, self.chief, self.needs,
                                                  self.pg, self.env)

        def ended(code: Optional[int]) -> None:
            if code is None:  # a task died: its restart brings back what it needs (_restart)
                return
            if code == 0:
                tasks.wait_others()
            tasks.bring_back(_ray_node.OUTPUTS)  # the chief's result, read next, and its model

        def start(attempt: int) -> None:
            if self.unplaced:  # after a resize (_restart): one line, no restart cures it
                raise TaskFailed(self.chief, self.unplaced, retryable=False)
            tasks.start(attempt)

        outcome = _restarts.follow(self.job, self.chief.name, self.cfg.cluster.max_restarts, "every task",
                                   start=start, watch=tasks.watch, ended=ended, restart=self._restart,
                                   # the chief's checkpoints, if it answers: a resume needs them
                                   gave_up=lambda: tasks.bring_back(_ray_node.OUTPUTS))
        tasks.end()
        outcome.resized = self.resized
        return outcome

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Signals every task (SIGINT lets the chief save), waits up to process.GRACE_S for them to end."""
        if self.tasks is not None:
            self.tasks.signal(first, process.GRACE_S)

    def close(self) -> None:
        with process.signals_deferred():  # a second Ctrl-C must not leave actors or the placement group
            if self.tasks is not None:
                self.tasks.end()
            if self.pg is not None or self.owns_ray:
                import ray

                if self.pg is not None:
                    with contextlib.suppress(Exception):  # Ray gone (its head lost): nothing left to remove
                        ray.util.remove_placement_group(self.pg)
                    self.pg = None
                if self.owns_ray and ray.is_initialized():
                    ray.shutdown()
            if self.follower is not None:
                self.follower.stop()

    def _restart(self, message: str) -> None:
        """Before every task starts again: the chief's checkpoints brought back (unless they live on
        cluster.checkpoint_dir), every actor ended, the restart said; with cluster.min_workers and
        workers lost, the job made smaller first (_shrink)."""
        shared = self.tasks.shared_dir()
        if not shared:
            self.tasks.bring_back(_ray_node.RECOVERY)
        else:
            self.tasks.poll()  # which actors are gone: Ray may take seconds to notice a dead node
            if self.chief in self.tasks.lost:
                _ray_lost.forget_unlogged(Path(shared) / "checkpoints", self.job.metrics)
        left = self._workers_left()
        self.tasks.end()
        if left is not None:
            message = self._shrink(message, left)
        print(f"xpdist: {message}", flush=True)
        with open(self.job.log_of("launcher"), "a") as log:
            log.write(message + "\n")

    def _workers_left(self) -> Optional[int]:
        """With cluster.min_workers: how many workers go on, or None to restart them all as before
        (no actor lost, a task lost that is not a worker, or fewer left than the minimum)."""
        minimum = self.cfg.cluster.min_workers
        if minimum is None:
            return None
        # The task that failed first may be one that lost its peer (a collective's network
        # error): a poll settles which actors are gone, waiting for Ray to notice a dead node.
        self.tasks.poll()
        lost = set(self.tasks.lost)
        if not lost or any(t.kind != "worker" for t in lost):
            return None
        left = sum(t.kind == "worker" for t in self.task_ids) - len(lost)
        return left if left >= minimum else None

    def _shrink(self, message: str, workers: int) -> str:
        """The job redone for `workers` workers (plan, job.json, placement group, tasks); returns
        the restart's message, saying so. A global batch they cannot divide restarts them all."""
        import ray

        before = len(self.task_ids)
        try:
            shared = self.tasks.shared_dir()
            checkpoints = Path(shared) / "checkpoints" if shared else self.job.checkpoints
            note = _ray_lost.shrink(self.cfg, self.job, workers, checkpoints)
        except ConfigError as err:
            return f"{message}; not going on with {workers} worker(s): {err}"
        self.resized.append(note)
        self.task_ids = [TaskId("worker", i) for i in range(workers)]  # the chief is worker:0 again
        with contextlib.suppress(Exception):  # Ray gone: start() will say so
            ray.util.remove_placement_group(self.pg)
        try:
            self.pg = _ray_actors.reserve(self.cfg.cluster, workers)
        except _ray_actors.Unplaced as err:
            self.pg, self.unplaced = None, str(err)
        self.tasks.tasks, self.tasks.pg = self.task_ids, self.pg
        failed, _, count = message.rpartition("; restarting every task ")
        return (f"{failed}; going on with {workers} of {before} workers (cluster.min_workers="
                f"{self.cfg.cluster.min_workers}) {note.change.replace(': ', ', ', 1)} {count}")


ENGINE = Ray
