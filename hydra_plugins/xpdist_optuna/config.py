"""The config of `hydra/sweeper=optuna`, registered in Hydra's ConfigStore.

Stored when Hydra imports this module while it scans the `hydra_plugins` package for
plugins (before it composes any config), and when xpdist's entry point imports it
(`xpdist.plugins.register`), for the installs whose plugins that scan misses.
"""


from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


class Direction(Enum):
    minimize = 0
    maximize = 1


class SamplerName(Enum):
    # Tree-structured Parzen estimator (Optuna's default); random for its first 10 trials.
    tpe = 0
    random = 1
    # Every combination of choice(...) and range(...) values once (no interval).
    grid = 2
    # CMA-ES over numeric dimensions.
    cmaes = 3


class PrunerName(Enum):
    none = 0
    # Stops a trial whose epoch value is worse than the median of earlier trials at that epoch.
    median = 1
    # Successive halving in several brackets (HyperbandPruner, resources = epochs).
    hyperband = 2


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.xpdist_optuna.optuna_sweeper.OptunaSweeper"
    # Trials this command runs (a resumed study gets this many more).
    n_trials: int = 20
    # Trials at once, each a job of the configured launcher (hydra/launcher=local_parallel: in parallel).
    n_jobs: int = 1
    # Whether the objective is minimized (a loss) or maximized (accuracy, examples/sec).
    direction: Direction = Direction.minimize
    # The run's final metric to optimize: loss, val_loss, accuracy, steady_examples_per_sec, ...
    # val_* metrics need dataset.validation_split > 0.
    objective: str = "loss"
    # tpe, random, grid or cmaes.
    sampler: SamplerName = SamplerName.tpe
    # The sampler's seed (null: a different sequence each time).
    seed: Optional[int] = None
    # none, median or hyperband: stops hopeless trials after an epoch (the objective must be an epoch metric).
    pruner: PrunerName = PrunerName.none
    # pruner=median: trials that must complete before any is pruned.
    pruner_startup_trials: int = 5
    # pruner=median: epochs of each trial never pruned (its first ones are noisy).
    pruner_warmup_epochs: int = 0
    # The study's name; a later command with the same name adds trials to it (null: study-<time>).
    study_name: Optional[str] = None
    # Where the study is kept: an SQLAlchemy URL (sqlite:///..., postgresql://...). null:
    # optuna.db beside the MLflow SQLite store, else in the launch directory.
    storage: Optional[str] = None
    # The search space, config key -> Hydra sweep text, e.g.
    # optimizer.learning_rate: tag(log, interval(1e-4, 1e-1)). Nested keys are read as dotted
    # ones (hydra.sweeper.params.optimizer.learning_rate=... on the command line nests them).
    params: Dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="xpdist")
