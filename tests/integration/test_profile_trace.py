"""xpdist/task/measure/profile.py: a real TensorFlow profiler trace of a few Model.fit steps, read back
into a per-step breakdown that tells an input-bound step from a compute-bound one.

Each Keras flavour traces its two cases in one fresh interpreter (the flavour is fixed at
TensorFlow's import), one after the other, each into its own log directory.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import xpdist_env

pytestmark = pytest.mark.slow

FIT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
from xpdist.task.measure import profile

keras = tf.keras


def traced(slow_input, logdir):
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((384, 32, 32, 3), "float32"), np.zeros((384, 4), "float32")))
    ds = ds.batch(32)
    if slow_input:  # every batch takes 50 ms to read: the step waits on input
        def read(x, y):
            time.sleep(0.05)
            return x, y

        def slow(x, y):
            a, b = tf.numpy_function(read, [x, y], [tf.float32, tf.float32])
            a.set_shape([None, 32, 32, 3])
            b.set_shape([None, 4])
            return a, b
        ds = ds.map(slow).prefetch(1)
    model.fit(ds, epochs=1, verbose=0, callbacks=[profile.fit_callback(tf, keras, 3, 6, logdir, 12)])
    (trace,) = profile.trace_files(logdir)
    steps = profile.breakdown(trace)
    return {"steps": steps, "parts": profile.fractions(steps)}


def across_epochs(logdir):
    # Steps 5 and 6 of epochs of 6 steps run 2 to a call: epoch 0's last call and epoch 1's first.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=2)
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((48, 4), "float32"), np.zeros((48, 1), "float32")))
    model.fit(ds.batch(8).repeat(), epochs=2, steps_per_epoch=6, verbose=0,
              callbacks=[profile.fit_callback(tf, keras, 5, 6, logdir, 6, 2)])
    return [len(profile.breakdown(trace)) for trace in profile.trace_files(logdir)]


root = sys.argv[1]
found = {speed: traced(speed == "slow", f"{root}/{speed}") for speed in ("slow", "fast")}
found["across_epochs"] = across_epochs(f"{root}/across")
print("RESULT " + json.dumps(found))
"""


def traced(tmp_path, legacy: str) -> dict:
    """{"slow": ..., "fast": ...}: each case's steps and parts, traced in one interpreter."""
    done = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / "trace")],
                          env=xpdist_env({"TF_USE_LEGACY_KERAS": legacy}), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1])


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_an_input_bound_step_is_told_from_a_compute_bound_one(tmp_path, legacy):
    from xpdist.advisor import plan as advise_plan

    found = traced(tmp_path, legacy)
    slow, fast = found["slow"], found["fast"]
    for result in (slow, fast):
        assert len(result["steps"]) == 4  # steps 3, 4, 5 and 6
        for step in result["steps"]:
            parts = step["input_ms"] + step["communication_ms"] + step["compute_ms"]
            assert parts == pytest.approx(step["step_ms"], rel=1e-6)
    assert slow["parts"]["input_wait_fraction"] > 0.5
    assert fast["parts"]["input_wait_fraction"] < 0.3
    assert advise_plan.why_slow(slow["parts"]).endswith("waits on input: raise dataset.prefetch, cache the data or "
                                                         "make its reading cheaper")
    assert advise_plan.why_slow(fast["parts"]) == ""
    # trainer.profile_steps counts steps, not calls of several steps: one trace of the two calls
    # that hold steps 5 and 6, on either side of an epoch's end
    assert found["across_epochs"] == [2]


# ---- trainer.profile_steps in a real run --------------------------------------------------------

@pytest.mark.parametrize("trainer", ["fit", "ctl"])
def test_profile_steps_log_the_trace_and_where_the_steps_time_went(tmp_path, trainer):
    from tests.helpers import Xpdist

    xpdist = Xpdist(tmp_path)
    done = xpdist.run("strategy=mirrored", "devices.logical_cpus=2", f"trainer={trainer}", "model=cnn",
                      "model.filters=[8]", "dataset=synthetic_images", "dataset.image_shape=[16,16,3]",
                      "dataset.num_examples=512", "trainer.profile_steps=[2,4]", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run,) = xpdist.runs()
    metrics = run.data.metrics
    parts = [metrics[k] for k in ("input_wait_fraction", "communication_fraction", "compute_fraction")]
    assert sum(parts) == pytest.approx(1, abs=0.01) and all(0 <= p <= 1 for p in parts), metrics
    assert metrics["communication_fraction"] > 0, metrics  # two replicas all-reduce their gradients
    assert metrics["profiled_step_ms"] > 0
    client = xpdist.client()
    (task,) = client.list_artifacts(run.info.run_id, "profile")
    assert task.path == "profile/worker-0" and task.is_dir

    def files(path):
        for entry in client.list_artifacts(run.info.run_id, path):
            yield from files(entry.path) if entry.is_dir else [entry]

    traces = [f for f in files(task.path) if f.path.endswith(".xplane.pb")]
    assert len(traces) == 1 and traces[0].file_size > 0, [f.path for f in files(task.path)]
    assert "/plugins/profile/" in traces[0].path  # where TensorBoard's profile plugin looks
