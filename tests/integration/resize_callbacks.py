"""A user callback for tests/integration/test_resize.py (callbacks=[custom])."""

import os

import keras


class FailOnce(keras.callbacks.Callback):
    """Fails the training as `epoch` (1-based) begins, unless the file `marker` exists: the
    test makes it once the run has failed, so the resumed run, with the same config, trains on."""

    def __init__(self, epoch: int, marker: str):
        super().__init__()
        self.epoch, self.marker = int(epoch), marker

    def on_epoch_begin(self, epoch, logs=None):
        if epoch + 1 == self.epoch and not os.path.exists(self.marker):
            raise RuntimeError(f"planned failure at epoch {self.epoch}")
