"""trainer=ctl under parameter_server: a custom loop driven by a ClusterCoordinator.

The coordinator (this process, the chief) schedules training steps on whichever worker is
free, with per-worker datasets; variables live on the parameter servers. A worker that dies
mid-training has its steps rescheduled on the others (ClusterCoordinator's fault tolerance).
Validation runs on the coordinator, which reads the variables from the parameter servers.
"""

from __future__ import annotations

import contextlib
import time
from typing import Dict

from xpdist.task.data import global_batches, worker_batches
from xpdist.task.train.callbacks import EpochHooks
from xpdist.task.train.losses import build_loss, build_metrics
from xpdist.task.train.precision import jit_compile, scaled_loss, unscaled_gradients
from xpdist.task.train.common import (TrainContext, build_optimizer, checkpoint_manager, final_metrics,
                                      finalize_weights, record_epoch, restore_latest)


def train(ctx: TrainContext) -> Dict[str, float]:
    tf, cfg, plan, arrays, strategy = ctx.tf, ctx.cfg, ctx.plan, ctx.arrays, ctx.strategy
    model, optimizer = ctx.model, ctx.optimizer
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    loss_fn = build_loss(ctx.keras, cfg, arrays.kind, reduction="none")
    with strategy.scope():  # on the parameter servers: every worker's steps add to them
        metrics = build_metrics(ctx.keras, cfg, arrays.kind)
    val_metrics = build_metrics(ctx.keras, cfg, arrays.kind)  # validation runs on the coordinator
    global_batch = plan.global_batch_size
    build_optimizer(ctx)  # slot variables must exist before steps run on workers

    def batch_loss(y, outputs):
        loss = tf.nn.compute_average_loss(loss_fn(y, outputs), global_batch_size=global_batch)
        if model.losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        return loss

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            loss = batch_loss(y, outputs)
            scaled = scaled_loss(optimizer, loss)
        grads = unscaled_gradients(optimizer, tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        for metric in metrics:
            metric.update_state(y, outputs)
        return loss

    step = tf.function(replica_step, jit_compile=True) if jit_compile(cfg) else replica_step  # as in ctl

    @tf.function
    def train_step(iterator):
        loss = strategy.run(step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    @tf.function
    def eval_step(x, y):
        outputs = model(x, training=False)
        for metric in val_metrics:
            metric.update_state(y, outputs)
        return batch_loss(y, outputs)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(
            lambda _context: worker_batches(tf, arrays.x_train, arrays.y_train, cfg, plan))

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    val_ds = None
    if plan.validation_steps:
        val_ds = global_batches(tf, arrays.x_val, arrays.y_val, cfg, plan, training=False)
    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")  # on the coordinator
    checkpoint, manager = checkpoint_manager(ctx, epoch=epoch_var)
    if manager is not None:  # resume after a cluster restart
        restore_latest(ctx, checkpoint)
    steps = plan.steps_per_epoch
    hooks = EpochHooks(ctx)
    hooks.train_begin()
    for epoch in range(int(epoch_var.numpy()), cfg.trainer.epochs):
        hooks.epoch_begin(epoch)
        for metric in metrics + val_metrics:
            metric.reset_state()
        start = time.perf_counter()
        results = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(steps)]
        with contextlib.suppress(tf.errors.UnavailableError):  # done, its value lost with its worker (_fetched)
            results[0].fetch()  # blocks until the first step is done: the first_step_s metric
        ctx.step_done()
        coordinator.join()
        train_s = time.perf_counter() - start
        fetched = _fetched(tf, results)
        logs = {"loss": sum(float(l) for l in fetched) / len(fetched),
                **{m.name: float(m.result()) for m in metrics}}
        if val_ds is not None:
            val = [float(eval_step(x, y)) for x, y in val_ds]
            logs["val_loss"] = sum(val) / len(val)
            logs.update({f"val_{m.name}": float(m.result()) for m in val_metrics})
        record_epoch(ctx, epoch + 1, logs, train_s, time.perf_counter() - start, steps)  # before the save: no gap
        epoch_var.assign(epoch + 1)
        if manager is not None:
            manager.save(checkpoint_number=epoch + 1)
        shown = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
        print(f"Epoch {epoch + 1}/{cfg.trainer.epochs} - {train_s:.2f}s - {shown}", flush=True)
        if hooks.epoch_end(epoch, logs):
            break
    hooks.train_end()
    finalize_weights(ctx)
    return final_metrics(ctx)


def _fetched(tf, results):
    """The values of finished steps, each copied from the worker that ran it.

    ClusterCoordinator runs a step again when its worker fails while running it, but not when
    the worker is cut off after the step has finished: its update reached the parameter
    servers, its loss stayed on the worker, and copying it fails (UnavailableError). Such steps
    are left out of the epoch's averages; the error is raised only when no step's value is left.
    """
    values, lost = [], None
    for result in results:
        try:
            values.append(result.fetch())
        except tf.errors.UnavailableError as err:
            lost = err
    if not values and lost is not None:
        raise lost
    return values

