"""trainer=ctl: a custom training loop (tf.function + strategy.run).

Per-example losses are averaged over the global batch and regularization losses scaled by
the number of replicas, so the summed gradients equal single-device training's.
"""

from __future__ import annotations

import sys
import time
from typing import Dict

from xpdist.task.data import replica_batches_fn
from xpdist.task.models import loss_and_metrics
from xpdist.task.precision import jit_compile, scaled_loss, unscaled_gradients
from xpdist.task.train.common import (TrainContext, build_optimizer, checkpoint_manager, final_metrics, keep_iterators,
                                      record_epoch, restore_latest)


class _Loop:
    def __init__(self, ctx: TrainContext):
        self.ctx = ctx
        tf, strategy = ctx.tf, ctx.strategy
        spec = loss_and_metrics(ctx.keras, ctx.arrays.kind, reduction="none")
        self.loss_fn = spec["loss"]
        self.metric_name = spec["metrics"][0].name
        self.classification = ctx.arrays.kind == "classification"
        self.global_batch = ctx.plan.global_batch_size
        self.spe = ctx.plan.steps_per_execution
        # As Keras' own train step: XLA compiles the per-replica step, not the function that
        # calls strategy.run (XLA cannot compile a function spanning several devices).
        self.replica_step = self._replica_step
        if jit_compile(ctx.cfg):
            self.replica_step = tf.function(self._replica_step, jit_compile=True)
        self.train_step = tf.function(self._train_steps)
        self.eval_step = tf.function(self._eval_step)
        self.SUM = tf.distribute.ReduceOp.SUM
        self.strategy = strategy

    def _metric_sum(self, y, outputs):
        """Per-replica sum of the metric over the batch (accuracy hits or absolute errors)."""
        tf = self.ctx.tf
        if self.classification:
            predicted = tf.cast(tf.argmax(outputs, axis=-1), y.dtype)
            return tf.reduce_sum(tf.cast(tf.equal(tf.reshape(y, [-1]), predicted), tf.float32))
        return tf.reduce_sum(tf.reduce_mean(tf.abs(tf.cast(y, outputs.dtype) - outputs), axis=-1))

    def _replica_step(self, x, y):
        tf, model = self.ctx.tf, self.ctx.model
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            per_example = self.loss_fn(y, outputs)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = scaled_loss(self.ctx.optimizer, loss)
        grads = unscaled_gradients(self.ctx.optimizer, tape.gradient(scaled, model.trainable_variables))
        self.ctx.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, self._metric_sum(y, outputs)

    def _train_steps(self, iterator, count):
        """Runs `count` steps (a tensor, so one trace serves every count) inside one call."""
        tf = self.ctx.tf
        loss_total = tf.constant(0.0)
        metric_total = tf.constant(0.0)
        for _ in tf.range(count):
            loss, metric = self.strategy.run(self.replica_step, args=next(iterator))
            loss_total += self.strategy.reduce(self.SUM, loss, axis=None)
            metric_total += self.strategy.reduce(self.SUM, metric, axis=None)
        return loss_total, metric_total

    def _eval_step(self, x, y):
        def replica(x, y):
            tf, model = self.ctx.tf, self.ctx.model
            outputs = model(x, training=False)
            loss = tf.nn.compute_average_loss(self.loss_fn(y, outputs), global_batch_size=self.global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            return loss, self._metric_sum(y, outputs)

        loss, metric = self.strategy.run(replica, args=(x, y))
        return self.strategy.reduce(self.SUM, loss, axis=None), self.strategy.reduce(self.SUM, metric, axis=None)


def train(ctx: TrainContext) -> Dict[str, float]:
    tf, cfg, plan, arrays = ctx.tf, ctx.cfg, ctx.plan, ctx.arrays
    build_optimizer(ctx)  # before the step is traced: see build_optimizer
    loop = _Loop(ctx)
    steps = plan.steps_per_epoch
    dataset = keep_iterators(ctx.strategy.distribute_datasets_from_function(
        replica_batches_fn(tf, arrays.x_train, arrays.y_train, cfg, plan, training=True)))
    val_dataset = None
    if plan.validation_steps:
        val_dataset = ctx.strategy.distribute_datasets_from_function(
            replica_batches_fn(tf, arrays.x_val, arrays.y_val, cfg, plan, training=False))
    with ctx.strategy.scope():
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint, manager = checkpoint_manager(ctx, epoch=epoch_var)
    if manager is not None:  # resume after a restart
        restore_latest(ctx, checkpoint)
    iterator = iter(dataset)
    # Skip the batches of completed epochs so a resumed run sees the data it would have seen.
    for _ in range(int(epoch_var.numpy()) * steps):
        next(iterator)
    name = loop.metric_name
    # The bar redraws itself with terminal escapes: on a pipe or in a log file the epoch line below is enough.
    show_bar = cfg.trainer.progress and ctx.chief and sys.stdout.isatty()
    for epoch in range(int(epoch_var.numpy()), cfg.trainer.epochs):
        bar = ctx.keras.utils.Progbar(steps, stateful_metrics=["loss", name]) if show_bar else None
        start = time.perf_counter()
        done, loss_sum, metric_sum = 0, 0.0, 0.0
        while done < steps:
            ran = min(loop.spe, steps - done)
            loss_total, metric_total = loop.train_step(iterator, tf.constant(ran))
            done += ran
            loss_sum += float(loss_total)
            ctx.step_done()
            metric_sum += float(metric_total)
            if ctx.logger is not None and cfg.trainer.log_every_n_steps and done % cfg.trainer.log_every_n_steps < ran:
                ctx.logger.add({"batch_loss": float(loss_total) / ran}, step=epoch * steps + done)
            if bar is not None:
                bar.update(done, [("loss", loss_sum / done), (name, metric_sum / (done * plan.global_batch_size))])
        train_s = time.perf_counter() - start
        logs = {"loss": loss_sum / steps, name: metric_sum / (steps * plan.global_batch_size)}
        if val_dataset is not None:
            val_loss, val_metric = 0.0, 0.0
            for x, y in val_dataset:
                loss, metric = loop.eval_step(x, y)
                val_loss, val_metric = val_loss + float(loss), val_metric + float(metric)
            logs["val_loss"] = val_loss / plan.validation_steps
            logs[f"val_{name}"] = val_metric / (plan.validation_steps * plan.global_batch_size)
        # Logged before the checkpoint: a restart after the save must not leave a gap in
        # the run's metrics (a restart before it redoes the epoch, which is not logged twice).
        record_epoch(ctx, epoch + 1, logs, train_s, time.perf_counter() - start, steps)
        epoch_var.assign(epoch + 1)
        if manager is not None:
            manager.save(checkpoint_number=epoch + 1)
        if ctx.chief:
            shown = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
            print(f"Epoch {epoch + 1}/{cfg.trainer.epochs} - {train_s:.2f}s - {shown}", flush=True)
    return final_metrics(ctx)

