"""Real model sizes: model=keras_app and model=transformer train through the CLI under both
Keras flavours, every run records flops_per_example and achieved_flops_per_sec, and the cnn's
count agrees with a hand count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import xpdist_env
from xpdist.core import keras_apps
from xpdist.task.measure import flops

pytestmark = pytest.mark.slow

TINY_IMAGES = ["dataset=synthetic_images", "dataset.image_shape=[32,32,3]", "dataset.num_examples=64",
               "dataset.per_replica_batch_size=16"]
TINY_TOKENS = ["dataset=synthetic_tokens", "dataset.seq_len=16", "dataset.vocab_size=50", "dataset.num_examples=64",
               "dataset.per_replica_batch_size=16", "model.width=16", "model.ff_width=32", "model.num_heads=2"]


def finished(xpdist, *overrides, env=None, runs: int = 1):
    """The run of this command, FINISHED: the newest of its store, which then holds `runs` runs."""
    result = xpdist.run(*overrides, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    stored = xpdist.runs()
    assert len(stored) == runs
    run = stored[-1]
    assert run.info.status == "FINISHED"
    return run


def assert_flop_figures(run):
    metrics = run.data.metrics
    assert metrics["flops_per_example"] > 0
    assert metrics["achieved_flops_per_sec"] == pytest.approx(
        metrics["flops_per_example"] * metrics["steady_examples_per_sec"], rel=1e-6)


def test_keras_app_trains_under_keras3(xpdist):
    run = finished(xpdist, "model=keras_app", "model.architecture=MobileNetV2", "keras=keras3", *TINY_IMAGES)
    assert run.data.params["model.architecture"] == "MobileNetV2" and run.data.params["keras"] == "keras3"
    assert_flop_figures(run)
    assert "mfu" not in run.data.metrics  # a CPU with no devices.peak_flops: no peak to divide by
    # MobileNetV2 at 32x32 (alpha 1): about 6 MFLOPs forward, so 3 x that trains one example.
    assert 10e6 < run.data.metrics["flops_per_example"] < 40e6


def test_transformer_trains_under_tf_keras_with_a_given_peak(xpdist):
    run = finished(xpdist, "model=transformer", "keras=legacy", "devices.peak_flops=1e12", *TINY_TOKENS)
    assert run.data.params["keras"] == "legacy" and run.data.params["model.num_layers"] == "2"
    assert_flop_figures(run)
    metrics = run.data.metrics
    assert metrics["mfu"] == pytest.approx(metrics["achieved_flops_per_sec"] / 1e12, rel=1e-6)
    # Hand count of the matrix products, per token and layer: q, k, v, output projections
    # 4 x 16 x 16, feed-forward 2 x 16 x 32, attention scores and sum 2 x 16 (positions) x 16;
    # x 2 FLOPs x 16 tokens x 2 layers, + the output Dense (16 x 2); training is about 3 x that.
    forward = 2 * (16 * 2 * (4 * 16 * 16 + 2 * 16 * 32 + 2 * 16 * 16) + 16 * 2)
    assert metrics["flops_per_example"] == pytest.approx(3 * forward, rel=0.15)


def test_cnn_flops_per_example_is_the_hand_count(xpdist, tmp_path):
    """Also: the count is kept for the next run of the same step, which reads it back."""
    # Two CLI runs: over 60 s when the machine is busy (72 s beside a whole suite here).
    kept = tmp_path / "flops-kept"
    env = {flops.CACHE_ENV: str(kept)}
    run = finished(xpdist, "model=cnn", "model.filters=[32,64]", *TINY_IMAGES, env=env)
    # Hand count, 32x32x3 images, 10 classes: conv 3x3 "same" of 32 filters at 32x32 over 3
    # channels, 2x2 max-pool, conv of 64 filters at 16x16 over 32 channels, pool, average, Dense
    # 64 -> 10. A multiply-add is 2 FLOPs; training (forward, gradients of inputs and weights)
    # is 3 x the forward count. Pooling, biases and the loss add the last 0.7%.
    forward = 2 * (32 * 32 * 32 * 3 * 3 * 3 + 16 * 16 * 64 * 3 * 3 * 32 + 64 * 10)
    assert run.data.metrics["flops_per_example"] == pytest.approx(3 * forward, rel=0.01)
    assert_flop_figures(run)
    # Counting runs after training, so it is not part of first_step_s; it must stay cheap anyway.
    assert run.data.metrics["flops_count_s"] < 2.0

    (count,) = kept.iterdir()
    assert json.loads(count.read_text()) == {"flops_per_example": run.data.metrics["flops_per_example"]}
    count.write_text(json.dumps({"flops_per_example": 12345}))  # what only a read-back can log
    again = finished(xpdist, "model=cnn", "model.filters=[32,64]", *TINY_IMAGES, env=env, runs=2)
    assert again.data.metrics["flops_per_example"] == 12345


LIST_APPS = ("import json, tensorflow as tf; "
             "print(json.dumps(sorted(n for n in dir(tf.keras.applications) if n[0].isupper())))")


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_every_listed_architecture_exists_in_both_keras_flavours(legacy):
    out = subprocess.run([sys.executable, "-c", LIST_APPS], env=xpdist_env({"TF_USE_LEGACY_KERAS": legacy}),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert set(keras_apps.ARCHITECTURES) <= set(json.loads(out.splitlines()[-1]))
