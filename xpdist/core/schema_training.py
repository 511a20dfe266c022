"""The schema of the training pieces: `loss`, `schedule` and `callbacks` options.

Kept apart from schema.py (which stores these too, from register_configs) because they
describe Keras objects rather than where and how a run is distributed. Each loss option's
keys are its Keras class's constructor arguments; schedule lengths are in epochs, which the
task turns into steps with the plan's steps per epoch. `callbacks` is a group of which
several options are chosen at once (`callbacks=[early_stopping,terminate_on_nan]`): each
chosen option fills its own key of `callbacks` (the ConfigStore entry of an option is
`{name: dataclass}`); an option not chosen has no key.
This module imports no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf


def _open_mapping() -> DictConfig:
    """User keyword arguments: open to new keys without `+` (see schema._open_mapping)."""
    return OmegaConf.create({}, flags={"struct": False})


# ---- loss -----------------------------------------------------------------------------------

@dataclass
class LossBase:
    # Fixed by each option: choose another with loss=NAME.
    name: str = MISSING


@dataclass
class AutoLoss(LossBase):
    name: str = "auto"


@dataclass
class MseLoss(LossBase):
    name: str = "mse"


@dataclass
class MaeLoss(LossBase):
    name: str = "mae"


@dataclass
class HuberLoss(LossBase):
    name: str = "huber"
    # Where the loss turns from quadratic to linear (keras.losses.Huber's delta).
    delta: float = 1.0


@dataclass
class ProbabilisticLoss(LossBase):
    # The model's outputs are logits, not probabilities (xpdist's own models output logits).
    # Keras' default is false. Metrics that take from_logits (auc) follow it.
    from_logits: bool = False


@dataclass
class BinaryCrossentropyLoss(ProbabilisticLoss):
    name: str = "binary_crossentropy"
    # Labels are squeezed towards 0.5 by this amount (0: none).
    label_smoothing: float = 0.0


@dataclass
class CategoricalCrossentropyLoss(ProbabilisticLoss):
    name: str = "categorical_crossentropy"
    # One-hot labels are smoothed by this amount (0: none).
    label_smoothing: float = 0.0


@dataclass
class SparseCategoricalCrossentropyLoss(ProbabilisticLoss):
    name: str = "sparse_categorical_crossentropy"
    # A label value that counts for nothing (null: none), e.g. a padding class.
    ignore_class: Optional[int] = None


@dataclass
class CustomLoss(LossBase):
    name: str = "custom"
    # Dotted path of a keras.losses.Loss subclass (called with `kwargs`) or of a function
    # fn(y_true, y_pred) returning one loss per example. A path starting with `keras.` is
    # taken from the Keras the run uses (Keras 3 or tf-keras).
    _target_: str = "keras.losses.LogCosh"
    # Keyword arguments for the class. Add one with loss.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)


# ---- schedule -------------------------------------------------------------------------------

@dataclass
class ScheduleBase:
    # Fixed by each option: choose another with schedule=NAME.
    name: str = MISSING


@dataclass
class ConstantSchedule(ScheduleBase):
    name: str = "constant"


@dataclass
class WarmupSchedule(ScheduleBase):
    # Epochs of linear warmup from warmup_start to the (scaled) learning rate, before the
    # schedule's decay begins (0: none). Fractions of an epoch are allowed.
    warmup_epochs: float = 0.0
    # Learning rate at the first step of the warmup.
    warmup_start: float = 0.0


@dataclass
class CosineSchedule(WarmupSchedule):
    name: str = "cosine"
    # Epochs of cosine decay after the warmup (null: the rest of training).
    decay_epochs: Optional[float] = None
    # The final learning rate, as a fraction of the learning rate.
    alpha: float = 0.0


@dataclass
class PiecewiseSchedule(WarmupSchedule):
    name: str = "piecewise"
    # Epochs, counted from the start of training, at which the next factor takes over.
    boundaries: List[float] = field(default_factory=lambda: [1.0])
    # Multipliers of the learning rate, one more than boundaries: [1, 0.1] divides it by 10
    # at the first boundary.
    factors: List[float] = field(default_factory=lambda: [1.0, 0.1])


@dataclass
class ExponentialSchedule(WarmupSchedule):
    name: str = "exponential"
    # The learning rate is multiplied by decay_rate every decay_epochs epochs (after the warmup).
    decay_epochs: float = 1.0
    # Factor per decay_epochs.
    decay_rate: float = 0.5
    # Decay in whole steps of decay_epochs rather than continuously.
    staircase: bool = False


@dataclass
class PolynomialSchedule(WarmupSchedule):
    name: str = "polynomial"
    # Epochs of decay after the warmup (null: the rest of training).
    decay_epochs: Optional[float] = None
    # The learning rate at the end of the decay.
    end_learning_rate: float = 0.0
    # The polynomial's power (1: linear decay).
    power: float = 1.0


# ---- callbacks (several at once) --------------------------------------------------------------

@dataclass
class MonitoringCallback:
    # The logged metric watched, e.g. val_loss, loss, val_auc.
    monitor: str = "val_loss"
    # min, max, or auto (max for accuracy-like names, else min).
    mode: str = "auto"
    # The smallest change that counts as an improvement.
    min_delta: float = 0.0
    # Epochs without improvement before acting.
    patience: int = 0


@dataclass
class EarlyStoppingCallback(MonitoringCallback):
    # Stop only if the metric has not reached this value (null: no baseline).
    baseline: Optional[float] = None
    # Put back the weights of the best epoch when training stops.
    restore_best_weights: bool = False
    # Epochs to wait before watching at all.
    start_from_epoch: int = 0


@dataclass
class ReduceLrOnPlateauCallback(MonitoringCallback):
    patience: int = 10
    min_delta: float = 1e-4
    # The learning rate is multiplied by this on a plateau.
    factor: float = 0.1
    # Epochs to wait after a reduction before watching again.
    cooldown: int = 0
    # Lower bound on the learning rate.
    min_lr: float = 0.0


@dataclass
class TerminateOnNanCallback:
    pass


@dataclass
class CustomCallback:
    # Dotted path of a keras.callbacks.Callback subclass, called with `kwargs` (a `keras.`
    # path is taken from the run's Keras).
    _target_: str = "keras.callbacks.Callback"
    # Keyword arguments for the class. Add one with callbacks.custom.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)


def _by_name(*classes: type) -> Dict[str, type]:
    return {cls.name: cls for cls in classes}


LOSSES: Dict[str, type] = _by_name(AutoLoss, MseLoss, MaeLoss, HuberLoss, BinaryCrossentropyLoss,
                                   CategoricalCrossentropyLoss, SparseCategoricalCrossentropyLoss, CustomLoss)
SCHEDULES: Dict[str, type] = _by_name(ConstantSchedule, CosineSchedule, PiecewiseSchedule, ExponentialSchedule,
                                      PolynomialSchedule)
# callbacks option -> the dataclass of its key (callbacks.<option>).
CALLBACKS: Dict[str, type] = {"early_stopping": EarlyStoppingCallback,
                              "reduce_lr_on_plateau": ReduceLrOnPlateauCallback,
                              "terminate_on_nan": TerminateOnNanCallback, "custom": CustomCallback}


def chosen_callbacks(callbacks: Any) -> List[str]:
    """The callbacks options a config chose, in CALLBACKS order."""
    return [name for name in CALLBACKS if name in callbacks]
