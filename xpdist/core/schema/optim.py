"""The schema of the `optimizer` and `trainer` groups: one dataclass per option, with its value rules.

Each dataclass is registered where it is defined (`@OPTIMIZERS.register_schema`), and a
field's rule (xpdist/core/rules.py) is checked with the keys (schema.check_keys) and shown in
the configuration reference. This module imports no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from xpdist.core import rules
from xpdist.core.registry import Registry
from xpdist.core.rules import open_mapping

OPTIMIZERS: Registry[type] = Registry("optimizer")
TRAINERS: Registry[type] = Registry("trainer")


def _positive(key: str):
    return rules.above(0, f"Set {key} to a positive value.")


_POSITIVE_LR = _positive("optimizer.learning_rate")
# Clipping and weight decay: null turns them off, a negative value means nothing.
_NONE_OR_MORE = rules.at_least(0, "Use null for none.")
# A decay rate of a moving average: 1 would never move, and Adam's bias correction divides by 1 - beta.
_DECAY = rules.rule(lambda beta: 0 <= beta < 1, "must be 0 or more and below 1")
_DISABLED_AT_0 = rules.at_least(0, "Use 0 to disable.")


class LrScaling(Enum):
    # The learning rate as configured, whatever the global batch.
    none = 0
    # learning_rate x global_batch / reference_batch_size.
    linear = 1
    # learning_rate x sqrt(global_batch / reference_batch_size).
    sqrt = 2
    # Looked up in optimizer.lr_table by global batch size (the guide's LEARNING_RATES_BY_BATCH_SIZE).
    table = 3


class Precision(Enum):
    # Every variable and computation in float32.
    float32 = 0
    # float16 computations, float32 variables, dynamic loss scaling (GPUs with tensor cores).
    mixed_float16 = 1
    # bfloat16 computations, float32 variables, no loss scaling needed (TPUs, recent GPUs and CPUs).
    mixed_bfloat16 = 2


# ---- optimizer -----------------------------------------------------------------------------

@dataclass
class OptimizerBase:
    # Fixed by each option: choose another with optimizer=NAME.
    name: str = MISSING
    # Base learning rate, before optimizer.lr_scaling.
    learning_rate: float = field(default=0.01, metadata=_POSITIVE_LR)
    # How the learning rate follows the global batch: none, linear, sqrt or table.
    lr_scaling: LrScaling = LrScaling.none
    # lr_scaling=linear/sqrt: the batch size learning_rate was tuned for (null: the
    # per-replica batch size, so the rate scales with the number of replicas).
    reference_batch_size: Optional[int] = field(default=None, metadata=rules.at_least(1))
    # lr_scaling=table: global batch size -> learning rate.
    lr_table: Dict[int, float] = field(default_factory=dict)
    # Clip the gradients so that their global norm is at most this (null: no clipping).
    global_clipnorm: Optional[float] = field(default=None, metadata=_NONE_OR_MORE)
    # Clip each gradient to this norm (null: no clipping).
    clipnorm: Optional[float] = field(default=None, metadata=_NONE_OR_MORE)
    # Clip each gradient's values to [-clipvalue, clipvalue] (null: no clipping).
    clipvalue: Optional[float] = field(default=None, metadata=_NONE_OR_MORE)
    # Decoupled weight decay per step, as a fraction of the learning rate (null: none).
    weight_decay: Optional[float] = field(default=None, metadata=_NONE_OR_MORE)
    # Keep an exponential moving average of the weights and use it as the final weights.
    use_ema: bool = False
    # Apply the summed gradients of this many steps at once (null: every step; Keras 3 only).
    gradient_accumulation_steps: Optional[int] = field(default=None, metadata=rules.at_least(1, "Use null for none."))


@OPTIMIZERS.register_schema
@dataclass
class SgdOptimizer(OptimizerBase):
    name: str = "sgd"
    # Momentum.
    momentum: float = field(default=0.0, metadata=rules.fraction())


@OPTIMIZERS.register_schema
@dataclass
class AdamOptimizer(OptimizerBase):
    name: str = "adam"
    learning_rate: float = field(default=0.001, metadata=_POSITIVE_LR)


@dataclass
class MomentsOptimizer(OptimizerBase):
    learning_rate: float = field(default=0.001, metadata=_POSITIVE_LR)
    # Decay rate of the first moment estimates.
    beta_1: float = field(default=0.9, metadata=_DECAY)
    # Decay rate of the second moment estimates.
    beta_2: float = field(default=0.999, metadata=_DECAY)


@OPTIMIZERS.register_schema
@dataclass
class AdamWOptimizer(MomentsOptimizer):
    name: str = "adamw"
    weight_decay: Optional[float] = field(default=0.004, metadata=_NONE_OR_MORE)
    # Added to the denominator for numerical stability.
    epsilon: float = field(default=1e-7, metadata=rules.at_least(0))


@OPTIMIZERS.register_schema
@dataclass
class LambOptimizer(MomentsOptimizer):
    name: str = "lamb"
    # Added to the denominator for numerical stability.
    epsilon: float = field(default=1e-6, metadata=rules.at_least(0))


@OPTIMIZERS.register_schema
@dataclass
class LionOptimizer(MomentsOptimizer):
    name: str = "lion"
    learning_rate: float = field(default=0.0001, metadata=_POSITIVE_LR)
    beta_2: float = field(default=0.99, metadata=_DECAY)


@OPTIMIZERS.register_schema
@dataclass
class RmspropOptimizer(OptimizerBase):
    name: str = "rmsprop"
    learning_rate: float = field(default=0.001, metadata=_POSITIVE_LR)
    # Decay rate of the moving average of squared gradients.
    rho: float = field(default=0.9, metadata=_DECAY)
    # Momentum.
    momentum: float = field(default=0.0, metadata=rules.fraction())
    # Normalize by the gradients' estimated variance rather than their second moment.
    centered: bool = False


@OPTIMIZERS.register_schema
@dataclass
class AdagradOptimizer(OptimizerBase):
    name: str = "adagrad"
    learning_rate: float = field(default=0.001, metadata=_POSITIVE_LR)
    # Starting value of the per-parameter accumulators.
    initial_accumulator_value: float = field(default=0.1, metadata=rules.at_least(0))


@OPTIMIZERS.register_schema
@dataclass
class CustomOptimizer(OptimizerBase):
    name: str = "custom"
    learning_rate: float = field(default=0.001, metadata=_POSITIVE_LR)
    # Dotted path of a Keras optimizer class, called with learning_rate (the schedule, if
    # any), the shared keys that are set, and `kwargs`; a `keras.` path is taken from the
    # run's Keras (Keras 3 or tf-keras).
    _target_: str = "keras.optimizers.Adamax"
    # Keyword arguments for the class. Add one with optimizer.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)


# ---- trainer -------------------------------------------------------------------------------

@dataclass
class TrainerBase:
    # Fixed by each option: choose another with trainer=NAME.
    name: str = MISSING
    # Passes over the training data.
    epochs: int = field(default=2, metadata=_positive("trainer.epochs"))
    # Steps per epoch (null: as many whole global batches as the training data holds).
    steps_per_epoch: Optional[int] = field(default=None, metadata=_positive("trainer.steps_per_epoch"))
    # Training steps inside one tf.function call (Keras' steps_per_execution under fit).
    # null (auto): on one replica (strategy default or one_device) with a Dense-only model
    # (linear, mlp), whose steps are mostly per-call overhead, the largest divisor of the
    # steps per epoch up to 32; else 1 (measured on CPU: it made the guide's linear model
    # about 3x faster and the cnn slower). Batch-level callbacks and
    # trainer.log_every_n_steps then see one batch per execution.
    steps_per_execution: Optional[int] = field(default=None, metadata=_positive("trainer.steps_per_execution"))
    # Keras mixed-precision policy, set before the model is built; the model's output stays
    # float32. mixed_float16 scales the loss (see docs/performance.md for which to choose).
    precision: Precision = Precision.float32
    # Compile the train step with XLA: auto (Keras' choice under fit, off under ctl), true
    # or false. Slower than the default for small models on CPU.
    jit_compile: str = "auto"
    # Keep the last K checkpoints written at the end of each epoch (0 disables them).
    keep_checkpoints: int = field(default=2, metadata=_DISABLED_AT_0)
    # Log loss to MLflow every N steps as well as every epoch (0: epochs only). Buffered
    # and written in batches, never one blocking call per step.
    log_every_n_steps: int = field(default=0, metadata=_DISABLED_AT_0)
    # Print a progress bar.
    progress: bool = True
    # Keras metrics recorded each epoch, for training and (as val_NAME) validation: Keras
    # identifiers such as [auc, binary_accuracy, precision], or {_target_: CLASS, KEY: VALUE}
    # entries. Empty: mae (regression) or accuracy (classification).
    metrics: List[Any] = field(default_factory=list)
    # [first, last]: trace these training steps (counted from 0 over the run; under fit with
    # steps_per_execution above 1, the calls that hold them) with TensorFlow's profiler, in
    # every task that trains; the epochs traced in are left out of steady_examples_per_sec.
    # The trace is logged as the run's profile/ artifact, and the chief's split of their time
    # (input wait, communication, compute) as metrics. Empty: no trace.
    profile_steps: List[int] = field(default_factory=list)


@TRAINERS.register_schema
@dataclass
class FitTrainer(TrainerBase):
    name: str = "fit"


@TRAINERS.register_schema
@dataclass
class CtlTrainer(TrainerBase):
    name: str = "ctl"
