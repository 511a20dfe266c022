"""cluster=localhost: a real multi-process TensorFlow cluster on 127.0.0.1, restarted while
cluster.max_restarts allows.

The processes and their watch are driver/processes/localhost.py's Cluster; this module is the
engine's policy around it: its checks, the chief's log on the terminal, and when a failure
restarts the cluster (one a restart may cure: outcome.may_retry) or ends the job.
"""

from __future__ import annotations

import json
import signal
from typing import Dict, Optional

from xpdist.core import strategies
from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import TaskId
from xpdist.driver.engines import Engine, _restarts
from xpdist.driver.processes import follow
from xpdist.driver.processes.localhost import Cluster, FAILURE_GRACE_S
from xpdist.driver.processes.outcome import Outcome


class Localhost(_restarts.Restarting, Engine):
    name = "localhost"
    keeps_standby = True  # every task is forked from it (driver/processes/localhost.py)

    def __init__(self, cfg, plan, job):
        super().__init__(cfg, plan, job)
        self.cluster: Optional[Cluster] = None
        self.follower: Optional[follow.LogFollower] = None

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        super().preflight(cfg, needs)
        strategy = cfg.strategy.name
        if cfg.cluster.workers < 1:
            raise ConfigError("cluster.workers", cfg.cluster.workers, "a cluster needs at least one worker",
                              "Set cluster.workers to 1 or more.")
        if needs.has_ps and cfg.cluster.ps < 1:
            raise ConfigError("cluster.ps", cfg.cluster.ps, f"{strategy} needs at least one parameter server",
                              "Set cluster.ps to 1 or more.")
        if cfg.cluster.max_restarts < 0:
            raise ConfigError("cluster.max_restarts", cfg.cluster.max_restarts, "must be 0 or more",
                              "Use 0 for no restart.")
        if cfg.cluster.start_timeout_s <= 0:
            raise ConfigError("cluster.start_timeout_s", cfg.cluster.start_timeout_s, "must be above 0",
                              "Use e.g. 120 (seconds).")
        if not needs.has_ps and cfg.cluster.ps:
            with_ps = " or ".join(strategies.names_where(lambda other: other.needs.has_ps))
            raise ConfigError("cluster.ps", cfg.cluster.ps, f"strategy={strategy} has no parameter servers",
                              f"Drop cluster.ps or use strategy={with_ps}.")

    @classmethod
    def describe(cls, cfg, plan) -> str:
        needs = strategies.get(plan.strategy).needs
        ps = cfg.cluster.ps if needs.has_ps else 0
        chief = " a chief," if "chief" in needs.jobs else ""
        return (f"cluster=localhost:{chief} {cfg.cluster.workers} worker(s)"
                f"{f' and {ps} parameter server(s)' if ps else ''}, each a process on 127.0.0.1")

    def start(self, env: Dict[str, str]) -> None:
        self.cluster = Cluster(self.cfg, self.job, env)
        chief = TaskId(strategies.of(self.cfg).needs.chief_job, 0)
        self.follower = follow.follow_chief(self.job.log_of(chief.file_name), chief.name, self.job.logs)

    def follow(self) -> Outcome:
        cluster = self.cluster

        def ended(code: Optional[int]) -> None:
            if code == 0:
                cluster.wait_others()
            else:  # a task died, or the chief failed: the others may be stuck in a collective with it
                cluster.stop(signal.SIGKILL, grace_s=FAILURE_GRACE_S)

        return _restarts.follow(self.job, cluster.chief.name, self.cfg.cluster.max_restarts, "the cluster",
                                start=lambda attempt: cluster.start(), watch=cluster.watch, ended=ended,
                                restart=self._note)

    def stop(self, first: int = signal.SIGTERM) -> None:
        if self.cluster is not None:
            self.cluster.stop(first=first)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop(grace_s=FAILURE_GRACE_S)
            self.follower.stop()

    def task_pids(self) -> Dict[str, int]:
        """The pids the cluster records in the job directory at each (re)start."""
        try:
            return dict(json.loads(self.job.tasks.read_text())["pids"])
        except (OSError, ValueError, KeyError):
            return {}

    def _note(self, message: str) -> None:
        print(f"xpdist: {message}", flush=True)
        with open(self.job.log_of("launcher"), "a") as log:
            log.write(message + "\n")


ENGINE = Localhost
