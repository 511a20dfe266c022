"""trainer=ctl: a custom training loop (tf.function + strategy.run).

Per-example losses are averaged over the global batch and regularization losses scaled by
the number of replicas, so the summed gradients equal single-device training's. Metrics are
Keras metric objects made under the strategy's scope: their variables sum over replicas
(and workers) when read. The chosen callbacks' epoch hooks run after each epoch is recorded.
"""

from __future__ import annotations

import sys
import time
from typing import Dict

from xpdist.task.data import replica_batches_fn
from xpdist.task.measure import profile
from xpdist.task.train.callbacks import EpochHooks
from xpdist.task.train.losses import build_loss, build_metrics
from xpdist.task.train.precision import jit_compile, scaled_loss, unscaled_gradients
from xpdist.task.train.common import (TrainContext, build_optimizer, checkpoint_manager, final_metrics,
                                      finalize_weights, keep_iterators, record_epoch, restore_latest)


class _Loop:
    def __init__(self, ctx: TrainContext):
        self.ctx = ctx
        tf, strategy = ctx.tf, ctx.strategy
        self.loss_fn = build_loss(ctx.keras, ctx.cfg, ctx.arrays.kind, reduction="none")
        with strategy.scope():  # sum-on-read variables: each replica adds its own part
            self.metrics = build_metrics(ctx.keras, ctx.cfg, ctx.arrays.kind)
            self.val_metrics = build_metrics(ctx.keras, ctx.cfg, ctx.arrays.kind)
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

    @staticmethod
    def results(metrics, prefix: str = "") -> Dict[str, float]:
        return {prefix + m.name: float(m.result()) for m in metrics}

    @staticmethod
    def reset(metrics) -> None:
        for metric in metrics:
            metric.reset_state()

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
        for metric in self.metrics:
            metric.update_state(y, outputs)
        return loss

    def _train_steps(self, iterator, count):
        """Runs `count` steps (a tensor, so one trace serves every count) inside one call."""
        tf = self.ctx.tf
        loss_total = tf.constant(0.0)
        for _ in tf.range(count):
            loss = self.strategy.run(self.replica_step, args=next(iterator))
            loss_total += self.strategy.reduce(self.SUM, loss, axis=None)
        return loss_total

    def _eval_step(self, x, y):
        def replica(x, y):
            tf, model = self.ctx.tf, self.ctx.model
            outputs = model(x, training=False)
            loss = tf.nn.compute_average_loss(self.loss_fn(y, outputs), global_batch_size=self.global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            for metric in self.val_metrics:
                metric.update_state(y, outputs)
            return loss

        loss = self.strategy.run(replica, args=(x, y))
        return self.strategy.reduce(self.SUM, loss, axis=None)


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
    names = [m.name for m in loop.metrics]
    # The bar redraws itself with terminal escapes: on a pipe or in a log file the epoch line below is enough.
    show_bar = cfg.trainer.progress and ctx.chief and sys.stdout.isatty()
    hooks = EpochHooks(ctx)
    traced = profile.window(ctx)
    window = profile.StepWindow(tf, *traced) if traced else None
    hooks.train_begin()
    for epoch in range(int(epoch_var.numpy()), cfg.trainer.epochs):
        hooks.epoch_begin(epoch)
        bar = ctx.keras.utils.Progbar(steps, stateful_metrics=["loss", *names]) if show_bar else None
        start = time.perf_counter()
        loop.reset(loop.metrics)
        done, loss_sum = 0, 0.0
        while done < steps:
            ran = min(loop.spe, steps - done)
            if window is not None:
                window.before(epoch * steps + done, ran)
            loss_total = loop.train_step(iterator, tf.constant(ran))
            loss_sum += float(loss_total)  # waits for the call: a trace stopped after it holds it whole
            if window is not None:
                window.after(epoch * steps + done, ran)
            done += ran
            ctx.step_done()
            if ctx.verify is not None:  # `python -m xpdist verify` runs one step per call
                ctx.verify.after_step(float(loss_total))
            if ctx.logger is not None and cfg.trainer.log_every_n_steps and done % cfg.trainer.log_every_n_steps < ran:
                ctx.logger.add({"batch_loss": float(loss_total) / ran}, step=epoch * steps + done)
            if bar is not None:
                bar.update(done, [("loss", loss_sum / done), *loop.results(loop.metrics).items()])
        train_s = time.perf_counter() - start
        logs = {"loss": loss_sum / steps, **loop.results(loop.metrics)}
        if val_dataset is not None:
            loop.reset(loop.val_metrics)
            val_loss = sum(float(loop.eval_step(x, y)) for x, y in val_dataset)
            logs["val_loss"] = val_loss / plan.validation_steps
            logs.update(loop.results(loop.val_metrics, "val_"))
        # Logged before the checkpoint: a restart after the save must not leave a gap in
        # the run's metrics (a restart before it redoes the epoch, which is not logged twice).
        record_epoch(ctx, epoch + 1, logs, train_s, time.perf_counter() - start, steps)
        epoch_var.assign(epoch + 1)
        if manager is not None:
            manager.save(checkpoint_number=epoch + 1)
        if ctx.chief:
            shown = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
            print(f"Epoch {epoch + 1}/{cfg.trainer.epochs} - {train_s:.2f}s - {shown}", flush=True)
        if hooks.epoch_end(epoch, logs):  # every worker sees the same logs, so all stop together
            break
    if window is not None:  # training ended inside the window (stopped early)
        window.close()
    hooks.train_end()
    finalize_weights(ctx)
    return final_metrics(ctx)

