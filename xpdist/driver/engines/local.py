"""cluster=local: one task process on this machine, forked from the standby task where there is one."""

from __future__ import annotations

from typing import Dict

from xpdist.core.errors import ConfigError
from xpdist.driver.processes import standby
from xpdist.driver.engines import Engine
from xpdist.driver.processes import process
from xpdist.driver.processes.outcome import Outcome, outcome_from


class Local(Engine):
    name = "local"
    multi_process = False
    keeps_standby = True

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        super().preflight(cfg, needs)
        if needs.has_ps:
            raise ConfigError("cluster", cfg.cluster.name, f"{cfg.strategy.name} needs workers and parameter servers",
                              "Use cluster=localhost (cluster.workers, cluster.ps), tf_config or slurm.")

    @classmethod
    def describe(cls, cfg, plan) -> str:
        return "cluster=local: one task process on this machine"

    def start(self, env: Dict[str, str]) -> None:
        proc = standby.claim([str(self.job.root)], env, last=True)  # forked from the standby, if there is one
        self.proc = process.adopt(proc) if proc else process.start(process.task_command(self.job.root), env)

    def follow(self) -> Outcome:
        return outcome_from(self.job, process.exit_code(self.proc))


ENGINE = Local
