"""What both trainers share: the context they train in, epoch records and checkpoints."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.plan import Plan
from xpdist.core.protocol.jobdir import JobDir
from xpdist.core.protocol.taskenv import LAUNCHED_AT_ENV
from xpdist.task.measure import profile
from xpdist.task.train.schedules import current_rate


@dataclass
class TrainContext:
    tf: Any
    keras: Any
    cfg: Any
    plan: Plan
    strategy: Any
    model: Any
    optimizer: Any
    arrays: Any
    job: JobDir
    cluster: ClusterEnv
    logger: Optional[Any]  # jobdir.MetricFile on the chief, None elsewhere
    history: List[Dict[str, float]] = field(default_factory=list)
    # The epoch (1-based) of each entry of history.
    history_epochs: List[int] = field(default_factory=list)
    # Epochs already in the MLflow run: a restarted cluster retrains from its last recovery
    # checkpoint and may redo an epoch it had logged; that epoch is not logged twice.
    logged_epochs: Set[int] = field(default_factory=set)
    # time.time() when the first training step (or execution of steps) had finished.
    first_step_at: Optional[float] = None
    # The last epoch recorded (1-based): below trainer.epochs when a callback stopped training.
    last_epoch: Optional[int] = None
    # The learning-rate schedule the optimizer was built with (None: a constant rate).
    schedule: Optional[Any] = None
    # A task of this job may start again in its job directory (JobSpec.restartable).
    restartable: bool = True
    # `python -m xpdist verify`'s recorder (xpdist/task/verify_recorder.py), None in a training.
    verify: Optional[Any] = None

    def step_done(self) -> None:
        """Called after every training call; remembers when the first one finished."""
        if self.first_step_at is None:
            self.first_step_at = time.time()

    @property
    def chief(self) -> bool:
        return self.cluster.is_chief

    @property
    def checkpoint_dir(self) -> Path:
        """The chief's checkpoints are kept; other workers write theirs aside (TF needs every worker to save)."""
        return self.job.checkpoints if self.chief else self.job.worker_checkpoints(self.cluster.file_name)


def record_epoch(ctx: TrainContext, epoch: int, logs: Dict[str, float], train_s: float, epoch_s: float,
                 steps: int) -> Dict[str, float]:
    """Adds timing and the learning rate to an epoch's metrics, logs them to MLflow (step = epoch
    number) and keeps them.

    Args:
        train_s: seconds spent on the epoch's training steps (examples_per_sec counts these).
        epoch_s: seconds for the whole epoch, validation included (epoch_time_s).
    """
    metrics = {k: float(v) for k, v in logs.items()}
    metrics["epoch_time_s"] = epoch_s
    metrics["examples_per_sec"] = steps * ctx.plan.global_batch_size / train_s if train_s > 0 else 0.0
    metrics["learning_rate"] = current_rate(ctx.optimizer, ctx.schedule)  # the epoch's last step's
    if ctx.plan.resize is not None:  # a run resumed at another size: its chart shows the change
        metrics["num_replicas"] = float(ctx.plan.num_replicas)
    ctx.last_epoch = epoch
    if ctx.logger is not None and epoch not in ctx.logged_epochs:
        ctx.logger.add(metrics, step=epoch)
        ctx.logger.flush()
        ctx.logged_epochs.add(epoch)
    ctx.history.append(metrics)
    ctx.history_epochs.append(epoch)
    return metrics


# Training iterators, held until the process ends (see keep_iterators). A module's list, not the
# TrainContext's: the context is freed when runner.run returns, and the iterators with it.
_KEPT_ITERATORS: List[Any] = []


def keep_iterators(distributed):
    """Makes every iterator of a distributed dataset live as long as the task process.

    Destroying a strategy's multi-device iterator joins the tf.data autotuning thread of each
    per-device iterator, which sleeps between optimizations with a period that doubles up to
    60 s and is not woken by the teardown: the task stalled for up to a minute after the last
    epoch under mirrored, longer the longer it had trained (measured: 58.9 s after 24 epochs;
    0.1 s with this). The per-device datasets take default options, so turning autotuning off
    in the input pipeline does not reach them. The task ends with os._exit, so an iterator
    still referenced here is never destroyed. Model.fit iterates the dataset itself, hence a
    subclass that records the iterators it hands out (isinstance checks still hold).
    """
    base = type(distributed)

    def __iter__(self):
        iterator = base.__iter__(self)
        _KEPT_ITERATORS.append(iterator)
        return iterator

    distributed.__class__ = type(base.__name__, (base,), {"__iter__": __iter__})
    return distributed


def build_optimizer(ctx: TrainContext) -> None:
    """Creates the optimizer's variables (iterations, Adam's moments, momentum) now, eagerly,
    under the strategy's scope, before any tf.function traces a training step.

    Keras 3 builds an optimizer on its first apply_gradients. In a custom loop that is inside
    the traced step, in the replica context: under MirroredStrategy the new variables'
    initializers cannot be lifted out of the function, so tf.function falls back to running
    them under a tf.cond ("fn_with_cond"), whose graph fails with "You must feed a value for
    placeholder tensor 'cond/else/_1/cond/Placeholder...' with dtype int32"
    (keras-team/keras#23085; fixed in Keras by keras-team/keras#23087, which Keras 3.15.1
    lacks). Model.fit builds the optimizer before tracing itself; optimizers with no slot
    variables (SGD without momentum) never hit it. Building twice is a no-op, and a
    checkpoint restored later fills the variables in place.
    """
    variables = ctx.model.trainable_variables
    if not variables:  # an unbuilt custom model: the optimizer is built at its first step
        return
    with ctx.strategy.scope():
        ctx.optimizer.build(variables)


def finalize_weights(ctx: TrainContext) -> None:
    """optimizer.use_ema: the moving averages become the weights, as Model.fit does at its end."""
    if ctx.cfg.optimizer.use_ema:
        with ctx.strategy.scope():
            ctx.optimizer.finalize_variable_values(ctx.model.trainable_variables)


def checkpoint_manager(ctx: TrainContext, **extra):
    """A CheckpointManager keeping the last trainer.keep_checkpoints checkpoints (None if 0)."""
    keep = int(ctx.cfg.trainer.keep_checkpoints)
    checkpoint = ctx.tf.train.Checkpoint(model=ctx.model, optimizer=ctx.optimizer, **extra)
    if keep == 0:
        return checkpoint, None
    manager = ctx.tf.train.CheckpointManager(checkpoint, str(ctx.checkpoint_dir), max_to_keep=keep)
    return checkpoint, manager


def restore_latest(ctx: TrainContext, checkpoint) -> None:
    """Restores the chief's latest checkpoint, if any (a restarted cluster resumes from it).

    Every worker reads the chief's directory, not its own: a worker killed before it saved
    its copy of the last epoch would otherwise resume one epoch behind the others.
    """
    latest = ctx.tf.train.latest_checkpoint(str(ctx.job.checkpoints))
    if latest:
        checkpoint.restore(latest)


def resume_epoch(ctx: TrainContext) -> int:
    """trainer=fit with tracking.resume: restores the latest checkpoint the driver put in the
    job directory; returns its epoch (0: none). Without tracking.resume Model.fit does not
    restore here: a restarted localhost cluster resumes through BackupAndRestore instead.
    """
    if not ctx.cfg.tracking.resume:
        return 0
    latest = ctx.tf.train.latest_checkpoint(str(ctx.job.checkpoints))
    if not latest:
        return 0
    ctx.tf.train.Checkpoint(model=ctx.model, optimizer=ctx.optimizer).restore(latest).expect_partial()
    return int(latest.rsplit("-", 1)[1])


def final_metrics(ctx: TrainContext) -> Dict[str, float]:
    if not ctx.history:
        return {}
    last = dict(ctx.history[-1])
    last["steady_examples_per_sec"] = steady_rate(ctx)
    if ctx.first_step_at is not None:
        # Start-up cost as a user feels it: from the task process's start to one finished step.
        last["first_step_s"] = ctx.first_step_at - process_started_at()
    return last


def steady_rate(ctx: TrainContext) -> float:
    """The median examples/sec of the epochs after the first (which holds the step function's
    tracing), without those trainer.profile_steps traced (profile.traced_epochs): all epochs
    after the first if that leaves none, the only epoch's in a run of one."""
    traced = profile.traced_epochs(ctx.cfg, ctx.plan.steps_per_epoch)
    later = list(zip(ctx.history_epochs, ctx.history))[1:]
    rates = (sorted(h["examples_per_sec"] for epoch, h in later if epoch not in traced)
             or sorted(h["examples_per_sec"] for _, h in later) or [ctx.history[-1]["examples_per_sec"]])
    return rates[len(rates) // 2]


def process_started_at() -> float:
    """When this process started, as time.time(): from its launcher, else the kernel's process table."""
    if os.environ.get(LAUNCHED_AT_ENV):
        return float(os.environ[LAUNCHED_AT_ENV])
    import psutil

    return psutil.Process().create_time()
