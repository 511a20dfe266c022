"""The task's side of `python -m xpdist verify`: records a short training step by step.

Enabled by the job's environment (xpdist/core/protocol/verification.py), never by the user's config.
Every task loads the reference's initial weights when told to (all workers of a cluster
must start alike); the chief alone records, per step, the loss and the norm of the weight
update, and at the end every variable (the model's, trainable or not, and the optimizer's).

The update norm, not the gradient norm: under trainer=fit the gradients live inside Keras'
train step, out of reach without changing the user's model, while the weights before and
after a step are readable from a callback under both trainers. Two runs that apply the
same updates to the same weights have the same update norms; a wrong gradient scale, a
missing all-reduce or a per-replica statistic shows in it at the step where it happens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from xpdist.core.protocol.verification import FINAL_FILE, INITIAL_FILE, INIT_ENV, RECORD_ENV, StepRecord


def attach(ctx) -> Optional["Recorder"]:
    """Makes ctx.verify a Recorder when the job asks for one (XPDIST_VERIFY_DIR), and loads
    the initial weights it names (XPDIST_VERIFY_INIT); None when the job is no verification."""
    folder = os.environ.get(RECORD_ENV)
    if not folder:
        return None
    recorder = Recorder(ctx, Path(folder))
    ctx.verify = recorder
    recorder.begin(os.environ.get(INIT_ENV) or None)
    return recorder


def _name(variable) -> str:
    """A variable's name as its Keras spells it: Keras 3's path, tf-keras' name without ':0'."""
    name = getattr(variable, "path", None) or variable.name
    return name[:-2] if name.endswith(":0") else name


def _value(variable) -> np.ndarray:
    """Its value on this task (a mirrored variable's first replica), floats widened to float64."""
    value = np.asarray(variable.numpy())
    return value.astype(np.float64) if value.dtype.kind == "f" else value


def named(variables) -> Dict[str, object]:
    """{name: variable}; a name met twice gets '#<n>' (two optimizers' 'iteration', say)."""
    found: Dict[str, object] = {}
    for variable in variables:
        name = _name(variable)
        key, n = name, 1
        while key in found:
            n += 1
            key = f"{name}#{n}"
        found[key] = variable
    return found


def replica_spread(strategy, variable) -> float:
    """The largest difference between a variable's copies on this task's replicas (0 with one).

    A mirrored variable must hold the same value on every replica; the comparison with the
    reference reads the first copy only, so copies that drifted apart would pass unseen.
    Variables synchronised on read (a metric's partial sums) differ per replica by design.
    """
    inner = getattr(variable, "_value", variable)  # Keras 3 wraps the tf.Variable
    sync = getattr(inner, "synchronization", None)
    if sync is not None and getattr(sync, "name", "") == "ON_READ":
        return 0.0
    try:
        parts = strategy.experimental_local_results(inner)
    except (TypeError, ValueError):
        return 0.0
    if len(parts) < 2:
        return 0.0
    values = [np.asarray(part.numpy(), dtype=np.float64) for part in parts]
    return max(float(np.max(np.abs(v - values[0]))) if v.size else 0.0 for v in values[1:])


class Recorder:
    """Per-step loss and update norm, final variables; written by the chief task."""

    def __init__(self, ctx, folder: Path):
        self.ctx = ctx
        self.folder = folder
        self.record = StepRecord(trainer=str(ctx.cfg.trainer.name))
        self._before: Optional[List[np.ndarray]] = None
        self._running_mean = 0.0  # fit's logs["loss"]: the epoch's mean so far

    def begin(self, initial: Optional[str]) -> None:
        model = self.ctx.model
        if initial and model.weights:
            with np.load(initial) as saved:
                weights = [saved[f"w{i:04d}"] for i in range(len(saved.files))]
            if len(weights) != len(model.weights):
                raise RuntimeError(f"verify: the reference saved {len(weights)} weights, this model has "
                                   f"{len(model.weights)}: the two runs did not build the same model")
            with self.ctx.strategy.scope():
                model.set_weights(weights)
            self.record.loaded_initial = True
        if self.ctx.chief:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not initial and model.weights:
                np.savez(self.folder / INITIAL_FILE,
                         **{f"w{i:04d}": np.array(w) for i, w in enumerate(model.get_weights())})
            self._before = self._trainable()

    def _trainable(self) -> List[np.ndarray]:
        return [_value(v) for v in self.ctx.model.trainable_variables]

    def after_step(self, loss: float) -> None:
        """After one training step (steps_per_execution is 1 under verify): its loss."""
        if not self.ctx.chief:
            return
        after = self._trainable()
        before = self._before if self._before is not None and len(self._before) == len(after) else None
        if before is None:  # a model built by its first call: no weights before it
            norm = float("nan") if not after else float(np.sqrt(sum(float(np.sum(a * a)) for a in after)))
        else:
            norm = float(np.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(after, before))))
        self.record.loss.append(float(loss))
        self.record.update_norm.append(norm)
        self._before = after

    def fit_callback(self):
        """A Keras callback that feeds after_step from Model.fit, whose batch logs hold the
        epoch's running mean of the loss: the step's own loss is taken back out of it."""
        recorder = self

        class VerifySteps(self.ctx.keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self._batches, recorder._running_mean = 0, 0.0

            def on_train_batch_end(self, batch, logs=None):
                mean = float((logs or {}).get("loss", float("nan")))
                self._batches += 1
                k = self._batches
                loss = k * mean - (k - 1) * recorder._running_mean
                recorder._running_mean = mean
                recorder.after_step(loss)

        return VerifySteps()

    def finish(self) -> None:
        """Writes steps.json and final.npz (the chief); every variable, the optimizer's too.

        Every worker reads the variables, the chief alone writes: reading a variable synchronised
        on read (tf-keras' BatchNormalization statistics) is a collective under
        multi_worker_mirrored, which the other workers must join or the chief waits for them
        until TensorFlow declares them lost.
        """
        found = named(self.ctx.model.weights)
        variables = self.ctx.optimizer.variables
        variables = variables() if callable(variables) else variables  # a method in tf-keras' legacy optimizers
        for key, variable in named(variables).items():
            found.setdefault(f"optimizer/{key}", variable)
        values = {key: _value(v) for key, v in found.items()}
        spread = {key: replica_spread(self.ctx.strategy, v) for key, v in found.items()}
        if not self.ctx.chief:
            return
        np.savez(self.folder / FINAL_FILE, **values)
        self.record.replica_spread = spread
        self.record.write(self.folder)
