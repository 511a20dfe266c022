"""A run resumed at another size (core/plan.py Resize), task side: its learning rate.

The checkpoint restores the optimizer's step counter as the run left it. Where the global
batch changed (tracking.resize_keep=per_replica_batch), an epoch has another number of steps,
so the schedule is read at the step the run would have reached at the new size
(`lr_step_offset`), and the new peak rate is reached by a linear warmup from the rate of the
checkpoint's last step, as Goyal et al. (2017) warm up to a rate scaled for a larger batch.
"""

from __future__ import annotations

from typing import Any, Dict

from xpdist.core.plan import KEEP_PER_REPLICA, Plan

_CLASSES: Dict[str, type] = {}


def learning_rate(keras, plan: Plan, rate: Any) -> Any:
    """The optimizer's learning_rate for this plan: `rate` (a number or a schedule) as it is,
    or, after a resize that changed the steps or the rate, a schedule that carries it on.

    Always a schedule after such a resize, even for a constant rate: a constant rate is an
    optimizer variable, which the checkpoint would restore to the old rate.
    """
    resize = plan.resize
    if resize is None or not (resize.lr_step_offset or resize.warmup_steps or resize.keep == KEEP_PER_REPLICA):
        return rate
    return _resized_class(keras)(rate, resize.lr_step_offset, resize.warmup_start, resize.warmup_steps,
                                 resize.warmup_from_rate)


def _resized_class(keras) -> type:
    """ResizedRate for this Keras (each flavour has its own LearningRateSchedule base)."""
    if keras.__name__ in _CLASSES:
        return _CLASSES[keras.__name__]
    import tensorflow as tf

    class ResizedRate(keras.optimizers.schedules.LearningRateSchedule):
        """after(step + offset); from warmup_from over warmup_steps steps from warmup_start."""

        def __init__(self, after, offset, warmup_start, warmup_steps, warmup_from):
            super().__init__()
            self.after, self.offset = after, offset
            self.warmup_start, self.warmup_steps, self.warmup_from = warmup_start, warmup_steps, warmup_from

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            target = self.after(step + float(self.offset)) if callable(self.after) else self.after
            target = tf.cast(target, tf.float32)
            if not self.warmup_steps:
                return target
            done = tf.clip_by_value((step - float(self.warmup_start)) / float(self.warmup_steps), 0.0, 1.0)
            return self.warmup_from + (target - self.warmup_from) * done

        def get_config(self):
            after = self.after
            if callable(after):
                after = keras.optimizers.schedules.serialize(after)
            return {"after": after, "offset": self.offset, "warmup_start": self.warmup_start,
                    "warmup_steps": self.warmup_steps, "warmup_from": self.warmup_from}

    _CLASSES[keras.__name__] = ResizedRate
    return ResizedRate
