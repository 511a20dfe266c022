"""What xpdist asks of TensorFlow's and Keras' internals, checked against the installed
releases: the training iterators of one-process strategies outlive the training call
(destroying a strategy's multi-device iterator waits for tf.data's autotuner thread, which
sleeps up to 60 s: the dead time after the last epoch; docs/performance-details.md), and both
Keras flavours still read the attributes that keep a step's logs as tensors
(task/train/fit.py logs_stay_tensors)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from tests.helpers import xpdist_env

pytestmark = pytest.mark.slow


def test_an_iterator_outlives_the_function_that_made_it():
    import tensorflow as tf

    from xpdist.task.train.common import keep_iterators

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")

    def train():  # as runner.run: everything it made is freed when it returns
        dataset = tf.data.Dataset.range(64).batch(8).repeat()
        distributed = keep_iterators(strategy.experimental_distribute_dataset(dataset))
        iterator = iter(distributed)
        next(iterator)
        return weakref.ref(iterator)

    kept = train()
    gc.collect()
    assert kept() is not None, "the iterator was destroyed with its training function"


CALLBACK_LIST = r"""
import os, sys
import tensorflow as tf
from xpdist.task.train.fit import logs_stay_tensors
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
print("RESULT", read([quiet]), read([quiet, plain]))
"""


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_both_kerases_still_read_the_marks_that_keep_logs_as_tensors(legacy):
    done = subprocess.run([sys.executable, "-c", CALLBACK_LIST], env=xpdist_env({"TF_USE_LEGACY_KERAS": legacy}),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("RESULT ", 1)[1].split() == ["True", "False"], done.stdout
