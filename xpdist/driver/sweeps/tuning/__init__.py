"""Tuning: xpdist's Optuna sweeper (hydra/sweeper=optuna).

    study.py     the sweeping side: search space checked, trials asked, launched and told
    space.py     Hydra's sweep syntax -> Optuna distributions, checked against the config
    checks.py    every check before a trial: the space composed, the settings, a resumed study
    settings.py  hydra.sweeper.* and the Optuna sampler, pruner and storage they name
    trial.py     the job side: each epoch's objective reported to the trial, pruning
    plots.py     Optuna's plots of the study as PNG files

Hydra finds the sweeper through hydra_plugins/xpdist_optuna, a thin shell around study.py.
"""
