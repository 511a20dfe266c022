"""The `callbacks` options: Keras callbacks for Model.fit, and their epoch hooks in the custom loops.

Under trainer=fit Keras calls them. Under trainer=ctl `EpochHooks` calls what a custom loop
can honour: on_train_begin, on_epoch_begin, on_epoch_end with the epoch's logs, and
on_train_end; the loop stops after an epoch that set model.stop_training, and a callback
that changes the optimizer's learning rate changes it for the next steps. Batch hooks are
not called there (they would turn each step's logs into Python numbers).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from xpdist.core.registry import Registry
from xpdist.core.schema.training import chosen_callbacks
from xpdist.task.targets import flavour, resolve

# callbacks option -> builder(keras, options).
CALLBACKS: Registry[Callable[..., Any]] = Registry("callbacks")
CALLBACKS.register("early_stopping")(lambda keras, opt: keras.callbacks.EarlyStopping(**dict(opt)))
CALLBACKS.register("reduce_lr_on_plateau")(lambda keras, opt: keras.callbacks.ReduceLROnPlateau(**dict(opt)))
CALLBACKS.register("terminate_on_nan")(lambda keras, opt: keras.callbacks.TerminateOnNaN())


@CALLBACKS.register("custom")
def _custom(keras, opt):
    cls = resolve(keras, opt._target_, "callbacks.custom._target_")
    if not (isinstance(cls, type) and issubclass(cls, keras.callbacks.Callback)):
        raise TypeError(f"callbacks.custom._target_={opt._target_} is not a callback: give a keras.callbacks.Callback "
                        f"subclass of the run's Keras ({flavour(keras)}).")
    return cls(**dict(opt.kwargs))


def build(keras, cfg) -> List[Any]:
    """The chosen callbacks, new, in a fixed order (early_stopping, reduce_lr_on_plateau, ...)."""
    return [CALLBACKS.get(name)(keras, cfg.callbacks[name]) for name in chosen_callbacks(cfg.callbacks)]


class EpochHooks:
    """The chosen callbacks' epoch hooks, for a custom loop."""

    def __init__(self, ctx):
        self.model = ctx.model
        self.callbacks = build(ctx.keras, ctx.cfg)
        if self.callbacks and getattr(self.model, "optimizer", None) is None:
            # ReduceLROnPlateau and users' callbacks reach the optimizer through the model, as under fit.
            self.model.optimizer = ctx.optimizer
        self.model.stop_training = False
        for callback in self.callbacks:
            callback.set_model(self.model)
            callback.set_params({"epochs": int(ctx.cfg.trainer.epochs), "steps": ctx.plan.steps_per_epoch,
                                 "verbose": 0})

    def _call(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args)

    def train_begin(self) -> None:
        self._call("on_train_begin", {})

    def epoch_begin(self, epoch: int) -> None:
        self._call("on_epoch_begin", epoch, {})

    def epoch_end(self, epoch: int, logs: Dict[str, float]) -> bool:
        """Calls on_epoch_end (epoch counted from 0); True when a callback asked to stop."""
        self._call("on_epoch_end", epoch, dict(logs))
        return bool(getattr(self.model, "stop_training", False))

    def train_end(self) -> None:
        self._call("on_train_end", {})
