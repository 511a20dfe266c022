"""A run continued at another size (tracking.resume): the record the driver writes into the
plan and the task reads (core/plan.py at_size works out the batch and learning rate)."""

from __future__ import annotations

import dataclasses

from xpdist.core.errors import ConfigError

# tracking.resize_keep's values: what a resized run keeps.
KEEP_GLOBAL, KEEP_PER_REPLICA = "global_batch", "per_replica_batch"


@dataclasses.dataclass(frozen=True)
class Resize:
    """A run continued at another size (tracking.resume): what it continues from, and how its
    learning rate carries on. Written by the driver into the plan, read by the task.

    The optimizer's step counter (`iterations`) is restored from the checkpoint; where the
    global batch changed, so did the steps of an epoch, and the schedule is read at
    `iterations + lr_step_offset`, the step the run would have reached at the new size.
    """

    # The checkpoint's epoch: training continues at the next one.
    at_epoch: int
    # The size before: replicas, batches, and the plan's (peak) learning rate.
    from_replicas: int
    from_global_batch: int
    from_per_replica_batch: int
    from_learning_rate: float
    # tracking.resize_keep: global_batch or per_replica_batch.
    keep: str
    # Added to the optimizer's step counter to read the schedule (carried over every resize).
    lr_step_offset: int = 0
    # The warmup again: from warmup_from_rate (the rate of the checkpoint's last step) to the
    # schedule's rate over warmup_steps optimizer steps, starting at step warmup_start.
    warmup_start: int = 0
    warmup_steps: int = 0
    warmup_from_rate: float = 0.0


def warmup_steps(cfg, steps_per_epoch: int) -> int:
    """The warmup after a resize that changed the learning rate: tracking.resize_warmup_steps,
    else the schedule's own warmup at the new steps per epoch, else one epoch.

    Raises:
        ConfigError: tracking.resize_warmup_steps below 0.
    """
    steps = cfg.tracking.resize_warmup_steps
    if steps is not None:
        if steps < 0:
            raise ConfigError("tracking.resize_warmup_steps", steps, "a number of optimizer steps must be 0 or more",
                              "Use 0 (the new rate at once) or a number of steps, e.g. 100.")
        return int(steps)
    epochs = float(cfg.schedule.get("warmup_epochs", 0.0) or 0.0)
    return max(1, int(round(epochs * steps_per_epoch))) if epochs > 0 else steps_per_epoch
