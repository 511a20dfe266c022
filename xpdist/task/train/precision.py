"""trainer.precision and trainer.jit_compile in the task: the Keras policy and loss scaling.

Keras 3 and tf-keras name the loss-scale API differently; the custom loops call
scaled_loss and unscaled_gradients, which are identities unless the optimizer scales.
"""

from __future__ import annotations

from typing import Any, List, Optional


def set_policy(keras, cfg) -> None:
    """Sets the global policy before any layer is built (every task of a cluster does it).

    Set on every build, not once per process: a process that trains several configs one after
    another (the optimizer matrix test) must not keep the previous config's policy.
    """
    keras.mixed_precision.set_global_policy(str(cfg.trainer.precision))


def float32_output(keras, cfg, model):
    """Ends a mixed-precision Sequential model on a float32 layer, so the loss (softmax or
    squared error) is computed in float32, as the Keras mixed-precision guide advises; a
    custom model should end on one itself (dtype="float32" on its last layer)."""
    if str(cfg.trainer.precision) == "float32" or not isinstance(model, keras.Sequential):
        return model
    model.add(keras.layers.Activation("linear", dtype="float32"))
    return model


def wrap_optimizer(keras, cfg, optimizer):
    """mixed_float16 needs dynamic loss scaling (float16 gradients underflow). Model.fit would
    wrap the optimizer itself; it is wrapped here so the custom loops scale too, and fit
    leaves an optimizer that already scales as it is."""
    if str(cfg.trainer.precision) != "mixed_float16":
        return optimizer
    return keras.mixed_precision.LossScaleOptimizer(optimizer)


def _keras3(optimizer) -> bool:
    return hasattr(optimizer, "scale_loss")


def scaled_loss(optimizer, loss):
    """The loss to differentiate: multiplied by the loss scale under mixed_float16."""
    if _keras3(optimizer):
        return optimizer.scale_loss(loss)  # identity unless a LossScaleOptimizer
    if hasattr(optimizer, "get_scaled_loss"):
        return optimizer.get_scaled_loss(loss)
    return loss


def unscaled_gradients(optimizer, grads: List[Any]) -> List[Any]:
    """Gradients for apply_gradients: Keras 3's LossScaleOptimizer unscales them itself,
    tf-keras' needs get_unscaled_gradients first."""
    if not _keras3(optimizer) and hasattr(optimizer, "get_unscaled_gradients"):
        return optimizer.get_unscaled_gradients(grads)
    return grads


def jit_compile(cfg) -> Optional[bool]:
    """trainer.jit_compile as Keras takes it: None for auto (Keras decides), else a bool."""
    value = str(cfg.trainer.jit_compile).lower()
    return None if value == "auto" else value == "true"
