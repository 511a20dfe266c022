"""The Hydra Sweeper class of `hydra/sweeper=optuna`: a thin shell around xpdist.driver.sweeps.tuning.

Hydra instantiates only plugin classes defined in the `hydra_plugins` package.
"""

from __future__ import annotations

from typing import Any, List

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig



class OptunaSweeper(Sweeper):
    """Runs an Optuna study, one trial per job of the configured launcher."""

    def __init__(self, **settings: Any):
        # Hydra passes the keys of OptunaSweeperConf, already checked against it at compose time.
        from xpdist.driver.sweeps.tuning.settings import Settings

        self.settings = Settings.from_config(settings)
        self.study = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from xpdist.driver.sweeps.tuning.study import StudyRun

        self.study = StudyRun(self.settings, hydra_context, task_function, config)

    def sweep(self, arguments: List[str]) -> Any:
        return self.study.run(arguments)

    @staticmethod
    def preflight(config: DictConfig) -> None:
        """Checks the search space and settings before the sweep records anything.

        Raises:
            xpdist.core.errors.ConfigError: a bad search space or setting.
        """
        from xpdist.driver.sweeps.tuning.checks import preflight

        preflight(config)
