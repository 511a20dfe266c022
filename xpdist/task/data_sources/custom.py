"""dataset=custom: the user's own tf.data pipeline, and an example of the function it names."""

from __future__ import annotations


def example_dataset(input_context, batch_size, split, num_features=8, num_examples=512, seed=0):
    """An example of the function dataset._target_ names: random regression data.

    xpdist calls it in every task that reads data, once per input pipeline:

        fn(input_context, batch_size, split, **dataset.kwargs)

    Args:
        input_context: the tf.distribute.InputContext of this input pipeline (from
            strategy.distribute_datasets_from_function), or None where the strategy gives
            none. Shard by it: each pipeline must read its own part of the data
            (`ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)`,
            or better, a disjoint set of files).
        batch_size: examples per batch to return: the per-replica batch
            (dataset.per_replica_batch_size; the global batch is that x the replicas).
        split: "train" or "validation" (asked only when dataset.num_validation_examples > 0).
        num_features, num_examples, seed: this example's own keyword arguments, set with
            dataset.kwargs.NAME=VALUE.

    Returns:
        A tf.data.Dataset of (features, labels) batches of batch_size, or None for "validation"
        (no validation). Training data may be finite: xpdist repeats it. Labels are integer
        class indices 0..dataset.num_classes-1, or float targets where dataset.num_classes=0.
        The model's input shape and outputs are read from the dataset's element_spec.
    """
    import tensorflow as tf

    if split == "validation":
        return None
    rng = tf.random.Generator.from_seed(seed)
    x = rng.normal((num_examples, num_features))
    y = tf.reduce_mean(x, axis=1, keepdims=True)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(num_examples, seed=seed).batch(batch_size, drop_remainder=True)
