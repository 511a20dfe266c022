"""The sweeper's settings (hydra.sweeper.*) as plain values, and the Optuna objects they name."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Dict, Optional

from xpdist.core.errors import ConfigError

SAMPLERS = ("tpe", "random", "grid", "cmaes")
PRUNERS = ("none", "median", "hyperband")


@dataclasses.dataclass
class Settings:
    """hydra.sweeper.* of hydra/sweeper=optuna (see hydra_plugins/xpdist_optuna/config.py)."""

    n_trials: int = 20
    n_jobs: int = 1
    direction: str = "minimize"
    objective: str = "loss"
    sampler: str = "tpe"
    seed: Optional[int] = None
    pruner: str = "none"
    pruner_startup_trials: int = 5
    pruner_warmup_epochs: int = 0
    study_name: Optional[str] = None
    storage: Optional[str] = None
    params: Optional[Dict[str, str]] = None

    @classmethod
    def from_config(cls, node: Any) -> "Settings":
        """From the composed hydra.sweeper node (enums as their names); an unknown key raises TypeError."""
        values = {k: getattr(v, "name", v) for k, v in dict(node).items() if k != "_target_"}
        values["params"] = _flat(values.get("params") or {})
        return cls(**values)

    def check(self) -> None:
        """Raises ConfigError for a setting no study can run with."""
        if self.n_trials < 1:
            raise ConfigError("hydra.sweeper.n_trials", self.n_trials, "a study needs at least one trial",
                              "Set hydra.sweeper.n_trials=20, say")
        if self.n_jobs < 1:
            raise ConfigError("hydra.sweeper.n_jobs", self.n_jobs, "at least one trial must run at a time",
                              "Set hydra.sweeper.n_jobs=1 (or more with hydra/launcher=local_parallel)")
        if not self.objective:
            raise ConfigError("hydra.sweeper.objective", "''", "names no metric",
                              "Name a final metric of the run: loss, val_loss, accuracy, steady_examples_per_sec")
        if self.sampler == "cmaes":
            try:
                import cmaes  # noqa: F401
            except ImportError:
                raise ConfigError("hydra.sweeper.sampler", "cmaes", "needs the cmaes package",
                                  "pip install cmaes, or use sampler=tpe") from None

    def resolved_storage(self, tracking_uri: str, launch_dir: Path) -> str:
        """hydra.sweeper.storage, else sqlite:///optuna.db beside the MLflow SQLite store, else in launch_dir."""
        if self.storage:
            return self.storage
        if tracking_uri.startswith("sqlite:///"):
            return f"sqlite:///{Path(tracking_uri[len('sqlite:///'):]).parent / 'optuna.db'}"
        return f"sqlite:///{(launch_dir / 'optuna.db').resolve()}"

    def resolved_study_name(self) -> str:
        return self.study_name or f"study-{time.strftime('%Y%m%d-%H%M%S')}"


def _flat(params: Any, prefix: str = "") -> Dict[str, str]:
    """{"optimizer": {"learning_rate": "..."}} and {"optimizer.learning_rate": "..."} alike -> dotted keys."""
    flat = {}
    for key, value in dict(params).items():
        if hasattr(value, "items"):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


def storage(url: str):
    """Optuna's RDB storage on url; SQLite waits for a busy database (trials report from several processes)."""
    import optuna

    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def sampler(settings: Settings, grid: Optional[Dict[str, list]] = None):
    import optuna

    if settings.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=settings.seed)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=settings.seed)
    if settings.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=settings.seed)
    return optuna.samplers.GridSampler(grid or {}, seed=settings.seed)


def pruner(settings: Settings):
    import optuna

    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.pruner_startup_trials,
                                           n_warmup_steps=settings.pruner_warmup_epochs)
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner()
    return optuna.pruners.NopPruner()
