"""The schema of the training pieces: `loss`, `schedule` and `callbacks` options.

Kept apart from schema.py (which stores these too, from register_configs) because they
describe Keras objects rather than where and how a run is distributed. Each loss option's
keys are its Keras class's constructor arguments; schedule lengths are in epochs, which the
task turns into steps with the plan's steps per epoch. `callbacks` is a group of which
several options are chosen at once (`callbacks=[early_stopping,terminate_on_nan]`): each
chosen option fills its own key of `callbacks` (the ConfigStore entry of an option is
`{name: dataclass}`); an option not chosen has no key.
Each option's dataclass is registered where it is defined (`@LOSSES.register_schema`), and
its value rules sit on its fields (xpdist/core/rules.py): the key checks, --help and the
configuration reference read both from here. This module imports no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from xpdist.core import rules
from xpdist.core.registry import Registry
from xpdist.core.rules import open_mapping

# Every option of each group, by name: filled by the decorator on each dataclass below.
LOSSES: Registry[type] = Registry("loss")
SCHEDULES: Registry[type] = Registry("schedule")
# callbacks option -> the dataclass of its key (callbacks.<option>).
CALLBACKS: Registry[type] = Registry("callbacks")


# ---- loss -----------------------------------------------------------------------------------

@dataclass
class LossBase:
    # Fixed by each option: choose another with loss=NAME.
    name: str = MISSING


@LOSSES.register_schema
@dataclass
class AutoLoss(LossBase):
    name: str = "auto"


@LOSSES.register_schema
@dataclass
class MseLoss(LossBase):
    name: str = "mse"


@LOSSES.register_schema
@dataclass
class MaeLoss(LossBase):
    name: str = "mae"


@LOSSES.register_schema
@dataclass
class HuberLoss(LossBase):
    name: str = "huber"
    # Where the loss turns from quadratic to linear (keras.losses.Huber's delta).
    delta: float = field(default=1.0, metadata=rules.above(0))


@dataclass
class ProbabilisticLoss(LossBase):
    # The model's outputs are logits, not probabilities (xpdist's own models output logits).
    # Keras' default is false. Metrics that take from_logits (auc) follow it.
    from_logits: bool = False


@LOSSES.register_schema
@dataclass
class BinaryCrossentropyLoss(ProbabilisticLoss):
    name: str = "binary_crossentropy"
    # Labels are squeezed towards 0.5 by this amount (0: none).
    label_smoothing: float = field(default=0.0, metadata=rules.fraction())


@LOSSES.register_schema
@dataclass
class CategoricalCrossentropyLoss(ProbabilisticLoss):
    name: str = "categorical_crossentropy"
    # One-hot labels are smoothed by this amount (0: none).
    label_smoothing: float = field(default=0.0, metadata=rules.fraction())


@LOSSES.register_schema
@dataclass
class SparseCategoricalCrossentropyLoss(ProbabilisticLoss):
    name: str = "sparse_categorical_crossentropy"
    # A label value that counts for nothing (null: none), e.g. a padding class.
    ignore_class: Optional[int] = None


@LOSSES.register_schema
@dataclass
class CustomLoss(LossBase):
    name: str = "custom"
    # Dotted path of a keras.losses.Loss subclass (called with `kwargs`) or of a function
    # fn(y_true, y_pred) returning one loss per example. A path starting with `keras.` is
    # taken from the Keras the run uses (Keras 3 or tf-keras).
    _target_: str = "keras.losses.LogCosh"
    # Keyword arguments for the class. Add one with loss.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)


# decay_epochs of cosine and polynomial (exponential's is required).
_DECAY_EPOCHS = rules.above(0, "Use null for the rest of training.")


# ---- schedule -------------------------------------------------------------------------------

@dataclass
class ScheduleBase:
    # Fixed by each option: choose another with schedule=NAME.
    name: str = MISSING


@SCHEDULES.register_schema
@dataclass
class ConstantSchedule(ScheduleBase):
    name: str = "constant"


@dataclass
class WarmupSchedule(ScheduleBase):
    # Epochs of linear warmup from warmup_start to the (scaled) learning rate, before the
    # schedule's decay begins (0: none). Fractions of an epoch are allowed.
    warmup_epochs: float = field(default=0.0, metadata=rules.at_least(0, "Use 0 for no warmup."))
    # Learning rate at the first step of the warmup.
    warmup_start: float = field(default=0.0, metadata=rules.at_least(0))


@SCHEDULES.register_schema
@dataclass
class CosineSchedule(WarmupSchedule):
    name: str = "cosine"
    # Epochs of cosine decay after the warmup (null: the rest of training).
    decay_epochs: Optional[float] = field(default=None, metadata=_DECAY_EPOCHS)
    # The final learning rate, as a fraction of the learning rate.
    alpha: float = field(default=0.0, metadata=rules.fraction())


@SCHEDULES.register_schema
@dataclass
class PiecewiseSchedule(WarmupSchedule):
    name: str = "piecewise"
    # Epochs, counted from the start of training, at which the next factor takes over.
    boundaries: List[float] = field(default_factory=lambda: [1.0])
    # Multipliers of the learning rate, one more than boundaries: [1, 0.1] divides it by 10
    # at the first boundary.
    factors: List[float] = field(default_factory=lambda: [1.0, 0.1], metadata=rules.rule(
        lambda factors: all(f > 0 for f in factors), "every factor must be above 0", "Use e.g. [1, 0.1]."))


@SCHEDULES.register_schema
@dataclass
class ExponentialSchedule(WarmupSchedule):
    name: str = "exponential"
    # The learning rate is multiplied by decay_rate every decay_epochs epochs (after the warmup).
    decay_epochs: float = field(default=1.0, metadata=rules.above(0))
    # Factor per decay_epochs.
    decay_rate: float = field(default=0.5, metadata=rules.above(0, "Use e.g. 0.5 (halve it every decay_epochs)."))
    # Decay in whole steps of decay_epochs rather than continuously.
    staircase: bool = False


@SCHEDULES.register_schema
@dataclass
class PolynomialSchedule(WarmupSchedule):
    name: str = "polynomial"
    # Epochs of decay after the warmup (null: the rest of training).
    decay_epochs: Optional[float] = field(default=None, metadata=_DECAY_EPOCHS)
    # The learning rate at the end of the decay.
    end_learning_rate: float = field(default=0.0, metadata=rules.at_least(0))
    # The polynomial's power (1: linear decay).
    power: float = field(default=1.0, metadata=rules.above(0, "Use e.g. 1 (linear) or 2."))


# ---- callbacks (several at once) --------------------------------------------------------------

@dataclass
class MonitoringCallback:
    # The logged metric watched, e.g. val_loss, loss, val_auc.
    monitor: str = "val_loss"
    # min, max, or auto (max for accuracy-like names, else min).
    mode: str = "auto"
    # The smallest change that counts as an improvement.
    min_delta: float = field(default=0.0, metadata=rules.at_least(0))
    # Epochs without improvement before acting.
    patience: int = field(default=0, metadata=rules.at_least(0))


@CALLBACKS.register("early_stopping")
@dataclass
class EarlyStoppingCallback(MonitoringCallback):
    # Stop only if the metric has not reached this value (null: no baseline).
    baseline: Optional[float] = None
    # Put back the weights of the best epoch when training stops.
    restore_best_weights: bool = False
    # Epochs to wait before watching at all.
    start_from_epoch: int = field(default=0, metadata=rules.at_least(0))


@CALLBACKS.register("reduce_lr_on_plateau")
@dataclass
class ReduceLrOnPlateauCallback(MonitoringCallback):
    patience: int = field(default=10, metadata=rules.at_least(0))
    min_delta: float = field(default=1e-4, metadata=rules.at_least(0))
    # The learning rate is multiplied by this on a plateau.
    factor: float = field(default=0.1, metadata=rules.rule(lambda f: 0 < f < 1, "must be above 0 and below 1",
                                                             "Use e.g. 0.1 (Keras refuses a factor of 1 or more)."))
    # Epochs to wait after a reduction before watching again.
    cooldown: int = field(default=0, metadata=rules.at_least(0))
    # Lower bound on the learning rate.
    min_lr: float = field(default=0.0, metadata=rules.at_least(0))


@CALLBACKS.register("terminate_on_nan")
@dataclass
class TerminateOnNanCallback:
    pass


@CALLBACKS.register("custom")
@dataclass
class CustomCallback:
    # Dotted path of a keras.callbacks.Callback subclass, called with `kwargs` (a `keras.`
    # path is taken from the run's Keras).
    _target_: str = "keras.callbacks.Callback"
    # Keyword arguments for the class. Add one with callbacks.custom.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)


def chosen_callbacks(callbacks: Any) -> List[str]:
    """The callbacks options a config chose, in CALLBACKS order."""
    return [name for name in CALLBACKS if name in callbacks]
