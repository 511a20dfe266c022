"""Models and a loss whose training under several replicas differs from one device, by design,
for `python -m xpdist verify` (tests/integration/test_verify.py, scripts/equivalence.py):
model=custom model._target_=tests.integration.verify_models.NAME, loss=custom loss._target_=...

Each takes `units` because conf/model/custom.yaml passes model.kwargs.units, and builds with
the Keras the run hands over.
"""

# verify's default step count is 5: the NaN comes at a step inside it.
NAN_STEP = 3


def batchnorm(input_shape, num_outputs, keras, units=16):
    """A hidden layer normalised by BatchNormalization, whose batch statistics are each replica's
    own (synchronized=False, Keras' default): under mirrored each replica normalises its half
    of the global batch by that half's mean and variance, one device by the whole batch's. The
    moving statistics are state outside the trainable weights."""
    return keras.Sequential([keras.Input(shape=tuple(input_shape)), keras.layers.Flatten(),
                             keras.layers.Dense(units), keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"), keras.layers.Dense(num_outputs)])


def batchnorm_frozen(input_shape, num_outputs, keras, units=16):
    """The same network whose normalisation uses its moving statistics, also while training
    (a fine-tuning setup): no per-replica statistic, so it trains alike on any replica count,
    and its moving statistics, untouched, are compared as non-trainable state."""
    inputs = keras.Input(shape=tuple(input_shape))
    hidden = keras.layers.Dense(units)(keras.layers.Flatten()(inputs))
    hidden = keras.layers.BatchNormalization()(hidden, training=False)
    outputs = keras.layers.Dense(num_outputs)(keras.layers.Activation("relu")(hidden))
    return keras.Model(inputs, outputs)


def nan_at_step(input_shape, num_outputs, keras, units=16, step=NAN_STEP):
    """A dense model whose output turns NaN from its `step`-th training call on: a layer counts
    its training calls in a non-trainable variable (updated once per step across replicas)."""
    import tensorflow as tf

    class NanAfter(keras.layers.Layer):
        def build(self, shape):
            self.calls = self.add_weight(name="calls", shape=(), initializer="zeros", trainable=False,
                                         aggregation="only_first_replica")

        def call(self, x, training=False):
            if not training:
                return x
            self.calls.assign_add(1.0)
            # Added, not selected by tf.where: the gradient of a branch not taken would be NaN too.
            return x + tf.where(self.calls >= step, float("nan"), 0.0)

    return keras.Sequential([keras.Input(shape=tuple(input_shape)), keras.layers.Flatten(),
                             keras.layers.Dense(units, activation="relu"), NanAfter(),
                             keras.layers.Dense(num_outputs)])


def mean_over_own_batch(y_true, y_pred):
    """A squared error that averages itself over the batch it is given, where a custom training
    loop wants one loss per example (it divides their sum by the global batch itself): on one
    device the mean over the global batch, under R replicas the sum of R per-replica means,
    R times the gradient."""
    import tensorflow as tf

    y_true = tf.cast(y_true, y_pred.dtype)
    return tf.reshape(tf.reduce_mean(tf.square(y_true - y_pred)), [1])
