"""The Hydra Launcher class of `hydra/launcher=ray`: hydra-ray-launcher's RayLauncher, whose
launch is xpdist.driver.sweeps.ray_launcher's.

Hydra instantiates only plugin classes defined in the `hydra_plugins` package. Its plugin scan
imports this module at every command: without the ray extra the class stands on Hydra's
Launcher instead, so that the scan does not warn on each of them; hydra/launcher=ray is then
refused by its preflight (xpdist.driver.sweeps.ray_launcher.preflight), before it is instantiated.
"""

from __future__ import annotations

from typing import Sequence

from hydra.core.utils import JobReturn

try:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as PluginRayLauncher
except ImportError:  # the ray extra missing: see the docstring
    from hydra.plugins.launcher import Launcher as PluginRayLauncher


class RayLauncher(PluginRayLauncher):
    """Runs each job of a sweep as a Ray task (see xpdist.driver.sweeps.ray_launcher)."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from xpdist.driver.sweeps import ray_launcher
        from xpdist.driver.sweeps import sweep

        return ray_launcher.launch(self, job_overrides, initial_job_idx, sweep.open_sweep())
