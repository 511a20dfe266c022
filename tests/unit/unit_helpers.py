"""Helpers for the unit tests: plain configs as job.run sees them."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from tests.helpers import compose
from xpdist.core.protocol.resolved import as_data

CONF = Path(__file__).resolve().parents[2] / "conf"


def plain(*overrides: str):
    """The config as job.run hands it to preflight: composed, resolved, enums as names.

    Made from tests.helpers.compose's composition (once per distinct list of overrides in a
    test process, shared with the tests that compose with the hydra node), without the
    hydra node; every call gets its own copy.
    """
    return OmegaConf.create(copy.deepcopy(_plain(tuple(overrides))))


@functools.lru_cache(maxsize=None)
def _plain(overrides: tuple) -> dict:
    cfg = compose(overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    return as_data(cfg)


def recording_model(input_shape, num_outputs, **kwargs):
    """A model._target_ for tests: returns what it was called with instead of a model."""
    return {"input_shape": input_shape, "num_outputs": num_outputs, **kwargs}
