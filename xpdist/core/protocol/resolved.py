"""The composed config, resolved once into the one object a job carries.

Hydra composes a config whose values may still be interpolations (`${...}`) and enums of the
schema. The driver resolves it once, here, and hands that one object to the checks, the
engine, the tracking and the job files; its plain-data form is made only where it is written
out (the job directory's config.yaml, the run's params).
"""

from __future__ import annotations

from typing import Any, Dict

from omegaconf import DictConfig, OmegaConf


def resolve(cfg: DictConfig) -> DictConfig:
    """The composed config resolved: interpolations replaced by their values, enums by their
    names, free of the schema's types and struct flag (a user's `_target_` option may carry
    keys of its own).

    Args:
        cfg: the config as Hydra composed it (the job's, without the hydra node).

    Returns:
        A new DictConfig; `cfg` is left as it was.
    """
    return OmegaConf.create(as_data(cfg))


def as_data(cfg: DictConfig) -> Dict[str, Any]:
    """The config as plain data (dicts, lists, scalars; enums as names), to write it out."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
