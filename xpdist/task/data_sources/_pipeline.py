"""The shared input options of the sources that yield examples: shard, cache, shuffle, batch, prefetch."""

from __future__ import annotations

from typing import Optional


def options(tf, cfg, num_files: int = 0, num_workers: int = 1):
    """tf.data.Options carrying dataset.auto_shard_policy, read when a strategy distributes a dataset.

    auto with fewer files than workers is made data: TensorFlow's own AUTO failed a
    multi-worker run here on a single validation file (InvalidArgumentError).
    """
    policies = tf.data.experimental.AutoShardPolicy
    policy = cfg.dataset.auto_shard_policy
    if policy == "auto" and num_files and num_files < num_workers:
        policy = "data"
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = {
        "auto": policies.AUTO, "file": policies.FILE, "data": policies.DATA, "off": policies.OFF,
    }[policy]
    return opts


def shard_files(files, cfg, context) -> tuple:
    """(files, shard_examples) for one input pipeline of distribute_datasets_from_function.

    No strategy shards a dataset function's output, so the pipeline shards itself as the
    policy says: by file where every pipeline gets at least one file, else by example.
    """
    if context is None or context.num_input_pipelines == 1 or cfg.dataset.auto_shard_policy == "off":
        return files, False
    by_file = cfg.dataset.auto_shard_policy == "file" or (
        cfg.dataset.auto_shard_policy == "auto" and len(files) >= context.num_input_pipelines)
    if by_file:
        return files[context.input_pipeline_id::context.num_input_pipelines], False
    return files, True


def batches(tf, examples, cfg, batch_size: int, training: bool, seed, context=None, shard_examples=False,
            num_files: int = 0, num_workers: int = 1):
    """Examples -> cached, shuffled, repeated (training), batched and prefetched batches."""
    ds = cfg.dataset
    if shard_examples:
        examples = examples.shard(context.num_input_pipelines, context.input_pipeline_id)
    if ds.cache == "memory":
        examples = examples.cache()
    elif ds.cache != "none":
        suffix = "" if context is None else f"-{context.input_pipeline_id}"
        examples = examples.cache(ds.cache + ("-validation" if not training else "") + suffix)
    if training:
        if ds.shuffle_buffer:
            examples = examples.shuffle(ds.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        examples = examples.repeat()
    out = examples.batch(batch_size, drop_remainder=bool(ds.drop_remainder) or training)
    return prefetch(tf, out, cfg).with_options(options(tf, cfg, num_files, num_workers))


def prefetch(tf, ds, cfg):
    if cfg.dataset.prefetch == 0:
        return ds
    return ds.prefetch(tf.data.AUTOTUNE if cfg.dataset.prefetch < 0 else int(cfg.dataset.prefetch))


def worker_seed(tf) -> Optional[object]:
    """A parameter_server worker's shuffle seed from its clock (see xpdist.task.data.worker_batches)."""
    return tf.cast(tf.timestamp() * 1e6, tf.int64) % (2 ** 31)
