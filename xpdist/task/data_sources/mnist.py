"""dataset=mnist: keras.datasets.mnist's training images, downloaded on first use."""

from __future__ import annotations

from xpdist.task.data_sources._arrays import in_memory


def load(cfg, plan, launch_dir, strategy=None):
    return in_memory(cfg, plan, launch_dir, _make)


def _make(cfg, rng, launch_dir):
    import tensorflow as tf

    try:
        (x, y), _ = tf.keras.datasets.mnist.load_data()
    except Exception as err:  # urllib, SSL and HTTP errors all mean "could not download"
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise RuntimeError(
            f"dataset=mnist could not be downloaded ({reason}); it needs network access. "
            "Offline, use dataset=digits, or dataset=npz with your own copy.") from err
    return (x[..., None] / 255.0).astype("float32"), y.astype("int32")
