"""An Optuna study driven through Hydra's launcher: ask a batch of trials, launch them as
jobs, tell Optuna how each ended (ask-and-tell), until hydra.sweeper.n_trials have run.

The sweep callback (xpdist.driver.sweeps.sweep) makes the MLflow parent run before the first trial
and closes it after the last; this module adds the study to it: the search space as params,
the best value and the best trial's params (`best.` prefix) and Optuna's plots. Each trial's
job finds its trial through the study file in the sweep directory (xpdist.driver.sweeps.tuning.trial)
and reports every epoch's objective to it, so a pruner can stop it.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.jobdir import STUDY_FILE, SWEEP_FILE
from xpdist.core.protocol.outcome import Status
from xpdist.driver import hydra_private
from xpdist.driver.sweeps.tuning import optuna_private, plots, settings as settings_mod, space as space_mod
from xpdist.driver.sweeps.tuning.checks import check_resume, reject, search_space
from xpdist.driver.sweeps.tuning.settings import Settings
from xpdist.driver.sweeps.tuning.trial import PRUNED_ATTR
from xpdist.tracking import store

# Tags of a trial's child run and of the study's parent run.
TRIAL_TAG = "xpdist.trial"
STATE_TAG = "xpdist.trial_state"
STUDY_TAG = "xpdist.study"


class StudyRun:
    """One command's part of a study: n_trials trials, n_jobs at a time."""

    def __init__(self, settings: Settings, hydra_context, task_function, config: DictConfig):
        from hydra.core.plugins import Plugins

        self.settings, self.config = settings, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.launch_dir = Path(config.hydra.runtime.cwd)

    def run(self, arguments: List[str]) -> List[Any]:
        import optuna
        from optuna.trial import TrialState

        try:
            space = search_space(self.config, self.settings)
        except ConfigError as err:
            reject(err)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        sweep = self._sweep_info()
        uri = sweep.get("tracking_uri") or store.resolve_uri(self.config.tracking.uri, self.launch_dir)
        parent = sweep.get("parent_run_id")
        url, name = self.settings.resolved_storage(uri, self.launch_dir), self.settings.resolved_study_name()
        try:
            check_resume(self.settings, space, url)
        except ConfigError as err:
            reject(err)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=name, storage=settings_mod.storage(url), direction=self.settings.direction,
            sampler=settings_mod.sampler(self.settings, space.grid() if self.settings.sampler == "grid" else None),
            pruner=settings_mod.pruner(self.settings), load_if_exists=True)
        before = len(study.trials)
        link = {"storage": url, "study_name": name, "objective": self.settings.objective, "trials": {},
                "pruning": {k: getattr(self.settings, k) for k in
                            ("pruner", "pruner_startup_trials", "pruner_warmup_epochs")}}
        if parent:
            store.set_tags(uri, parent, {STUDY_TAG: name, "xpdist.study_storage": url, "mlflow.runName": f"study {name}",
                                         "xpdist.objective": self.settings.objective,
                                         "xpdist.direction": self.settings.direction})
            _log(uri, parent, params=space.as_params())
        print(f"xpdist: study {name} ({before} trials so far) in {url}: {self.settings.n_trials} trials, "
              f"{self.settings.n_jobs} at a time, {self.settings.direction} {self.settings.objective}", flush=True)
        returns, job_idx, n_trials = [], 0, self._trials_to_run(study, space)
        while job_idx < n_trials:
            trials = [study.ask(space.distributions) for _ in range(min(self.settings.n_jobs, n_trials - job_idx))]
            for offset, trial in enumerate(trials):
                link["trials"][str(job_idx + offset)] = {"number": trial.number, "id": optuna_private.trial_id(trial)}
            _write_json(self.sweep_dir / STUDY_FILE, link)
            batch = [space.overrides(trial.params) for trial in trials]
            try:
                results = self.launcher.launch(batch, initial_job_idx=job_idx)
            except BaseException:  # Ctrl-C, a launcher's error: no trial stays RUNNING in the study
                for trial in trials:
                    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                raise
            for trial, ret in zip(trials, results):
                self._tell(study, trial, ret, uri)
            returns.append(results)
            job_idx += len(trials)
        self._finish(study, space, uri, parent, before)
        return returns

    def _trials_to_run(self, study, space: space_mod.SearchSpace) -> int:
        """n_trials; for sampler=grid no more than the grid points not tried yet."""
        if self.settings.sampler != "grid":
            return self.settings.n_trials
        points = 1
        for values in space.grid().values():
            points *= len(values)
        left = max(0, points - len(study.trials))
        if left < self.settings.n_trials:
            print(f"xpdist: the grid has {left} of its {points} points left to try: {left} trials", flush=True)
        return min(self.settings.n_trials, left)

    def _sweep_info(self) -> Dict[str, Any]:
        path = self.sweep_dir / SWEEP_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _tell(self, study, trial, ret, uri: str) -> None:
        """Tells Optuna how the trial's job ended: COMPLETE with its objective, PRUNED, or FAIL."""
        from optuna.trial import TrialState

        result = hydra_private.job_result(ret)
        run_id = getattr(result, "run_id", None)
        if run_id:
            trial.set_user_attr("mlflow_run_id", run_id)
        value = (getattr(result, "metrics", None) or {}).get(self.settings.objective)
        if PRUNED_ATTR in optuna_private.stored_user_attrs(study, trial):
            state, values = TrialState.PRUNED, None
        elif getattr(result, "status", None) == Status.FINISHED and value is not None and math.isfinite(value):
            state, values = TrialState.COMPLETE, value
        else:
            state, values = TrialState.FAIL, None
            why = _why_failed(result, ret, self.settings.objective)
            trial.set_user_attr("xpdist.error", why[:1000])
            print(f"xpdist: trial {trial.number} failed: {why}", file=sys.stderr, flush=True)
        try:
            study.tell(trial, values, state=state)
        except RuntimeError as err:
            # The grid sampler calls study.stop() once every point is tried, which only an
            # optimize() loop may do; the trial's state is stored before that.
            if "Study.stop" not in str(err):
                raise
        if run_id:
            store.set_tags(uri, run_id, {TRIAL_TAG: str(trial.number), STATE_TAG: state.name,
                                         STUDY_TAG: study.study_name})

    def _finish(self, study, space: space_mod.SearchSpace, uri: str, parent: Optional[str], before: int) -> None:
        from optuna.trial import TrialState

        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
                  for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
        summary = {"study_name": study.study_name, "direction": self.settings.direction,
                   "objective": self.settings.objective, "trials": len(study.trials), **counts}
        lines = [f"xpdist: study {study.study_name}: {len(study.trials) - before} trials run now, "
                 f"{len(study.trials)} in all ({counts['complete']} complete, {counts['pruned']} pruned, "
                 f"{counts['fail']} failed)"]
        if complete:
            best = study.best_trial
            summary.update(best_trial=best.number, best_value=best.value, best_params=best.params)
            lines.append(f"  best: trial {best.number}, {self.settings.objective}={best.value:.6g}, "
                         + " ".join(f"{k}={space_mod.literal(v)}" for k, v in best.params.items()))
        out = self.sweep_dir / "study"
        out.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(summary), self.sweep_dir / "optimization_results.yaml")
        files, notes = plots.write_all(study, out)
        lines += [f"  plot skipped: {note}" for note in notes]
        lines.append(f"  more trials: the same command with hydra.sweeper.study_name={study.study_name}"
                     + ("" if self.settings.storage else " (the study is in the default storage)"))
        if parent:
            if complete:
                _log(uri, parent, metrics={self.settings.objective: best.value, "best_trial": best.number},
                     params={f"best.{k}": space_mod.literal(v) for k, v in best.params.items()})
            _log(uri, parent, metrics={f"trials_{k}": v for k, v in counts.items()})
            store.log_artifacts(uri, parent, [*files, self.sweep_dir / "optimization_results.yaml"], "study")
            if notes:
                store.set_tags(uri, parent, {"xpdist.study_plots_skipped": "; ".join(notes)})
        print("\n".join(lines), flush=True)


def _why_failed(result, ret, objective: str) -> str:
    if result is None:
        error = hydra_private.job_error(ret)
        return f"the job raised {type(error).__name__}: {error}"
    if result.status != Status.FINISHED:
        return f"its run ended {result.status}: {result.error or 'no error recorded'}"
    known = ", ".join(sorted(result.metrics)) or "none"
    value = result.metrics.get(objective)
    if value is None:
        return f"the run has no final metric {objective!r} (it has: {known})"
    return f"{objective} is {value}"


def _log(uri: str, run_id: str, params: Optional[Dict[str, str]] = None,
         metrics: Optional[Dict[str, float]] = None) -> None:
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    store.retry(store.client(uri).log_batch, run_id, params=[Param(k, str(v)) for k, v in (params or {}).items()],
                metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])


def _write_json(path: Path, data: Dict[str, Any]) -> None:
    staged = path.with_name(path.name + ".tmp")
    staged.write_text(json.dumps(data, indent=2))
    staged.replace(path)
