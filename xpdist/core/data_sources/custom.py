"""dataset=custom: the user's own function, whose size the config declares."""

from __future__ import annotations

from dataclasses import dataclass, field
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Optional

from xpdist.core.data_sources import DataSourceSpec, DatasetBase
from xpdist.core.errors import ConfigError
from xpdist.core.rules import open_mapping
from xpdist.core.targets import check_target

@dataclass
class CustomDataset(DatasetBase):
    name: str = "custom"
    # Dotted path of the user's function fn(input_context, batch_size, split, **kwargs)
    # returning a tf.data.Dataset of (features, labels) batches; see docs/data.md.
    _target_: str = "xpdist.task.data_sources.custom.example_dataset"
    # Extra keyword arguments for the function. Add one with dataset.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)
    # Training examples per epoch (its steps per epoch: this // global batch). null: the
    # size is unknown, and trainer.steps_per_epoch must be set.
    num_examples: Optional[int] = None
    # Validation examples per epoch (0: no validation, the function is not asked for it).
    num_validation_examples: int = 0
    # Classes of integer labels (labels 0..N-1); 0: labels are regression targets.
    num_classes: int = 0


class Custom(DataSourceSpec):
    name = "custom"
    config = CustomDataset
    # The function shuffles, caches and shards its data itself; xpdist repeats and prefetches it.
    validation_fix = "Set dataset.validation_split=0 and use dataset.num_validation_examples."
    # Validation: the function's split="validation" data, whose size the config declares.
    validation_key, validation_example = "num_validation_examples", "128"
    honours = ("prefetch",)

    def split_sizes(self, cfg, launch_dir: Path, global_batch: int):
        """Declared: dataset.num_examples, or trainer.steps_per_epoch global batches where it is null."""
        ds = cfg.dataset
        n_train = ds.num_examples if ds.num_examples is not None else (cfg.trainer.steps_per_epoch or 0) * global_batch
        return int(n_train), int(ds.num_validation_examples)

    def preflight(self, cfg, launch_dir: Path) -> None:
        super().preflight(cfg, launch_dir)
        check_target(cfg, "dataset", "Give module.function of a function that returns a tf.data.Dataset "
                     "(docs/data.md), with its package installed or on PYTHONPATH.")
        if cfg.dataset.num_examples is None and cfg.trainer.steps_per_epoch is None:
            raise ConfigError("trainer.steps_per_epoch", None, "dataset=custom with dataset.num_examples=null has "
                              "no known size, so an epoch has no length",
                              "Set trainer.steps_per_epoch=N, or dataset.num_examples to the examples per epoch.")

    def record(self, cfg, launch_dir: Path):
        """The function and its arguments identify the data."""
        ds = cfg.dataset
        described = json.dumps({"target": ds._target_, "kwargs": dict(ds.kwargs)}, sort_keys=True, default=str)
        described += f"|seed={cfg.seed}"
        source = (ds._target_, hashlib.sha256(described.encode()).hexdigest()[:16])
        return {"train": source, "validation": source}

    def record_name(self, cfg) -> str:
        return cfg.dataset._target_.rsplit(".", 1)[-1]


SPEC = Custom()
