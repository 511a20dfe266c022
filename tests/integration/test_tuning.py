"""Optuna studies end to end (hydra/sweeper=optuna): the real CLI, real Optuna, real trials,
the MLflow store and the study's storage read back.

Budget: each trial starts a task process (importing TensorFlow: 8-25 s here), so studies are
small: the linear model on synthetic_regression, a few epochs.
"""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import REPO, compose

pytestmark = pytest.mark.slow

STUDY = ["hydra/sweeper=optuna", "trainer.progress=false", "trainer.keep_checkpoints=0", "tracking.log_model=false"]
# After 3 epochs a rate below 1e-3 leaves the linear model's loss above 3e-2 (measured:
# 1.5e-4 -> 0.055, 1.1e-3 -> 0.038); one of 1e-2 or more brings it below 1e-3.
LR_SPACE = "hydra.sweeper.params.optimizer.learning_rate=tag(log, interval(1e-5, 1e-1))"
LOSS_BOUND = 1e-2


def study_of(xpdist, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{xpdist.workdir / 'optuna.db'}")


def parents_and_trials(xpdist):
    runs = xpdist.runs()
    parents = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    trials = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, trials


def check_study_parent(xpdist, parent, study, objective="loss"):
    """The parent run is the study: its space as params, the best value and best.* params, the plots."""
    assert parent.info.status == "FINISHED", parent.data.tags.get("xpdist.error")
    assert parent.data.tags["xpdist.study"] == study.study_name
    assert parent.info.run_name == f"study {study.study_name}"
    assert math.isclose(parent.data.metrics[objective], study.best_value, rel_tol=1e-6)
    assert parent.data.params["best.optimizer.learning_rate"] == repr(study.best_params["optimizer.learning_rate"])
    files = {a.path for a in xpdist.client().list_artifacts(parent.info.run_id, "study")}
    assert {"study/optimization_history.png", "study/parallel_coordinate.png"} <= files


def test_tpe_finds_a_learning_rate_a_bad_rate_cannot_match(xpdist):
    """Two trials at a time into one SQLite store: every trial, run and metric is kept."""
    proc = xpdist.run(*STUDY, "trainer.epochs=3", "hydra.sweeper.n_trials=6", "hydra.sweeper.seed=3",
                      "hydra/launcher=local_parallel", "hydra.sweeper.n_jobs=2",
                      "hydra.sweeper.study_name=lr", LR_SPACE, multirun=True, tiny=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    study = study_of(xpdist, "lr")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 6
    (parent,), trials = parents_and_trials(xpdist)
    assert parent.data.params["optimizer.learning_rate"] == "tag(log, interval(1e-5, 1e-1))"
    check_study_parent(xpdist, parent, study)
    assert "study/param_importances.png" in {a.path for a in xpdist.client().list_artifacts(parent.info.run_id, "study")}
    # Each trial is a child run whose final loss is the value Optuna was told.
    by_number = {int(r.data.tags["xpdist.trial"]): r for r in trials}
    assert sorted(by_number) == list(range(6))
    for trial in study.trials:
        run = by_number[trial.number]
        assert run.info.status == "FINISHED" and run.data.tags["xpdist.trial_state"] == "COMPLETE"
        assert math.isclose(run.data.metrics["loss"], trial.value, rel_tol=1e-6)
        assert trial.user_attrs["mlflow_run_id"] == run.info.run_id
        assert float(run.data.params["optimizer.learning_rate"]) == pytest.approx(trial.params["optimizer.learning_rate"])
        assert len(xpdist.client().get_metric_history(run.info.run_id, "loss")) == 3
    assert study.best_value < LOSS_BOUND
    # The space held bad rates, and a bad rate stays above the bound.
    slow = [t for t in study.trials if t.params["optimizer.learning_rate"] < 1e-3]
    assert slow and all(t.value > LOSS_BOUND for t in slow)
    assert f"best: trial {study.best_trial.number}, loss=" in proc.stdout
    check_report(xpdist, parent, study)


def check_report(xpdist, parent, study):
    """xpdist-report on the study: the trials sorted by the objective, and the study's plots."""
    from xpdist.report import main as report_main

    out = xpdist.workdir / "report"
    assert report_main(["--sweep", parent.info.run_id, "--tracking-uri", xpdist.uri, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    section = text.split(f"## Study {study.study_name}: trials by loss (minimize, best first)")[1]
    listed = [int(line.split("|")[1]) for line in section.splitlines() if line.startswith("| ") and
              line.split("|")[1].strip().isdigit()]
    ranked = sorted(study.trials, key=lambda t: t.value)
    assert listed == [t.number for t in ranked]
    for name in ("optimization_history", "param_importances", "parallel_coordinate"):
        assert (out / f"study_{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"(study_{name}.png)" in text


def test_resume_by_name_adds_trials_and_pruning_stops_a_hopeless_trial_early(xpdist):
    # Epochs long enough (400 steps) for the pruner to act while the trial still trains.
    # Over 60 s on a slow day (76 s in a fresh-clone CI run here): two Optuna commands, the
    # second resuming the study, each trial a training of up to 30 such epochs.
    # The grid sampler with this seed tries 0.02 first (a good rate), then 1e-7 (hopeless).
    study_args = [*STUDY, "trainer.epochs=30", "dataset.num_examples=2000", "trainer.steps_per_execution=1",
                  "hydra.sweeper.n_trials=1", "hydra.sweeper.study_name=resumed", "hydra.sweeper.sampler=grid",
                  "hydra.sweeper.seed=1", "hydra.sweeper.params.optimizer.learning_rate=choice(0.02, 1e-7)"]
    first = xpdist.run(*study_args, multirun=True, tiny=False, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert study_of(xpdist, "resumed").trials[0].params["optimizer.learning_rate"] == 0.02
    # The hopeless trial may train ten times as long (300 epochs, about 70 s here): it passes as
    # soon as the pruner stops it, and a driver stalled for seconds on a loaded machine (a fresh-
    # clone CI run here once saw its 30 epochs of 0.23 s end before the stop came) still shows
    # the pruning as early. trainer.epochs is not in the study's space, so the study resumes.
    second = xpdist.run(*study_args, "trainer.epochs=300", "hydra.sweeper.pruner=median",
                        "hydra.sweeper.pruner_startup_trials=1", multirun=True, tiny=False, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "study resumed (1 trials so far)" in second.stdout
    study = study_of(xpdist, "resumed")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    assert study.trials[1].params["optimizer.learning_rate"] == 1e-7
    parents, trials = parents_and_trials(xpdist)
    assert len(parents) == 2 and len(trials) == 2  # one parent run per command, one child per trial
    pruned = next(r for r in trials if r.data.tags["xpdist.trial"] == "1")
    assert pruned.info.status == "FINISHED"
    assert pruned.data.tags["xpdist.trial_state"] == "PRUNED"
    epoch = int(pruned.data.tags["xpdist.pruned_at_epoch"])
    logged = xpdist.client().get_metric_history(pruned.info.run_id, "loss")
    assert epoch >= 1 and len(logged) < 30, (epoch, len(logged), second.stdout[-3000:])
    assert study.trials[1].last_step == epoch
    assert "pruned after epoch" in second.stdout
    # Resuming with another space for a key the study searched: one line, exit 2, no new run.
    third = xpdist.run(*study_args[:-1], "hydra.sweeper.params.optimizer.learning_rate=choice(0.5)",
                       multirun=True, tiny=False, timeout=300)
    assert third.returncode == 2 and "which a resumed study must keep" in third.stderr, third.stderr
    assert len(xpdist.runs()) == 4


def test_a_failing_trial_is_told_failed_and_the_study_goes_on(xpdist):
    # per_replica_batch_size=0 is rejected by the job's preflight: a FAILED child run, a FAIL trial.
    # The trials also tune a schedule's warmup (issue 23: the sweeper reaches the training pieces).
    proc = xpdist.run(*STUDY, "trainer.epochs=1", "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler=grid",
                      "hydra.sweeper.study_name=failing", "hydra.sweeper.params.dataset.per_replica_batch_size=choice(0, 5)",
                      "schedule=cosine", "hydra.sweeper.params.schedule.warmup_epochs=choice(0.5)",
                      multirun=True, tiny=False, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    study = study_of(xpdist, "failing")
    states = {t.params["dataset.per_replica_batch_size"]: t.state for t in study.trials}
    assert states == {0: TrialState.FAIL, 5: TrialState.COMPLETE}
    (parent,), trials = parents_and_trials(xpdist)
    assert {r.data.tags["xpdist.trial_state"]: r.info.status for r in trials} == {"FAIL": "FAILED", "COMPLETE": "FINISHED"}
    assert "dataset.per_replica_batch_size" in next(t for t in study.trials if t.state == TrialState.FAIL).user_attrs["xpdist.error"]
    assert all(t.params["schedule.warmup_epochs"] == 0.5 for t in study.trials)
    finished = next(r for r in trials if r.info.status == "FINISHED")
    assert (finished.data.params["schedule.name"], finished.data.params["schedule.warmup_epochs"]) == ("cosine", "0.5")


@pytest.mark.parametrize("recipe", ["tune_mirrored_digits", "tune_strategy_lr"])
def test_tuning_recipes_run(xpdist, recipe):
    assert compose([f"recipe={recipe}"]).hydra.sweeper._target_.endswith("OptunaSweeper")
    proc = xpdist.run(f"recipe={recipe}", "trainer.epochs=2", "hydra.sweeper.n_trials=2", "tracking.log_model=false",
                      multirun=True, tiny=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (parent,), trials = parents_and_trials(xpdist)
    name = parent.data.tags["xpdist.study"]
    assert name == ("tune_mirrored_digits" if recipe == "tune_mirrored_digits" else "lr-default")
    check_study_parent(xpdist, parent, study_of(xpdist, name), "val_loss")
    assert len(trials) == 2 and all(r.info.status == "FINISHED" for r in trials)
