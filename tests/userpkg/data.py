"""A user's own data functions, outside xpdist, used through dataset._target_ in tests."""

import numpy as np


def blobs(input_context, batch_size, split, num_examples=256):
    """Three Gaussian blobs in 4 dimensions, integer labels 0..2, sharded by input pipeline."""
    import tensorflow as tf

    rng = np.random.default_rng(0 if split == "train" else 1)
    y = rng.integers(0, 3, size=num_examples).astype("int64")
    x = (rng.standard_normal((num_examples, 4)) + y[:, None]).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(batch_size, drop_remainder=True)


def raises(input_context, batch_size, split):
    raise ValueError("the data bucket is not reachable")


def not_a_dataset(input_context, batch_size, split):
    return [1, 2, 3]


def binary(input_context, batch_size, split, num_examples=256):
    """A binary task for a model with one logit: 0/1 float labels of shape (N, 1), two
    overlapping Gaussian blobs in 4 dimensions, sharded by input pipeline."""
    import tensorflow as tf

    rng = np.random.default_rng(2 if split == "train" else 3)
    y = rng.integers(0, 2, size=(num_examples, 1)).astype("float32")
    x = (rng.standard_normal((num_examples, 4)) + 1.5 * y).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(batch_size, drop_remainder=True)
