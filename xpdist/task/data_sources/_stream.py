"""Splits and Streams: a streamed data set in the place of xpdist.task.data's arrays.

A split stands where the arrays' x would be, so the trainers call the same three functions of
xpdist.task.data whatever the source: global batches (Model.fit), a per-pipeline dataset
function (distribute_datasets_from_function) and a parameter-server worker's batches.
`FileSplit` serves the sources that yield examples (tfrecord, image_folder), which xpdist
caches, shuffles, shards and batches; a source whose own code batches (custom) brings its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

from xpdist.task.data_sources import _pipeline


class DataError(RuntimeError):
    """Bad data found by the task: the message names the config key and the file or function."""


@dataclass
class Split:
    """One split ("train" or "validation") of a streamed source, batched on demand."""

    cfg: Any
    plan: Any
    launch_dir: Path
    split: str
    strategy: Any

    def validation(self, tf, ds, context=None, endless: bool = False):
        """The batches of validation_steps global steps, with that cardinality declared: Keras
        3's fit re-reads a finite validation set every epoch only when its length is known (a
        file reader's is not), else its second epoch stops with StopIteration.

        ds holds global batches, or with an input context one pipeline's per-replica batches,
        which feed every replica of its worker: a step takes one per replica there (under
        mirrored one pipeline feeds both replicas, and taking validation_steps batches of it
        validated on half the examples).

        endless: those batches over and over, for a distributed dataset handed to Model.fit,
        which reads validation_steps steps an epoch: the distributed dataset reports its
        pipeline's cardinality, not its steps, and Keras 3 keeps the iterator of a set whose
        cardinality exceeds the steps, which then ran dry in the second epoch (StopIteration).
        """
        steps = self.plan.validation_steps
        if context is not None:
            steps *= context.num_replicas_in_sync // context.num_input_pipelines
        if endless:
            return ds.take(steps).repeat()
        if self.plan.keras != "keras3":  # tf-keras re-reads it anyway; and under multi-worker
            return ds.take(steps)       # auto-sharding the declared length failed the assertion
        return ds.take(steps).apply(tf.data.experimental.assert_cardinality(steps))


@dataclass
class FileSplit(Split):
    """A split of a source module that yields examples: `examples(tf, split, seed, context)`.

    The module's `examples(tf, cfg, launch_dir, split, training, seed, context)` returns the
    (features, label) examples of one input pipeline and whether the pipeline must still shard
    them by example; its `num_files(cfg, launch_dir, split)` counts the files it reads (0: one
    list Keras reads, which only sharding by example can split).
    """

    source: Any = None

    def _examples(self, tf, training: bool, seed, context=None):
        return self.source.examples(tf, self.cfg, self.launch_dir, self.split, training, seed, context)

    def global_batches(self, tf, training: bool):
        """Global batches for Model.fit, with dataset.auto_shard_policy for the strategy to apply."""
        examples, _ = self._examples(tf, training, self.cfg.seed)
        ds = _pipeline.batches(tf, examples, self.cfg, self.plan.global_batch_size, training, self.cfg.seed,
                               num_files=self.source.num_files(self.cfg, self.launch_dir, self.split),
                               num_workers=self.plan.num_workers)
        return ds if training else self.validation(tf, ds)

    def dataset_fn(self, tf, training: bool):
        """Per-replica batches of one input pipeline, for distribute_datasets_from_function."""
        def fn(context):
            per_replica = context.get_per_replica_batch_size(self.plan.global_batch_size)
            examples, by_example = self._examples(tf, training, self.cfg.seed, context)
            ds = _pipeline.batches(tf, examples, self.cfg, per_replica, training, self.cfg.seed, context, by_example)
            return ds if training else self.validation(tf, ds, context)

        return fn

    def worker_batches(self, tf):
        """A parameter_server worker's global batches, shuffled with the worker's own seed."""
        seed = _pipeline.worker_seed(tf)
        examples, _ = self._examples(tf, True, seed)
        return _pipeline.batches(tf, examples, self.cfg, self.plan.global_batch_size, True, seed)


@dataclass
class Streams:
    """What the trainers read of a data set; the streamed counterpart of data.Arrays."""

    x_train: Split
    x_val: Optional[Split]
    kind: str
    num_outputs: int
    input_shape: Tuple[int, ...]
    y_train: None = None
    y_val: None = None


def streams(split_class, cfg, plan, launch_dir: Path, strategy, shape, kind: str, outputs: int, **fields) -> Streams:
    """The Streams of one source: its two splits (validation only where the plan has steps)."""
    train, val = (split_class(cfg, plan, launch_dir, s, strategy, **fields) for s in ("train", "validation"))
    return Streams(train, val if plan.validation_steps else None, kind, outputs, tuple(shape))
