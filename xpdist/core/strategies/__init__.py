"""The strategy seam, driver half: what xpdist knows about each `strategy` option, without TensorFlow.

Each module of this package (default.py, mirrored.py, ...) is one strategy option and holds
its schema dataclass (its keys, their types, defaults and value rules) and its `SPEC`, a
`StrategySpec` that answers every question the rest of xpdist has about it: its schema
(`config`), which other config groups tune it (`applies_to`), what it needs from the cluster
group (`needs`), how many replicas a config gives (`replicas`), which Keras it needs with
which trainer (`keras_flavour`), and its own preflight checks (`preflight`). The plan,
preflight, the params, the launchers and the trainers ask the spec; none of them compares a
strategy's name, and every list of strategies (the key checks, --help, the configuration
reference) is read from STRATEGIES. The task half (how TensorFlow builds it) is the module
of the same name in xpdist/task/strategies/.

Adding a strategy `foo` is three files: `foo.py` here, `xpdist/task/strategies/foo.py` and
`conf/strategy/foo.yaml`. A user's package registers its own with
`xpdist.core.options.register_strategy` (docs/contributing.md). A user's own subclass of a
strategy's TensorFlow class needs none of this: `strategy._target_` names it, and it is
planned and checked as the option it extends (examples/my_project/my_strategies.py).

Example:
    spec = strategies.of(cfg)
    if spec.needs.coordinator: ...
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import enum
import sys
from typing import Callable, ClassVar, Dict, List, Optional, Tuple

from omegaconf import MISSING

from xpdist.core.errors import ConfigError
from xpdist.core.registry import Registry, named_config
from xpdist.core.targets import check_target

# Config groups that tune one kind of strategy: each applies only under the strategies whose
# spec lists it in applies_to; elsewhere it must stay `auto`, and is neither logged nor in the
# run name. The value says what the group's options are, in messages.
TUNING_GROUPS: Dict[str, str] = {"cross_ops": "cross-device ops", "communication": "communication options"}


@dataclasses.dataclass(frozen=True)
class ClusterNeeds:
    """What a strategy needs from the cluster group.

    Attributes:
        jobs: the TF_CONFIG jobs of its multi-process cluster, the chief's job first; empty
            for a strategy that runs in one process (cluster=local only).
        coordinator: the chief coordinates and the other tasks serve steps it sends them
            (tf.distribute.Server): only the chief trains; a worker may die while training
            goes on; Model.fit takes a DatasetCreator and refuses batch-level callbacks.
    """

    jobs: Tuple[str, ...] = ()
    coordinator: bool = False

    @property
    def multi_process(self) -> bool:
        return bool(self.jobs)

    @property
    def chief_job(self) -> str:
        """The job of the task that trains and reports (worker 0 where there is no chief)."""
        return self.jobs[0] if self.jobs else "worker"

    @property
    def has_ps(self) -> bool:
        return "ps" in self.jobs


ONE_PROCESS = ClusterNeeds()
WORKERS = ClusterNeeds(jobs=("worker",))
CHIEF_WORKERS_PS = ClusterNeeds(jobs=("chief", "worker", "ps"), coordinator=True)


class Keras3Fit(enum.Enum):
    """How Keras 3's Model.fit fares under a strategy (keras=auto picks tf-keras unless it trains right)."""

    trains = "trains"
    # The weights are right, the logged loss and metrics are not.
    wrong_metrics = "wrong_metrics"
    cannot_train = "cannot_train"


@dataclass
class StrategyBase:
    # Fixed by each option, and what the code dispatches on: choose another with strategy=NAME.
    name: str = MISSING


@dataclass
class ClassStrategy(StrategyBase):
    # Your own subclass of this option's TensorFlow class (module.Class), built with the same
    # arguments; the option's plan, checks and cluster stay. null: TensorFlow's class.
    _target_: Optional[str] = None


@dataclass
class LocalDevicesStrategy(ClassStrategy):
    # Devices to use, e.g. ["/cpu:0", "/cpu:1"]. Empty: every visible GPU, else every
    # (logical) CPU.
    devices: List[str] = field(default_factory=list)


class StrategySpec:
    """One `strategy` option, as the driver and the planner see it. Subclass it, one per module.

    Class attributes, each with the value most strategies have:
        name: the option's name, the same as its module's.
        config: its schema, a dataclass extending StrategyBase whose `name` defaults to name.
            A strategy that adds no key of its own sets `config_base` instead (the base it
            extends), and its `config` is that base with `name` fixed: the name is written once.
        applies_to: the TUNING_GROUPS that tune it.
        needs: what it needs from the cluster group (ONE_PROCESS, WORKERS, CHIEF_WORKERS_PS).
        uses_devices: it places replicas on this process's devices (plan.devices lists them).
        replicas_in_one_process: its replicas are devices of one process, over which XLA
            cannot compile one step.
        keras3_fit: how Keras 3's Model.fit fares under it.
        fit_distributes_dataset: the fit trainer distributes the dataset itself, so that its
            iterator outlives Model.fit (task/train/fit.py keep_iterators); the others leave it
            to Model.fit.
        auto_steps_per_execution: trainer.steps_per_execution=null may pick more than 1.
        replicas_at_run_time: only TensorFlow knows the replica count (the task reports it).
    """

    name: ClassVar[str] = ""
    config: ClassVar[type] = StrategyBase
    config_base: ClassVar[Optional[type]] = None
    applies_to: ClassVar[Tuple[str, ...]] = ()
    needs: ClassVar[ClusterNeeds] = ONE_PROCESS
    uses_devices: ClassVar[bool] = True
    replicas_in_one_process: ClassVar[bool] = False
    keras3_fit: ClassVar[Keras3Fit] = Keras3Fit.trains
    fit_distributes_dataset: ClassVar[bool] = False
    auto_steps_per_execution: ClassVar[bool] = False
    replicas_at_run_time: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("config_base") is not None:
            cls.config = named_config(cls.config_base, cls.name, "Strategy", cls.__module__)

    def replicas(self, cfg, devices: List[str], workers: int) -> int:
        """Replicas in sync for this config, as TensorFlow will count them.

        Args:
            cfg: the plain composed config.
            devices: this process's devices (core.devices.local_devices).
            workers: worker processes of the cluster (1 for one process).
        """
        return 1

    def keras_flavour(self, trainer: str) -> str:
        """keras=auto's choice: tf-keras ("legacy") where Keras 3's Model.fit would not train right."""
        return "legacy" if trainer == "fit" and self.keras3_fit is not Keras3Fit.trains else "keras3"

    def preflight(self, cfg) -> None:
        """This strategy's own checks, before any run exists. Overrides call super().preflight last.

        Raises:
            ConfigError: naming the key at fault.
        """
        if cfg.strategy.get("_target_"):  # the task imports it: here only its package is looked up
            check_target(cfg, "strategy", "Give module.Class of your subclass of the strategy's TensorFlow class, "
                                          "with its package installed or on PYTHONPATH.")
        if cfg.keras != "keras3" or cfg.trainer.name != "fit":
            return
        if self.keras3_fit is Keras3Fit.cannot_train:
            raise ConfigError(
                "keras", cfg.keras, f"Keras 3's Model.fit cannot train under strategy={self.name} "
                "(keras-team/keras#18624, #20585)", "Use keras=auto or keras=legacy (tf-keras), or trainer=ctl.")
        if self.keras3_fit is Keras3Fit.wrong_metrics:
            print("xpdist: warning: keras=keras3: Keras 3's Model.fit logs wrong loss and metrics under "
                  f"strategy={self.name} (the training is right); keras=auto or trainer=ctl logs the right ones.",
                  file=sys.stderr)


STRATEGIES: Registry[StrategySpec] = Registry("strategy", package=__name__, attribute="SPEC")


# The spec of strategy=NAME; an unknown name raises KeyError listing the known ones and the nearest.
get = STRATEGIES.get


def of(cfg) -> StrategySpec:
    """The spec of the config's strategy (cfg.strategy.name)."""
    return get(cfg.strategy.name)


def applied_groups(name: str) -> Tuple[str, ...]:
    """The tuning groups that apply under strategy=name; none for a name no strategy has."""
    return get(name).applies_to if name in STRATEGIES else ()


def names_where(test: Callable[[StrategySpec], bool]) -> List[str]:
    """The strategies whose spec passes test, sorted (for messages: "use strategy=a or b")."""
    return [name for name in STRATEGIES if test(get(name))]
