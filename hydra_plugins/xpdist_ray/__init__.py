"""xpdist's Ray launcher for Hydra: `python -m xpdist -m hydra/launcher=ray ...`.

Hydra finds launchers in the `hydra_plugins` namespace package; this package only declares the
launcher and its config. What it does lives in xpdist.driver.sweeps.ray_launcher.
"""
