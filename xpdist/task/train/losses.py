"""The `loss` option and `trainer.metrics`, built for Model.fit and the custom loops alike.

Builders take `keras` (tf.keras: Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1) and go
through Keras' own names: a loss option is a Keras loss class whose arguments are the
option's keys; a metric identifier is what `keras.metrics.get` accepts (or a metric class's
name in snake case, which tf-keras' `get` leaves unresolved). The custom loops ask for
reduction="none" and average the per-example losses over the global batch themselves.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, List, Mapping

from xpdist.core.registry import Registry
from xpdist.task.targets import flavour, resolve

# loss option -> builder(keras, options, kind, reduction).
LOSSES: Registry[Callable[..., Any]] = Registry("loss")

# loss option -> its Keras class; the option's keys (name aside) are the class's arguments.
_KERAS_LOSSES = {"mse": "MeanSquaredError", "mae": "MeanAbsoluteError", "huber": "Huber",
                 "binary_crossentropy": "BinaryCrossentropy", "categorical_crossentropy": "CategoricalCrossentropy",
                 "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy"}


def _keras_loss(class_name: str):
    def build(keras, opt, kind, reduction):
        args = {k: v for k, v in opt.items() if k != "name"}
        return getattr(keras.losses, class_name)(reduction=reduction, **args)

    return build


for _option, _class in _KERAS_LOSSES.items():
    LOSSES.register(_option)(_keras_loss(_class))


@LOSSES.register("auto")
def _auto(keras, opt, kind, reduction):
    """Today's choice from the data: cross-entropy on logits for classes, else squared error."""
    if kind == "classification":
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
    return keras.losses.MeanSquaredError(reduction=reduction)


@LOSSES.register("custom")
def _custom(keras, opt, kind, reduction):
    """A keras.losses.Loss subclass (its reduction set to the loop's), or a per-example function."""
    found = resolve(keras, opt._target_, "loss._target_")
    if isinstance(found, type) and issubclass(found, keras.losses.Loss):
        loss = found(**dict(opt.kwargs))
        loss.reduction = reduction
        return loss
    if callable(found) and not isinstance(found, type) and not opt.kwargs:
        return found  # fn(y_true, y_pred) -> one loss per example; fit and the loops average it
    raise TypeError(f"loss._target_={opt._target_} is not a loss: give a keras.losses.Loss subclass of the run's "
                    f"Keras ({flavour(keras)}), or a function fn(y_true, y_pred) (without loss.kwargs).")


def build_loss(keras, cfg, kind: str, reduction: str = "sum_over_batch_size"):
    """The run's loss.

    Args:
        kind: "classification" (integer labels) or "regression", as the data says.
        reduction: "sum_over_batch_size" for Model.fit, "none" for the custom loops.
    """
    return LOSSES.get(cfg.loss.name)(keras, cfg.loss, kind, reduction)


def build_metrics(keras, cfg, kind: str) -> List[Any]:
    """New metric objects for trainer.metrics (call under strategy.scope()).

    Empty trainer.metrics keeps xpdist's defaults: accuracy for classes, mae for regression.

    Raises:
        ValueError: an identifier Keras does not know, naming trainer.metrics.
        TypeError: a _target_ that does not make a Keras metric.
    """
    if not cfg.trainer.metrics:
        if kind == "classification":
            return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        return [keras.metrics.MeanAbsoluteError(name="mae")]
    from_logits = bool(cfg.loss.get("from_logits", False))
    return [_metric(keras, cfg, entry, kind, from_logits) for entry in cfg.trainer.metrics]


def _metric(keras, cfg, entry, kind: str, from_logits: bool):
    if isinstance(entry, Mapping):
        kwargs = {k: v for k, v in entry.items() if k != "_target_"}
        target = entry.get("_target_")
        if not target:
            raise ValueError(f"trainer.metrics: {dict(entry)} has no _target_. Give an identifier (auc) or "
                             "{_target_: module.Class, ...}.")
        metric = resolve(keras, target, "trainer.metrics._target_")(**kwargs)
        if not isinstance(metric, keras.metrics.Metric):
            raise TypeError(f"trainer.metrics: _target_={target} made {type(metric).__name__}, not a Keras metric "
                            f"of the run's Keras ({flavour(keras)}).")
        return metric
    name = str(entry)
    found = _accuracy_for_loss(keras, cfg, kind, name) or _lookup(keras, name)
    if found is None:
        raise ValueError(f"trainer.metrics: {name} is not a metric {flavour(keras)} knows. "
                         "Use a Keras identifier (auc, binary_accuracy, precision, mae, ...) or {_target_: ...}.")
    if isinstance(found, keras.metrics.Metric):
        if type(found) is keras.metrics.MeanMetricWrapper:
            return found
        found = type(found)  # Keras 3's get makes an instance: made again with its name and from_logits
    if isinstance(found, type):
        params = inspect.signature(found).parameters
        kwargs: dict = {"name": name}
        if from_logits and "from_logits" in params:  # auc
            kwargs["from_logits"] = True
        elif from_logits:  # binary_accuracy, precision, recall: a logit above 0 is a probability above 0.5
            kwargs.update({key: 0.0 for key in ("threshold", "thresholds") if key in params})
        return found(**kwargs)
    return keras.metrics.MeanMetricWrapper(found, name=name)


def _accuracy_for_loss(keras, cfg, kind: str, name: str):
    """`accuracy` as compile() reads it: the accuracy that fits the loss's labels."""
    if name not in ("accuracy", "acc"):
        return None
    if cfg.loss.name == "binary_crossentropy":
        return keras.metrics.BinaryAccuracy
    if cfg.loss.name == "categorical_crossentropy":
        return keras.metrics.CategoricalAccuracy
    if kind == "classification":
        return keras.metrics.SparseCategoricalAccuracy
    return None


def _lookup(keras, name: str):
    """keras.metrics.get, then a metric class by its snake-case name (tf-keras' get returns
    unknown strings as they are)."""
    try:
        found = keras.metrics.get(name)
    except (ValueError, TypeError):
        found = None
    if found is not None and not isinstance(found, str):
        return found
    squashed = name.replace("_", "").lower()
    for attr in dir(keras.metrics):
        cls = getattr(keras.metrics, attr)
        if attr.lower() == squashed and isinstance(cls, type) and issubclass(cls, keras.metrics.Metric):
            return cls
    return None
