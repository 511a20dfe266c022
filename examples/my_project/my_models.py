"""The project's own model, built by xpdist's task process through model._target_.

xpdist calls it with input_shape, num_outputs and the option's model.kwargs; it must return
an uncompiled Keras model (xpdist compiles it under the strategy's scope).
"""

from __future__ import annotations


def wide_and_deep(input_shape, num_outputs, units: int = 32, deep_units: int = 8):
    """Two hidden layers: `units` wide, then `deep_units` (both set in conf/model/wide_and_deep.yaml)."""
    import tensorflow as tf  # the task process has TensorFlow; the driver never imports this module

    keras = tf.keras  # Keras 3, or tf-keras when xpdist selects it (TF_USE_LEGACY_KERAS)
    return keras.Sequential([
        keras.Input(shape=tuple(input_shape)),
        keras.layers.Dense(units, activation="relu"),
        keras.layers.Dense(deep_units, activation="relu"),
        keras.layers.Dense(num_outputs),
    ])
