"""The training iterators of one-process strategies outlive the training call: destroying a
strategy's multi-device iterator waits for tf.data's autotuner thread, which sleeps up to 60 s
(the dead time after the last epoch; docs/performance-details.md)."""

from __future__ import annotations

import gc
import weakref

import pytest

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
