"""xpdist's Optuna sweeper for Hydra: `python -m xpdist -m hydra/sweeper=optuna ...`.

Hydra finds sweepers in the `hydra_plugins` namespace package; this package only declares the
plugin and its config. The study itself lives in xpdist.driver.sweeps.tuning.
"""
