"""The study's checks before any trial: the search space against the real config, the
settings, and a resumed study's space and direction. Bad input is one line, exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from xpdist.core import data_sources
from xpdist.core.errors import ConfigError
from xpdist.driver.sweeps.tuning import settings as settings_mod, space as space_mod
from xpdist.driver.sweeps.tuning.settings import Settings
from xpdist.tracking import store


def search_space(config: DictConfig, settings: Settings) -> space_mod.SearchSpace:
    """The study's search space, checked by composing the config as its trials' jobs will.

    Raises:
        ConfigError: a bad setting or search space.
    """
    from hydra.core.global_hydra import GlobalHydra

    settings.check()
    space = space_mod.parse(settings.params, list(config.hydra.overrides.task))
    if not space.distributions:
        raise ConfigError(space_mod.PARAMS_KEY, "{}", "the study has nothing to search",
                          "Give a dimension, e.g. 'optimizer.learning_rate=tag(log, interval(1e-4, 1e-1))'")
    loader = GlobalHydra.instance().config_loader()
    space_mod.check_against_config(space, lambda overrides: loader.load_sweep_config(config, overrides))
    if settings.objective.startswith("val_"):
        trial = loader.load_sweep_config(config, space.fixed)
        source = data_sources.of(trial)  # each data source knows the key that gives it validation data
        if f"dataset.{source.validation_key}" not in space.distributions and not source.has_validation(trial):
            raise ConfigError("hydra.sweeper.objective", settings.objective,
                              f"the runs log no validation metrics (dataset.{source.validation_key}="
                              f"{trial.dataset.get(source.validation_key)})",
                              f"{source.validation_hint()}, or objective=loss")
    if settings.sampler == "grid":
        space.grid()
    return space


def preflight(config: DictConfig) -> None:
    """Every check of the study that needs no trial (called before the sweep's parent run exists)."""
    settings = Settings.from_config(config.hydra.sweeper)
    space = search_space(config, settings)
    uri = store.resolve_uri(config.tracking.uri, Path(config.hydra.runtime.cwd))
    check_resume(settings, space, settings.resolved_storage(uri, Path(config.hydra.runtime.cwd)))


def check_resume(settings: Settings, space: space_mod.SearchSpace, url: str) -> None:
    """A resumed study keeps its direction and the distribution of every key it searched.

    Raises:
        ConfigError: the new space or direction differs from the stored study's.
    """
    import optuna
    from optuna.distributions import check_distribution_compatibility

    if not settings.study_name or (url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists()):
        return  # a new study
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=settings.study_name, storage=settings_mod.storage(url))
    except KeyError:
        return
    if study.direction.name.lower() != settings.direction:
        raise ConfigError("hydra.sweeper.direction", settings.direction,
                          f"study {settings.study_name!r} in {url} was made to {study.direction.name.lower()}",
                          "Keep its direction, or give a new hydra.sweeper.study_name")
    for trial in study.get_trials(deepcopy=False):
        for key, old in trial.distributions.items():
            if key in space.distributions:
                try:
                    check_distribution_compatibility(old, space.distributions[key])
                except ValueError as err:
                    shown, text = space.sources[key].split("=", 1)
                    raise ConfigError(shown, text, f"study {settings.study_name!r} searched {key} as {old}, "
                                      f"which a resumed study must keep ({err})",
                                      "Keep the study's search space, or give a new hydra.sweeper.study_name") from None


def reject(err: ConfigError) -> None:
    """A bad search space: one line, exit code 2."""
    print(f"xpdist: error: {err}", file=sys.stderr, flush=True)
    raise SystemExit(2)
