"""trainer=fit: Keras Model.fit with MLflow epoch logging and checkpoints as callbacks."""

from __future__ import annotations

import time
from typing import Dict

from xpdist.core import strategies
from xpdist.task.data import global_batches, worker_batches
from xpdist.task.measure import profile
from xpdist.task.train import callbacks as user_callbacks
from xpdist.task.train.losses import build_loss, build_metrics
from xpdist.task.train.precision import jit_compile
from xpdist.task.train.common import (TrainContext, checkpoint_manager, final_metrics, keep_iterators, record_epoch,
                                      resume_epoch)


def logs_stay_tensors(callback):
    """Marks a callback whose batch hooks need no Python number from the logs, so that Keras
    does not wait for the device after every step on its account.

    Neither Keras has a public switch for it. tf-keras' CallbackList passes the logs as
    tensors only when every callback has `_supports_tf_logs` (tf_keras/src/callbacks.py), else
    it turns them into numbers after every step. Keras 3's runs batch hooks on a worker thread
    only when every callback that has one says `async_safe` (keras/src/callbacks/
    callback_list.py), on a backend it deems thread-safe: not TensorFlow in Keras 3.15.1, where
    the mark changes nothing yet. Both attributes are set here and nowhere else, and
    tests/integration/test_kept_iterators.py fails on a Keras that no longer reads them.
    """
    callback.async_safe = True
    callback._supports_tf_logs = True
    return callback


def _callbacks(ctx: TrainContext):
    keras = ctx.keras
    steps = ctx.plan.steps_per_epoch
    every = int(ctx.cfg.trainer.log_every_n_steps)

    class MlflowEpochs(keras.callbacks.Callback):
        """Times each epoch's training and logs every epoch's metrics in one batch."""

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch
            self._start = time.perf_counter()
            self._train_s = None

        def on_test_begin(self, logs=None):
            if self._train_s is None:
                self._train_s = time.perf_counter() - self._start

        def on_epoch_end(self, epoch, logs=None):
            total = time.perf_counter() - self._start
            train_s = self._train_s or total
            record_epoch(ctx, epoch + 1, logs or {}, train_s, total, steps)

    # The batch hooks below need no number of the logs but batch_loss every N steps: see
    # logs_stay_tensors.
    class FirstStep(keras.callbacks.Callback):
        """Notes when the first training call has ended (the first_step_s metric)."""

        def __init__(self):
            super().__init__()
            logs_stay_tensors(self)

        def on_train_batch_end(self, batch, logs=None):
            ctx.step_done()

    class StepLoss(MlflowEpochs):
        """Buffers batch_loss every trainer.log_every_n_steps steps (written at epoch end)."""

        def __init__(self):
            super().__init__()
            logs_stay_tensors(self)  # float() below waits for the device every N steps only

        def on_train_batch_end(self, batch, logs=None):
            if ctx.logger is not None:
                step = self._epoch * steps + batch + 1
                if step % every == 0:
                    ctx.logger.add({"batch_loss": float(logs["loss"])}, step=step)

    class Checkpoints(keras.callbacks.Callback):
        def __init__(self, manager):
            super().__init__()
            self._manager = manager

        def on_epoch_end(self, epoch, logs=None):
            self._manager.save(checkpoint_number=epoch + 1)

    callbacks = [StepLoss() if every else MlflowEpochs()]
    if ctx.verify is not None:  # `python -m xpdist verify`: before the user's callbacks can stop training
        callbacks.append(ctx.verify.fit_callback())
    # The chosen callbacks, after the epoch is recorded: its learning_rate is the one it trained with.
    callbacks += user_callbacks.build(keras, ctx.cfg)
    if not strategies.get(ctx.plan.strategy).needs.coordinator:  # its Model.fit refuses batch-level callbacks
        callbacks.append(FirstStep())
    _, manager = checkpoint_manager(ctx)
    if manager is not None:
        callbacks.append(Checkpoints(manager))
    traced = profile.window(ctx)
    if traced is not None:  # profiled runs only; its batch hooks read no logs (see logs_stay_tensors)
        callbacks.append(logs_stay_tensors(profile.fit_callback(ctx.tf, keras, *traced, ctx.plan.steps_per_epoch,
                                                                ctx.plan.steps_per_execution)))
    if ctx.cluster.in_cluster and ctx.restartable:
        # Last, so an epoch is in MLflow before its backup: a restart then never leaves a
        # gap in the run's metrics (a redone epoch is not logged twice, see record_epoch).
        # Where no task can start again (cluster=localhost without max_restarts) there is no
        # backup: it was a second checkpoint every epoch, 0.05 s of a 0.13-s parameter_server
        # epoch here, read from every parameter server.
        callbacks.append(keras.callbacks.BackupAndRestore(backup_dir=str(ctx.job.backup)))
    return callbacks


def _jit_compile(ctx: TrainContext):
    """Keras 3 takes "auto"; tf-keras takes None for its own default (off)."""
    chosen = jit_compile(ctx.cfg)
    if chosen is None:
        return "auto" if ctx.plan.keras == "keras3" else None
    return chosen


def train(ctx: TrainContext) -> Dict[str, float]:

    tf, cfg, plan, arrays = ctx.tf, ctx.cfg, ctx.plan, ctx.arrays
    with ctx.strategy.scope():  # metric variables too: tf-keras refuses metrics made outside it
        ctx.model.compile(optimizer=ctx.optimizer, loss=build_loss(ctx.keras, cfg, arrays.kind),
                          metrics=build_metrics(ctx.keras, cfg, arrays.kind),
                          steps_per_execution=plan.steps_per_execution, jit_compile=_jit_compile(ctx))
    train_ds = global_batches(tf, arrays.x_train, arrays.y_train, cfg, plan, training=True)
    initial_epoch = resume_epoch(ctx)
    strategy_spec = strategies.get(plan.strategy)
    if initial_epoch and not strategy_spec.needs.coordinator and isinstance(train_ds, tf.data.Dataset):
        # The batches of the epochs done, skipped: a resumed run sees the data it would have seen.
        # (A custom source comes already distributed from its function and restarts its stream.)
        train_ds = train_ds.skip(initial_epoch * plan.steps_per_epoch)
    if strategy_spec.needs.coordinator:
        # tf-keras' Model.fit under ParameterServerStrategy takes a DatasetCreator: each
        # worker builds its own pipeline (the coordinator makes per-worker datasets of it).
        train_ds = ctx.keras.utils.experimental.DatasetCreator(
            lambda _context: worker_batches(tf, arrays.x_train, arrays.y_train, cfg, plan))
    elif strategy_spec.fit_distributes_dataset:
        # Distributed here, as Model.fit would (tf-keras' and Keras 3's data adapters call the
        # same strategy.experimental_distribute_dataset, with its auto-sharding across workers),
        # so that its iterator outlives fit: see keep_iterators.
        if isinstance(train_ds, tf.data.Dataset):  # a custom source's batches come distributed
            train_ds = ctx.strategy.experimental_distribute_dataset(train_ds)
        train_ds = keep_iterators(train_ds)
    elif isinstance(train_ds, tf.data.Dataset):
        # Model.fit iterates it itself (strategy=default): its iterator is kept too, or its
        # destruction waits for tf.data's autotuning thread (fit returned 2-3 s after the last
        # epoch in about half the runs; 0.02-0.06 s kept).
        train_ds = keep_iterators(train_ds)
    val_ds = None
    if plan.validation_steps:
        val_ds = global_batches(tf, arrays.x_val, arrays.y_val, cfg, plan, training=False)
    ctx.model.fit(train_ds, epochs=cfg.trainer.epochs, steps_per_epoch=plan.steps_per_epoch,
                  validation_data=val_ds, validation_steps=plan.validation_steps or None,
                  callbacks=_callbacks(ctx), shuffle=False, verbose=2 if cfg.trainer.progress else 0,
                  initial_epoch=initial_epoch)
    return final_metrics(ctx)
