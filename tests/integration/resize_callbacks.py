"""A user callback for tests/integration/test_resize.py (callbacks=[custom]), for either Keras.

FailOnce subclasses Keras 3's Callback, FailOnceLegacy tf-keras' (a run under tf-keras, as
parameter_server's Model.fit, needs a callback of its own Keras). Each is made on first use,
so that a process imports only the Keras its run uses.
"""

import os


def _fail_once(base):
    class FailOnce(base):
        """Fails the training as `epoch` (1-based) begins, unless the file `marker` exists: the
        test makes it once the run has failed, so the resumed run, with the same config, trains on."""

        def __init__(self, epoch: int, marker: str):
            super().__init__()
            self.epoch, self.marker = int(epoch), marker

        def on_epoch_begin(self, epoch, logs=None):
            if epoch + 1 == self.epoch and not os.path.exists(self.marker):
                raise RuntimeError(f"planned failure at epoch {self.epoch}")

    return FailOnce


def __getattr__(name):
    if name == "FailOnce":
        import keras

        return _fail_once(keras.callbacks.Callback)
    if name == "FailOnceLegacy":
        import tf_keras

        return _fail_once(tf_keras.callbacks.Callback)
    raise AttributeError(name)
