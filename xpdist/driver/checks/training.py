"""Preflight of the training pieces (loss, trainer.metrics, optimizer, schedule, callbacks).

Without TensorFlow: a `_target_` is looked up (its top-level package found, nothing run),
lengths are compared with the plan's epochs, and what one Keras flavour lacks is refused
with the flavour named. A metric name is checked in the task, by Keras itself. A rule on one
value (a rate above 0, a fraction) is declared on its field instead (xpdist/core/rules.py) and
checked with the keys, before these.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from xpdist.core import data_sources, plan as planning, strategies
from xpdist.core.errors import ConfigError
from xpdist.core.schema.training import chosen_callbacks

# Optimizer options and keys that tf-keras (keras=legacy) lacks.
_KERAS3_ONLY_OPTIMIZERS = ("lamb",)
_KERAS3_ONLY_KEYS = ("gradient_accumulation_steps",)
_FLAVOURS = {"keras3": "Keras 3", "legacy": "tf-keras"}


def check(cfg, plan: planning.Plan) -> None:
    """Raises ConfigError for the first training piece that cannot run as configured."""
    _check_targets(cfg)
    _check_optimizer(cfg, plan)
    _check_schedule(cfg)
    _check_callbacks(cfg, plan)
    _check_profile(cfg, plan)


def _target(key: str, target: str, fix: str) -> None:
    """A `keras.` path is looked up in the run's Keras by the task; another path's top-level
    package must be found here (importlib.util.find_spec runs no code, as for model._target_)."""
    target = str(target)
    if target.startswith("keras."):
        return
    top = target.split(".")[0]
    if "." not in target or not top:
        raise ConfigError(key, target or '""', "it is not a dotted path (module.Class)", fix)
    if importlib.util.find_spec(top) is None:
        raise ConfigError(key, target, f"no module '{top}' can be imported here", fix)


def _check_targets(cfg) -> None:
    if cfg.loss.name == "custom":
        _target("loss._target_", cfg.loss._target_,
                "Give module.Class of a keras.losses.Loss subclass, or module.function(y_true, y_pred).")
    if cfg.optimizer.name == "custom":
        _target("optimizer._target_", cfg.optimizer._target_,
                "Give module.Class of a Keras optimizer, e.g. keras.optimizers.Adamax.")
    if "custom" in cfg.callbacks:
        _target("callbacks.custom._target_", cfg.callbacks.custom._target_,
                "Give module.Class of a keras.callbacks.Callback subclass.")
    for entry in cfg.trainer.metrics:
        if isinstance(entry, Mapping):
            if "_target_" not in entry:
                raise ConfigError("trainer.metrics", dict(entry), "an entry is an identifier or has a _target_",
                                  "Use e.g. trainer.metrics=[auc] or [{_target_: keras.metrics.AUC, from_logits: true}].")
            _target("trainer.metrics._target_", entry["_target_"], "Give module.Class of a keras.metrics.Metric subclass.")
        elif not isinstance(entry, str) or not entry:
            raise ConfigError("trainer.metrics", entry, "an entry is a Keras metric identifier or a _target_ mapping",
                              "Use e.g. trainer.metrics=[auc,binary_accuracy].")


def _check_optimizer(cfg, plan: planning.Plan) -> None:
    opt, flavour = cfg.optimizer, _FLAVOURS.get(plan.keras, plan.keras)
    if plan.keras == "legacy" and opt.name in _KERAS3_ONLY_OPTIMIZERS:
        raise ConfigError("optimizer", opt.name, f"{flavour}, which this run uses, has no {opt.name} optimizer",
                          "Use optimizer=adamw, or a strategy and trainer that run on Keras 3 (keras=keras3).")
    for key in _KERAS3_ONLY_KEYS:
        if plan.keras == "legacy" and opt.get(key) is not None:
            raise ConfigError(f"optimizer.{key}", opt[key], f"{flavour}, which this run uses, has no {key}",
                              f"Drop optimizer.{key}, or use a strategy and trainer that run on Keras 3.")
    spec = strategies.get(plan.strategy)
    if (opt.get("gradient_accumulation_steps") or 1) > 1 and (
            spec.replicas_in_one_process or spec.needs.multi_process or spec.replicas_at_run_time):
        # Keras 3 applies accumulated gradients inside ops.cond, whose branch all-reduces
        # (merge_call) in a replica context: tf.distribute refuses that in the task, at the first
        # step (keras-team/keras#20582, open). One replica (default, one_device) trains.
        raise ConfigError("optimizer.gradient_accumulation_steps", opt.gradient_accumulation_steps,
                          f"Keras 3's gradient accumulation fails under strategy={plan.strategy} "
                          "(keras-team/keras#20582)", "Drop it and raise dataset.per_replica_batch_size instead, "
                          "or train on one replica (strategy=default or one_device).")
    clips = [key for key in ("global_clipnorm", "clipnorm", "clipvalue") if opt.get(key) is not None]
    if len(clips) > 1:  # Keras refuses more than one at construction
        raise ConfigError(f"optimizer.{clips[1]}", opt[clips[1]], f"Keras takes one clipping key, and "
                          f"optimizer.{clips[0]} is set", "Set only one of global_clipnorm, clipnorm, clipvalue.")


def _check_schedule(cfg) -> None:
    opt, epochs = cfg.schedule, cfg.trainer.epochs
    warmup = opt.get("warmup_epochs", 0.0)
    if warmup >= epochs:
        raise ConfigError("schedule.warmup_epochs", warmup, f"the warmup would last the whole training "
                          f"(trainer.epochs={epochs})", "Use fewer warmup epochs or more trainer.epochs.")
    decay = opt.get("decay_epochs")
    if decay is not None and opt.name != "exponential" and warmup + decay > epochs:
        raise ConfigError("schedule.decay_epochs", decay, f"warmup ({warmup}) and decay are longer than training "
                          f"(trainer.epochs={epochs})", "Shorten it, or use null for the rest of training.")
    if opt.name == "piecewise":
        bounds = list(opt.boundaries)
        if len(opt.factors) != len(bounds) + 1:
            raise ConfigError("schedule.factors", list(opt.factors), f"needs one factor more than the "
                              f"{len(bounds)} boundaries", "Give len(boundaries)+1 factors, e.g. [1, 0.1] for [2].")
        if bounds != sorted(bounds) or any(b <= 0 or b >= epochs for b in bounds):
            raise ConfigError("schedule.boundaries", bounds, f"boundaries must rise and fall inside training "
                              f"(0 < epoch < trainer.epochs={epochs})", "Give rising epochs within training.")


def _check_callbacks(cfg, plan: planning.Plan) -> None:
    for name in chosen_callbacks(cfg.callbacks):
        monitor = cfg.callbacks[name].get("monitor")
        if monitor and monitor.startswith("val_") and not plan.validation_steps:
            raise ConfigError(f"callbacks.{name}.monitor", monitor, "this run has no validation data",
                              f"{data_sources.of(cfg).validation_hint()}, or callbacks.{name}.monitor=loss.")
        if cfg.callbacks[name].get("mode", "auto") not in ("auto", "min", "max"):
            raise ConfigError(f"callbacks.{name}.mode", cfg.callbacks[name].mode, "must be auto, min or max",
                              f"Use callbacks.{name}.mode=auto.")
    if "reduce_lr_on_plateau" in cfg.callbacks and cfg.schedule.name != "constant":
        raise ConfigError("callbacks", "reduce_lr_on_plateau", f"schedule={cfg.schedule.name} sets the learning rate "
                          "at every step, which ReduceLROnPlateau cannot change",
                          "Use schedule=constant with it, or drop reduce_lr_on_plateau.")


def _check_profile(cfg, plan: planning.Plan) -> None:
    """trainer.profile_steps: two steps of the run, in order; not under a coordinator, whose
    process only dispatches the steps that worker tasks run."""
    window = list(cfg.trainer.profile_steps)
    if not window:
        return
    total = (plan.steps_per_epoch or 0) * int(cfg.trainer.epochs)
    fix = f"Give [first, last] with 0 <= first <= last < {total} (the run's steps), e.g. [2, 5]."
    if len(window) != 2 or not all(isinstance(v, int) for v in window):
        raise ConfigError("trainer.profile_steps", window, "it takes two step numbers", fix)
    if not 0 <= window[0] <= window[1] or (total and window[1] >= total):
        raise ConfigError("trainer.profile_steps", window, f"the run has steps 0 to {total - 1}", fix)
    spec = strategies.of(cfg)
    if spec.needs.coordinator:
        raise ConfigError("trainer.profile_steps", window, f"under strategy={spec.name} the chief only dispatches "
                          "steps to the workers, whose servers run no loop to trace",
                          "Profile the same model under a strategy that trains in its tasks (mirrored, "
                          "multi_worker_mirrored), or drop trainer.profile_steps.")
