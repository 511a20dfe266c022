"""FLOP counts kept between runs (xpdist/task/measure/flops.py): keyed by the whole training step,
only for steps made of Keras's own classes, read back whole or counted again."""

from __future__ import annotations

import pytest

from xpdist.task.measure import flops


@pytest.fixture
def tf_keras():
    """TensorFlow and Keras 3, layer names counted from zero again, as in a fresh run."""
    import keras
    import tensorflow as tf

    keras.backend.clear_session()
    return tf, keras


def cnn(keras, filters: int = 8):
    return keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(filters, 3),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])


@pytest.mark.slow  # imports TensorFlow and Keras
def test_the_same_step_has_the_same_key_and_another_step_another(tf_keras):
    tf, keras = tf_keras
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    first = flops.cache_key(tf, cnn(keras), loss, "classification")
    assert first is not None
    keras.backend.clear_session()
    assert flops.cache_key(tf, cnn(keras), loss, "classification") == first
    keras.backend.clear_session()
    compiled = cnn(keras)
    compiled.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)  # the learning rate follows the replicas
    assert flops.cache_key(tf, compiled, loss, "classification") == first  # the optimizer is not counted
    keras.backend.clear_session()
    assert flops.cache_key(tf, cnn(keras, filters=16), loss, "classification") != first

    def built_on(width):  # a Sequential without an Input, built on its first batch
        keras.backend.clear_session()
        model = keras.Sequential([keras.layers.Dense(3)])
        model(tf.zeros([1, width]))
        return flops.cache_key(tf, model, loss, "classification")

    assert built_on(4) != built_on(8)
    keras.backend.clear_session()
    assert flops.cache_key(tf, cnn(keras), keras.losses.SparseCategoricalCrossentropy(), "classification") != first


@pytest.mark.slow  # imports TensorFlow and Keras
def test_a_users_layer_model_or_loss_is_counted_in_every_run(tf_keras):
    """Its code can change where its config does not: no count of it is kept."""
    tf, keras = tf_keras

    class Doubled(keras.layers.Layer):
        def call(self, x):
            return 2 * x

    class Mine(keras.Model):
        pass

    def squares(y, p):
        return keras.ops.mean((y - p) ** 2)

    mse = keras.losses.MeanSquaredError()
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    assert flops.cache_key(tf, plain, mse, "regression") is not None
    assert flops.cache_key(tf, plain, squares, "regression") is None
    assert flops.cache_key(tf, Mine(), mse, "regression") is None
    inside = keras.Sequential([keras.Input((4,)), keras.Sequential([Doubled()]), keras.layers.Dense(1)])
    assert flops.cache_key(tf, inside, mse, "regression") is None  # a user's layer inside a Keras model


def test_a_count_is_read_back_whole_or_not_at_all(tmp_path, monkeypatch):
    monkeypatch.setenv(flops.CACHE_ENV, str(tmp_path / "kept"))
    assert flops._kept("step") is None
    flops._keep("step", 123)
    assert flops._kept("step") == 123
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["step.json"]  # no scratch file left
    (tmp_path / "kept" / "step.json").write_text('{"flops_per')  # cut short: counted again
    assert flops._kept("step") is None
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv(flops.CACHE_ENV, str(tmp_path / "not-a-folder" / "kept"))
    flops._keep("step", 123)  # a folder that cannot be made: nothing kept, no error
    assert flops._kept("step") is None
