"""Optuna's internal trial id, in one place.

A sweep's job reports its epochs to its trial from another process (xpdist/driver/sweeps/tuning/
trial.py), which needs an `optuna.trial.Trial` there, and the sweeper reads the attribute that
job sets. Optuna has no public way to reach a trial from another process or to read a running
trial's attributes fresh from the storage (optuna/optuna#2987, optuna/optuna#6365): both go
through the trial's internal id. Every use of it is here; tests/unit/test_optuna_private.py
fails on the Optuna release that changes it, and pyproject.toml keeps optuna below 6.
"""

from __future__ import annotations

from typing import Any, Dict


def trial_id(trial) -> int:
    """The storage's id of a trial the sweeper asked for (`study.ask()`), for the job's link."""
    return trial._trial_id


def open_trial(study, found_id: int):
    """The `optuna.trial.Trial` of that id in a study loaded in another process."""
    import optuna

    return optuna.trial.Trial(study, found_id)


def stored_user_attrs(study, trial) -> Dict[str, Any]:
    """The trial's user attributes as the storage has them now, including those set by its job's
    process (`trial.user_attrs` is this process's cached copy)."""
    return study._storage.get_trial(trial._trial_id).user_attrs
