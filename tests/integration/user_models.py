"""Model functions as a user writes them, for model=custom (model._target_=tests.integration.user_models.NAME).

Each takes `units` because conf/model/custom.yaml passes model.kwargs.units.
"""


def reshape_error(input_shape, num_outputs, units=16):
    """Builds, then fails at the first training step with TensorFlow's InvalidArgumentError:
    the reshape's row count depends on the data, so no shape inference sees it earlier."""
    import tensorflow as tf

    keras = tf.keras

    class BadReshape(keras.layers.Layer):
        def call(self, x):
            zero = tf.cast(tf.reduce_sum(x * 0.0), tf.int32)  # known only once data flows
            return tf.reshape(x, tf.stack([tf.size(x) // 7 + 1 + zero, 7 + zero]))

        def compute_output_shape(self, shape):
            return (shape[0], 7)

    return keras.Sequential([keras.Input(shape=tuple(input_shape)), keras.layers.Flatten(), BadReshape(),
                             keras.layers.Dense(num_outputs)])


def imports_keras(input_shape, num_outputs, units=16):
    """Written with `import keras` (Keras 3), as the Keras guides do."""
    import keras

    return keras.Sequential([keras.Input(shape=tuple(input_shape)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(num_outputs)])


def takes_keras(input_shape, num_outputs, keras, units=16):
    """The documented way: build with the Keras module the run hands over."""
    return keras.Sequential([keras.Input(shape=tuple(input_shape)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(num_outputs)])
