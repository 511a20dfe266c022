"""cluster=slurm: srun started this process as one SLURM task, and SLURM_* say which; its task
process runs here, and TensorFlow lays the cluster out with SlurmClusterResolver.

Sweeps whose jobs are SLURM jobs (hydra/launcher=slurm, submitit's SlurmLauncher) are this
engine's too: SLURM may cancel or preempt one job alone, and the sweep goes on.
"""

from __future__ import annotations

import os

from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import slurm_tasks
from xpdist.driver.engines import Engine

# The Hydra launcher of hydra/launcher=slurm (conf/hydra/launcher/slurm.yaml).
SUBMITIT_SLURM_LAUNCHER = "SlurmLauncher"


class Slurm(Engine):
    name = "slurm"

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        """SlurmClusterResolver reads SLURM_* variables that only srun sets."""
        super().preflight(cfg, needs)
        missing = [v for v in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS") if v not in os.environ]
        if missing:
            raise ConfigError("cluster", "slurm", f"not started by srun ({' and '.join(missing)} unset)",
                              "Run it with srun inside an sbatch job (see scripts/slurm.sbatch), or use cluster=localhost.")
        tasks = slurm_tasks()
        if needs.has_ps and tasks < cfg.cluster.ps + 2:
            raise ConfigError("cluster.ps", cfg.cluster.ps, f"{cfg.strategy.name} under slurm needs a chief, cluster.ps "
                              f"parameter servers and a worker, but srun started {tasks} task(s)",
                              "Start more tasks (--ntasks) or lower cluster.ps.")
        base, last = cfg.cluster.port_base, cfg.cluster.port_base + tasks - 1
        if base < 1 or last > 65535:
            raise ConfigError("cluster.port_base", base, f"the {tasks} task(s) would listen on ports {base} to {last}, "
                              "outside 1 to 65535", f"Set cluster.port_base between 1 and {65536 - tasks}.")

    @classmethod
    def describe(cls, cfg, plan) -> str:
        return f"cluster=slurm: this SLURM task, one of the {plan.num_workers} worker(s) srun started"

    @classmethod
    def schedules(cls, hydra_launcher) -> bool:
        return SUBMITIT_SLURM_LAUNCHER in str(hydra_launcher.get("_target_", ""))


ENGINE = Slurm
