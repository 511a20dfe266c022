"""The config of `hydra/launcher=ray`, registered in Hydra's ConfigStore.

hydra-ray-launcher stores a `hydra/launcher=ray` of its own (its RayLauncher, which knows
nothing of xpdist's sweeps); this one replaces it. Its module is imported first, here, so
that its entry is stored before this one whatever order Hydra's plugin scan takes (the scan
runs this module again, not the plugin's _config, which it skips as private). Stored also
where the ray extra is missing: hydra/launcher=ray then composes, and its preflight
(xpdist.driver.sweeps.ray_launcher.preflight) says in one line what to install.
"""

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict

from hydra.core.config_store import ConfigStore

with contextlib.suppress(ImportError):  # the ray extra missing: see the docstring
    import hydra_plugins.hydra_ray_launcher._config  # noqa: F401


@dataclass
class RayConf:
    # ray.init's arguments. address: auto (the cluster this machine belongs to: `ray start`),
    # local (a private one-node Ray for this sweep, gone with it; num_cpus: how many jobs run
    # at once) or host:port of the head's GCS. Others: +hydra.launcher.ray.init.KEY=VALUE.
    init: Dict[str, Any] = field(default_factory=lambda: {"address": "auto", "num_cpus": None,
                                                          "include_dashboard": False})
    # ray.remote's options for each job's Ray task: the resources it asks for (a job that is a
    # cluster=ray training asks for none: its actors reserve their own), how Ray places it
    # (scheduling_strategy: SPREAD puts jobs on different nodes), max_calls=1: each job in a
    # worker process of its own, and max_retries: how often Ray runs a job again whose worker
    # or node was lost (0: the job is FAILED; each new attempt is a run of its own).
    remote: Dict[str, Any] = field(default_factory=lambda: {"num_cpus": 1, "max_calls": 1, "max_retries": 0,
                                                            "scheduling_strategy": "DEFAULT"})


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.xpdist_ray.ray_launcher.RayLauncher"
    ray: RayConf = field(default_factory=RayConf)


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf, provider="xpdist")
