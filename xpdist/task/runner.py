"""The task's training program: devices, strategy, data, model under scope, train, save.

Each step is a small function so that cluster roles and trainers reuse them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Callable, Dict, Optional

from xpdist.core import strategies as core_strategies
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.plan import Plan, resolved_at_run_time, with_replicas
from xpdist.core.protocol.jobdir import JobDir, JobSpec, MetricFile, RunReady
from xpdist.core.registry import Registry
from xpdist.task import boot, data, export, models, strategies, verify_recorder
from xpdist.task.measure import flops, profile
from xpdist.task.train import ctl, fit, losses, precision, ps_ctl, resize, schedules
from xpdist.task.train.clipping import after_all_reduce
from xpdist.task.train.common import TrainContext


class NoRun(RuntimeError):
    """The driver could not create the MLflow run: the task stops before training."""


# An epoch at least this long takes the export's preload (2-3 CPU-s on 2 cores) without its
# steady examples/sec moving: the rate is the median epoch's, and the preload slows one.
PRELOAD_EPOCH_S = 5.0
# Training left, at the last epoch's pace, that the preload may overlap: long trainings of short
# epochs (100 epochs of 1 s) end without MLflow's import after their last epoch too.
PRELOAD_LEFT_S = 5.0


def preload_may_start(ctx: TrainContext) -> bool:
    """Whether the export's preload may start now, during training: once the first epoch took
    PRELOAD_EPOCH_S or more, or once the epochs left, at the last one's pace, take
    PRELOAD_LEFT_S or more. The pace is read from the second epoch on: the first one's time
    holds the tracing. A shorter training does not take it: there the preload competed for
    the cores with every epoch that counts (a 0.5-s cnn run's steady examples/sec fell from
    18,750 to 9,036 here), so it runs after the last epoch (export.Preload.finish starts it)."""
    if not ctx.history:
        return False
    if ctx.history[0].get("epoch_time_s", 0.0) >= PRELOAD_EPOCH_S:
        return True
    if len(ctx.history) < 2:  # record_epoch sets last_epoch with every epoch it keeps
        return False
    left = int(ctx.cfg.trainer.epochs) - ctx.last_epoch
    return left * ctx.history[-1].get("epoch_time_s", 0.0) >= PRELOAD_LEFT_S


def wait_for_run(job: JobDir) -> None:
    """Blocks until the driver has created the MLflow run; TensorFlow's import and the model
    build overlap with its creation, training never does: a store that cannot be written
    must end the command before any training, not after it.

    Raises:
        NoRun: creating the run failed.
    """
    ready = RunReady.wait(job)
    if ready.error:
        raise NoRun(ready.error)


def start_tensorflow(cfg):
    """Imports TensorFlow (already done in a standby task), without Keras, and sets devices."""
    tf = boot.import_tensorflow(cfg.verbose, keras=False)
    strategies.configure_devices(tf, cfg)
    return tf


def build_strategy(tf, cfg, plan: Plan):
    strategy = strategies.build(tf, cfg, plan)
    replicas = strategy.num_replicas_in_sync
    if not resolved_at_run_time(plan) and replicas != plan.num_replicas:
        raise RuntimeError(f"strategy={plan.strategy} runs {replicas} replicas, but {plan.num_replicas} were planned "
                           f"from devices {plan.devices}; set strategy.devices explicitly")
    return strategy


def build_context(tf, cfg, spec: JobSpec, strategy, job: JobDir, cluster: ClusterEnv) -> TrainContext:
    tf.keras.utils.set_random_seed(cfg.seed)
    plan = spec.plan
    arrays = data.load(cfg, plan, Path(spec.launch_dir), strategy)
    keras = tf.keras
    precision.set_policy(keras, cfg)
    with strategy.scope():
        model = models.build_model(keras, cfg, arrays.input_shape, arrays.num_outputs)
        model = precision.float32_output(keras, cfg, model)
        learning_rate = schedules.build(keras, cfg, plan)  # the plan's rate, or a schedule of it
        learning_rate = resize.learning_rate(keras, plan, learning_rate)  # carried on after a resize
        optimizer = models.build_optimizer(keras, cfg, learning_rate)
        optimizer = precision.wrap_optimizer(keras, cfg, after_all_reduce(keras, optimizer))
    logger = MetricFile(job.metrics) if cluster.is_chief else None
    logged = set(logger.steps_with("epoch_time_s")) | set(spec.logged_epochs) if logger is not None else set()
    return TrainContext(tf=tf, keras=keras, cfg=cfg, plan=plan, strategy=strategy, model=model, optimizer=optimizer,
                        arrays=arrays, job=job, cluster=cluster, logger=logger, logged_epochs=logged,
                        schedule=learning_rate if callable(learning_rate) else None, restartable=spec.restartable)


# trainer option -> its training loop.
TRAINERS: Registry[Callable[[TrainContext], Dict[str, float]]] = Registry("trainer")
TRAINERS.register("fit")(fit.train)


@TRAINERS.register("ctl")
def _ctl(ctx: TrainContext) -> Dict[str, float]:
    # Under a coordinator the loop schedules steps on the workers instead of running them here.
    coordinated = core_strategies.get(ctx.plan.strategy).needs.coordinator
    return (ps_ctl if coordinated else ctl).train(ctx)


def train(ctx: TrainContext) -> Dict[str, float]:
    return TRAINERS.get(ctx.cfg.trainer.name)(ctx)


def save_outputs(ctx: TrainContext, preloaded: Optional[export.Preload] = None) -> None:
    """The chief saves the final model; the Hydra process logs it and the checkpoints as artifacts.

    Under multi_worker_mirrored saving reads variables through collectives, so every worker
    must save: the others write to a scratch folder that is then deleted.
    """
    if not ctx.chief:
        if ctx.cfg.tracking.log_model:
            scratch = tempfile.mkdtemp(prefix="xpdist-model-")
            try:
                ctx.model.save(os.path.join(scratch, "model.keras"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return
    if ctx.cfg.tracking.log_model:
        ctx.model.save(str(ctx.job.model))
        export.save_mlflow_model(ctx, ctx.job.model, ctx.job.mlflow_model, preloaded)


def serve(tf, resolver, job: JobDir) -> None:
    """A parameter_server worker or ps task: a tf.distribute.Server that runs what the
    coordinator sends it, until it is stopped."""
    # server.join() blocks in C++, where Python signal handlers never run; a server keeps
    # no state worth saving, so SIGTERM and SIGINT end it at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
    job.mark_ready(f"{resolver.task_type}-{resolver.task_id}")
    print(f"xpdist: {resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    chief = resolver.cluster_spec().as_dict().get("chief", [None])[0]
    wait_for_chief_to_leave(chief)
    print(f"xpdist: {resolver.task_type}:{resolver.task_id}: the coordinator (chief:0 at {chief}) no longer answers: "
          "stopping (training is over, or this task is cut off)", flush=True)


def wait_for_chief_to_leave(address: str, look_s: float = 0.1, grace_s: float = 2.0) -> None:
    """Returns once the coordinator, seen up once, is gone.

    A tf.distribute.Server serves forever, and nothing in TensorFlow tells it that training is
    over. On localhost the launcher stops it; a task that a cluster manager started (srun,
    a TFJob) would otherwise keep its allocation, and its port, until the job's time limit.

    The coordinator's own server (connect_to_cluster starts it) lives as long as the
    coordinator. This task looks for it every look_s from the moment it serves (before the
    coordinator can have trained: it needs this server) and, once connected, holds that TCP
    connection open: its end, when the coordinator's process exits, wakes this task at once,
    however slow the machine, where looking every 2 s missed a coordinator up for less than
    that. TensorFlow's server keeps such a connection (it sends its HTTP/2 settings and waits:
    still open after 40 s here), but gRPC may drop one that never answers, so an end is
    confirmed by connecting again for grace_s. TCP keepalive ends the wait on a
    coordinator whose host vanished without closing (about 25 s). No shared file system.
    """
    import socket
    import time

    host, _, port = address.rpartition(":")
    seen, gone_at = False, 0.0
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=max(look_s, 1.0))
        except OSError:
            conn = None
        if conn is None:
            if seen and time.monotonic() - gone_at >= grace_s:
                return
            time.sleep(look_s)
            continue
        seen, held_at = True, time.monotonic()
        with conn:
            _hold(conn)
        gone_at = time.monotonic()
        if gone_at - held_at < look_s:  # a server that closes at once is not looked at in a busy loop
            time.sleep(look_s)


def _hold(conn) -> None:
    """Blocks until the peer closes the connection (or keepalive finds it dead)."""
    import socket

    conn.settimeout(None)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):  # Linux
        if hasattr(socket, name):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    try:
        while conn.recv(4096):  # whatever the server says is drained; b"" is its close
            pass
    except OSError:  # reset, or keepalive's timeout
        pass


def run(cfg, spec: JobSpec, job: JobDir, cluster: ClusterEnv) -> Optional[int]:
    """Trains as cfg says; the chief's epoch metrics and summary figures go to the metric file.

    Under a coordinator (parameter_server) only the chief trains; worker and ps tasks serve.

    Returns:
        The epoch after which a callback stopped training (model.stop_training), or None.
    """
    plan = spec.plan
    tf = start_tensorflow(cfg)
    resolver = strategies.server(tf, cfg)
    if resolver is not None:  # it runs the coordinator's functions: no Keras is imported here
        serve(tf, resolver, job)
        return None
    boot.import_tensorflow(cfg.verbose)  # the run's Keras, read from TF_USE_LEGACY_KERAS
    boot.private_tempdir(job.own_scratch())  # what TensorFlow writes there goes with the task
    strategy = build_strategy(tf, cfg, plan)
    job.mark_ready(cluster.file_name)
    if resolved_at_run_time(plan):  # the batch and learning rate follow the replicas TensorFlow found
        spec = dataclasses.replace(spec, plan=with_replicas(cfg, plan, strategy.num_replicas_in_sync))
        if cluster.is_chief:
            job.write_resolved(spec.plan)
    ctx = build_context(tf, cfg, spec, strategy, job, cluster)
    recorder = verify_recorder.attach(ctx)  # `python -m xpdist verify` only
    preloaded = None
    if cluster.is_chief and cfg.tracking.log_model:  # the export's imports, while training runs
        preloaded = export.preload(ctx, lambda: preload_may_start(ctx))
    if cluster.is_chief:  # the other workers wait for the chief in their first collective
        wait_for_run(job)
    try:
        final = train(ctx)
    except tf.errors.OpError as err:  # a bad file of a streamed source: name it and its key
        raise data.explain(tf, cfg, Path(spec.launch_dir), err) from err
    if recorder is not None:
        recorder.finish()
    if ctx.logger is not None:  # the run's summary figures, at the last epoch's step
        summary = {k: final[k] for k in ("steady_examples_per_sec", "first_step_s") if k in final}
        # After training: counting costs the first step nothing.
        summary.update(flops.figures(ctx, final, lambda: losses.build_loss(ctx.keras, ctx.cfg, ctx.arrays.kind)))
        summary.update(profile.summary(ctx))  # trainer.profile_steps: where the traced steps' time went
        ctx.logger.add(summary, step=int(cfg.trainer.epochs))  # not len(history): a resumed run has fewer
        ctx.logger.flush()
    save_outputs(ctx, preloaded)
    return stopped_early_at(ctx)


def stopped_early_at(ctx: TrainContext) -> Optional[int]:
    """The last epoch trained when a callback stopped training before trainer.epochs, else None."""
    if ctx.last_epoch is not None and ctx.last_epoch < int(ctx.cfg.trainer.epochs):
        return ctx.last_epoch
    return None
