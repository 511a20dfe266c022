"""Helpers for the unit tests: plain configs as job.run sees them."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from hydra import compose as hydra_compose, initialize_config_dir
from omegaconf import OmegaConf

from xpdist.core.schema import register_configs
from xpdist.driver.job import plain_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def plain(*overrides: str):
    """The config as job.run hands it to preflight: composed, resolved, enums as names.

    Composed without the hydra node, which halves the time a compose takes, and once per
    distinct list of overrides in a test process (about 0.1 s each); every call gets its own
    copy. The composition does not depend on the environment (no oc.env in conf/).
    """
    return OmegaConf.create(copy.deepcopy(_composed(tuple(overrides))))


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    return plain_config(cfg)


def recording_model(input_shape, num_outputs, **kwargs):
    """A model._target_ for tests: returns what it was called with instead of a model."""
    return {"input_shape": input_shape, "num_outputs": num_outputs, **kwargs}
