"""The Hydra Launcher class of `hydra/launcher=local_parallel` (conf/hydra/launcher/local_parallel.yaml),
whose launch is xpdist.driver.sweeps.parallel_launcher's.

Hydra instantiates only plugin classes defined in the `hydra_plugins` package.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ParallelLauncher(Launcher):
    """Runs a sweep's jobs, n_jobs at a time, each in a process forked from the sweep's."""

    def __init__(self, n_jobs: Any = -1) -> None:
        self.n_jobs = n_jobs
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    @staticmethod
    def preflight(config: DictConfig) -> None:
        """hydra.launcher.n_jobs, checked before the sweep starts (xpdist.driver.sweeps.sweep)."""
        from xpdist.driver.sweeps import parallel_launcher

        parallel_launcher.preflight(config)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from xpdist.driver.sweeps import parallel_launcher

        return parallel_launcher.launch(self, job_overrides, initial_job_idx)
