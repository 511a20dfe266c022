"""The `schedule` options: Keras learning-rate schedules, lengths in epochs turned into steps.

The peak learning rate is the plan's (after optimizer.lr_scaling). A warmup, where the
option has one, rises linearly from schedule.warmup_start to that rate over warmup_epochs,
then hands over to the decay, whose own steps count from the end of the warmup (piecewise
boundaries count from the start of training). One schedule class wraps the warmup for Keras
3 and tf-keras alike, so fit and the custom loops see the same rates step for step.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from xpdist.core.plan import Plan
from xpdist.core.registry import Registry

# schedule option -> builder(keras, options, peak learning rate, steps per epoch, decay steps).
SCHEDULES: Registry[Callable[..., Any]] = Registry("schedule")


def steps(epochs: float, steps_per_epoch: int) -> int:
    """Epochs (fractions allowed) as optimizer steps, at least one."""
    return max(1, int(round(epochs * steps_per_epoch)))


@SCHEDULES.register("constant")
def _constant(keras, opt, peak: float, spe: int, decay_steps: int):
    return peak


@SCHEDULES.register("cosine")
def _cosine(keras, opt, peak: float, spe: int, decay_steps: int):
    return keras.optimizers.schedules.CosineDecay(peak, decay_steps=decay_steps, alpha=opt.alpha)


@SCHEDULES.register("piecewise")
def _piecewise(keras, opt, peak: float, spe: int, decay_steps: int):
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[steps(b, spe) for b in opt.boundaries], values=[peak * f for f in opt.factors])


@SCHEDULES.register("exponential")
def _exponential(keras, opt, peak: float, spe: int, decay_steps: int):
    return keras.optimizers.schedules.ExponentialDecay(peak, decay_steps=steps(opt.decay_epochs, spe),
                                                       decay_rate=opt.decay_rate, staircase=opt.staircase)


@SCHEDULES.register("polynomial")
def _polynomial(keras, opt, peak: float, spe: int, decay_steps: int):
    return keras.optimizers.schedules.PolynomialDecay(peak, decay_steps=decay_steps,
                                                      end_learning_rate=opt.end_learning_rate, power=opt.power)


def build(keras, cfg, plan: Plan):
    """The optimizer's learning_rate: the plan's rate (schedule=constant) or a schedule.

    Raises:
        KeyError: an unknown schedule option.
    """
    opt, spe = cfg.schedule, plan.steps_per_epoch
    warmup_epochs = float(opt.get("warmup_epochs", 0.0))
    warmup = steps(warmup_epochs, spe) if warmup_epochs > 0 else 0
    decay_epochs = opt.get("decay_epochs")
    decay_steps = steps(decay_epochs, spe) if decay_epochs else max(1, cfg.trainer.epochs * spe - warmup)
    after = SCHEDULES.get(opt.name)(keras, opt, plan.learning_rate, spe, decay_steps)
    if not warmup:
        return after
    # Piecewise boundaries are epochs of training; the decays start when the warmup ends.
    offset = 0 if opt.name == "piecewise" else warmup
    return _warmup_class(keras)(float(opt.warmup_start), plan.learning_rate, warmup, after, offset)


_WARMUP_CLASSES: Dict[str, type] = {}


def _warmup_class(keras) -> type:
    """LinearWarmup for this Keras (each flavour has its own LearningRateSchedule base)."""
    if keras.__name__ in _WARMUP_CLASSES:
        return _WARMUP_CLASSES[keras.__name__]
    import tensorflow as tf

    class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
        """warmup_start -> peak linearly over warmup_steps, then after(step - offset)."""

        def __init__(self, warmup_start, peak, warmup_steps, after, offset):
            super().__init__()
            self.warmup_start, self.peak, self.warmup_steps = warmup_start, peak, warmup_steps
            self.after, self.offset = after, offset

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            rising = self.warmup_start + (self.peak - self.warmup_start) * step / float(self.warmup_steps)
            later = self.after(tf.maximum(step - self.offset, 0.0)) if callable(self.after) else self.after
            return tf.where(step < self.warmup_steps, rising, tf.cast(later, tf.float32))

        def get_config(self):
            after = self.after
            if callable(after):
                after = keras.optimizers.schedules.serialize(after)
            return {"warmup_start": self.warmup_start, "peak": self.peak, "warmup_steps": self.warmup_steps,
                    "after": after, "offset": self.offset}

    _WARMUP_CLASSES[keras.__name__] = LinearWarmup
    return LinearWarmup


def current_rate(optimizer, schedule=None) -> float:
    """The learning rate of the optimizer's last step.

    Args:
        schedule: the schedule the optimizer was built with, if any. It is evaluated here at the
            last step taken: Keras 3's `optimizer.learning_rate` gives the next step's rate and
            tf-keras' the last one's, so neither is asked. Without a schedule the optimizer's
            own rate is read (a callback such as ReduceLROnPlateau may have changed it).
    """
    if callable(schedule):
        rate = schedule(max(int(optimizer.iterations.numpy()) - 1, 0))
    else:
        rate = optimizer.learning_rate
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)
