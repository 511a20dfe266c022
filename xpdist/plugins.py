"""xpdist's Hydra plugins (the Optuna sweeper, the parallel and Ray launchers), registered with Hydra.

Apart from the driver because the plugins (hydra_plugins/xpdist_*) are built on the driver's
sweeps: the entry point and the advisor register them, and nothing below imports them.
"""

import importlib.util


def register() -> None:
    """Registers xpdist's Hydra plugins (Optuna sweeper, parallel and Ray launchers) with Hydra.

    Hydra 1.3 finds plugins by listing the `hydra_plugins` namespace package's modules. After
    setuptools' default editable install (PEP 660) the package imports through an import hook
    that this listing cannot see, so `hydra/sweeper=optuna` was unknown in any directory but
    the checkout's root (facebookresearch/hydra#2359; entry-point discovery arrives in Hydra
    1.4, facebookresearch/hydra#3252). Importing the plugin's config stores it in the
    ConfigStore, and `Plugins.register` is Hydra's public call for a plugin class it did not
    scan; both are harmless after a scan that found them. The Ray launcher's class subclasses
    hydra-ray-launcher's, of the ray extra: registered where that is installed.
    """
    from hydra.core.plugins import Plugins

    import hydra_plugins.xpdist_optuna.config  # noqa: F401  (stores hydra/sweeper/optuna)
    import hydra_plugins.xpdist_ray.config  # noqa: F401  (stores hydra/launcher/ray)
    from hydra_plugins.xpdist_optuna.optuna_sweeper import OptunaSweeper
    from hydra_plugins.xpdist_parallel.launcher import ParallelLauncher

    Plugins.instance().register(OptunaSweeper)
    Plugins.instance().register(ParallelLauncher)
    if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None:
        from hydra_plugins.xpdist_ray.ray_launcher import RayLauncher

        Plugins.instance().register(RayLauncher)
