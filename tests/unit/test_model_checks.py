"""model=keras_app and model=transformer are checked against the data before TensorFlow starts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_preflight import reject
from tests.unit.unit_helpers import plain
from xpdist.driver.checks import preflight


def test_an_unknown_architecture_names_the_nearest(tmp_path):
    err = reject(tmp_path, "model=keras_app", "model.architecture=ResNet5", "dataset=synthetic_images")
    assert err.key == "model.architecture" and err.received == "ResNet5"
    assert "Did you mean model.architecture=ResNet50?" in str(err)


@pytest.mark.parametrize("overrides", [["dataset=synthetic_images", "dataset.image_shape=[28,28,3]"],
                                       ["dataset=digits"], ["dataset=synthetic_regression"]])
def test_keras_app_needs_images_of_its_minimum_size(tmp_path, overrides):
    err = reject(tmp_path, "model=keras_app", *overrides)
    assert err.key == "model" and "at least 32" in str(err)


def test_inception_needs_75_pixels(tmp_path):
    err = reject(tmp_path, "model=keras_app", "model.architecture=InceptionV3", "dataset=synthetic_images")
    assert "at least 75" in str(err)


def test_transformer_needs_token_sequences(tmp_path):
    err = reject(tmp_path, "model=transformer", "dataset=synthetic_images")
    assert err.key == "model" and "dataset=synthetic_tokens" in str(err)


def test_transformer_width_is_a_multiple_of_its_heads(tmp_path):
    err = reject(tmp_path, "model=transformer", "dataset=synthetic_tokens", "model.width=30", "model.num_heads=4")
    assert err.key == "model.width" and err.received == 30


def test_transformer_needs_a_vocabulary_size_from_somewhere(tmp_path):
    np.savez(tmp_path / "tokens.npz", x=np.zeros((64, 8), "int32"), y=np.zeros(64, "int32"))
    err = reject(tmp_path, "model=transformer", "dataset=npz", "dataset.path=tokens.npz")
    assert err.key == "model.vocab_size"
    preflight.check(plain("model=transformer", "dataset=npz", "dataset.path=tokens.npz", "model.vocab_size=10"),
                    tmp_path)


def test_the_defaults_pass(tmp_path):
    preflight.check(plain("model=keras_app", "dataset=synthetic_images"), tmp_path)
    preflight.check(plain("model=transformer", "dataset=synthetic_tokens"), tmp_path)
