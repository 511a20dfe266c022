"""xpdist/driver/sweeps/tuning/optuna_private.py against the installed Optuna: a job's process opens
its trial by id, reports to it and sets an attribute that the sweeper's process then reads.
Fails on the Optuna release that changes the internal trial id."""

from __future__ import annotations

import optuna

from xpdist.driver.sweeps.tuning import optuna_private


def test_a_trial_opened_by_id_elsewhere_reports_and_its_attributes_reach_the_sweeper(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    sweeper = optuna.create_study(study_name="s", storage=storage)
    asked = sweeper.ask({"lr": optuna.distributions.FloatDistribution(0.01, 1.0)})

    job = optuna.load_study(study_name="s", storage=storage)  # as in the job's own process
    opened = optuna_private.open_trial(job, optuna_private.trial_id(asked))
    assert opened.number == asked.number and opened.params == asked.params
    opened.report(0.5, 1)
    opened.set_user_attr("xpdist.pruned_at_epoch", 1)

    assert optuna_private.stored_user_attrs(sweeper, asked) == {"xpdist.pruned_at_epoch": 1}
    assert job.trials[0].intermediate_values == {1: 0.5}
