"""What xpdist asks of TensorFlow's and Keras' internals, checked against the installed
releases: the training iterators of one-process strategies outlive the training call
(destroying a strategy's multi-device iterator waits for tf.data's autotuner thread, which
sleeps up to 60 s: the dead time after the last epoch; docs/performance.md), and both
Keras flavours still read the attributes that keep a step's logs as tensors
(task/train/fit.py logs_stay_tensors)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import xpdist_env

pytestmark = pytest.mark.slow


# One interpreter per Keras flavour checks both (each costs a TensorFlow import); the
# iterator's check does not depend on the flavour, and holds under both.
CHECKS = r"""
import gc, json, os, sys, weakref
import tensorflow as tf
from xpdist.task.train.common import keep_iterators
from xpdist.task.train.fit import logs_stay_tensors

strategy = tf.distribute.OneDeviceStrategy("/cpu:0")


def train():  # as runner.run: everything it made is freed when it returns
    dataset = tf.data.Dataset.range(64).batch(8).repeat()
    distributed = keep_iterators(strategy.experimental_distribute_dataset(dataset))
    iterator = iter(distributed)
    next(iterator)
    return weakref.ref(iterator)


kept = train()
gc.collect()

keras = tf.keras
quiet = logs_stay_tensors(keras.callbacks.Callback())
plain = keras.callbacks.Callback()
plain.on_train_batch_end = lambda batch, logs=None: None  # a batch hook without the marks
model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
if os.environ.get("TF_USE_LEGACY_KERAS") == "1":  # tf-keras hands tensors only if all say so
    read = lambda cbs: keras.callbacks.CallbackList(cbs, model=model)._supports_tf_logs
else:  # Keras 3 runs batch hooks off the training thread only if all say so, on a backend it
    # deems thread-safe (not TensorFlow in Keras 3.15: the mark is read, and changes nothing yet)
    from keras.src import backend
    backend.IS_THREAD_SAFE = True
    read = lambda cbs: keras.callbacks.CallbackList(cbs, model=model)._async_train
print("RESULT " + json.dumps({"iterator_kept": kept() is not None, "marks": [read([quiet]), read([quiet, plain])]}))
"""


@pytest.fixture(scope="module")
def checked():
    """{TF_USE_LEGACY_KERAS: what CHECKS found in a fresh interpreter of that flavour}."""
    found = {}
    for legacy in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", CHECKS], env=xpdist_env({"TF_USE_LEGACY_KERAS": legacy}),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        found[legacy] = json.loads(done.stdout.split("RESULT ", 1)[1])
    return found


def test_an_iterator_outlives_the_function_that_made_it(checked):
    for legacy in ("0", "1"):
        assert checked[legacy]["iterator_kept"], "the iterator was destroyed with its training function"


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_both_kerases_still_read_the_marks_that_keep_logs_as_tensors(checked, legacy):
    assert checked[legacy]["marks"] == [True, False], checked[legacy]
