"""The task's training program: devices, strategy, data, model under scope, train, save.

Each step is a small function so that cluster roles and trainers reuse them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Dict, Optional

from xpdist import data, models, strategies, tracking
from xpdist.plan import Plan
from xpdist.train.common import TrainContext


def start_tensorflow(cfg):
    """Imports TensorFlow (its C++ start-up chatter hidden unless verbose) and sets devices."""
    if cfg.verbose:
        import tensorflow as tf
    else:
        with _stderr_silenced():
            import tensorflow as tf

    strategies.configure_devices(tf, cfg)
    return tf


@contextlib.contextmanager
def _stderr_silenced():
    """Points file descriptor 2 at /dev/null: absl logs before TF_CPP_MIN_LOG_LEVEL applies."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def build_strategy(tf, cfg, plan: Plan):
    strategy = strategies.build(tf, cfg, plan)
    replicas = strategy.num_replicas_in_sync
    if plan.strategy != "tpu" and replicas != plan.num_replicas:
        raise RuntimeError(f"strategy={plan.strategy} runs {replicas} replicas, but {plan.num_replicas} were planned "
                           f"from devices {plan.devices}; set strategy.devices explicitly")
    return strategy


def build_context(tf, cfg, plan: Plan, strategy, job_dir: Path, uri: str, run_id: Optional[str], chief: bool) -> TrainContext:
    tf.keras.utils.set_random_seed(cfg.seed)
    job = _read_job(job_dir)
    arrays = data.load(cfg, plan, Path(job["launch_dir"]))
    keras = tf.keras
    with strategy.scope():
        model = models.build_model(keras, cfg, arrays.input_shape, arrays.num_outputs)
        optimizer = models.build_optimizer(keras, cfg, plan.learning_rate)
    logger = tracking.MetricFile(job_dir / tracking.METRICS_FILE) if chief else None
    return TrainContext(tf=tf, keras=keras, cfg=cfg, plan=plan, strategy=strategy, model=model, optimizer=optimizer,
                        arrays=arrays, job_dir=job_dir, logger=logger, chief=chief, uri=uri, run_id=run_id)


def _read_job(job_dir: Path) -> dict:
    import json

    return json.loads((job_dir / "job.json").read_text())


def train(ctx: TrainContext) -> Dict[str, float]:
    if ctx.cfg.trainer.name == "ctl":
        from xpdist.train import ctl

        return ctl.train(ctx)
    from xpdist.train import fit

    return fit.train(ctx)


def save_outputs(ctx: TrainContext) -> None:
    """The chief saves the final model; the Hydra process logs it and the checkpoints as artifacts."""
    if ctx.chief and ctx.cfg.tracking.log_model:
        ctx.model.save(str(ctx.job_dir / "model.keras"))


def run(cfg, plan: Plan, job_dir: Path, uri: str, run_id: Optional[str], chief: bool) -> Dict[str, float]:
    """Trains as cfg says; returns the final epoch's metrics."""
    tf = start_tensorflow(cfg)
    strategy = build_strategy(tf, cfg, plan)
    ctx = build_context(tf, cfg, plan, strategy, job_dir, uri, run_id, chief)
    final = train(ctx)
    if ctx.logger is not None:  # the run's summary figures, at the last epoch's step
        summary = {k: final[k] for k in ("steady_examples_per_sec", "first_step_s") if k in final}
        ctx.logger.add(summary, step=len(ctx.history))
        ctx.logger.flush()
    save_outputs(ctx)
    return final
