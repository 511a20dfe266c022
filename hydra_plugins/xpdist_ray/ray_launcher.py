"""The Hydra Launcher class of `hydra/launcher=ray`: hydra-ray-launcher's RayLauncher, whose
launch is xpdist.driver.ray_launcher's.

Hydra instantiates only plugin classes defined in the `hydra_plugins` package.
"""

from __future__ import annotations

from typing import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as PluginRayLauncher


class RayLauncher(PluginRayLauncher):
    """Runs each job of a sweep as a Ray task (see xpdist.driver.ray_launcher)."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from xpdist.driver import ray_launcher, sweep

        return ray_launcher.launch(self, job_overrides, initial_job_idx, sweep.open_sweep())
