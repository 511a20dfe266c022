"""dataset=plugin: a data source of the user's own package, named by `dataset._target_`.

The YAML of the user's option (in their `--config-dir`) extends `plugin` and names a
`DataSourceSpec` subclass of theirs, which Hydra's `get_class` resolves in the driver and in
the task; `of(cfg)` then answers with that class's spec, so the plan, preflight and the
recorded inputs treat it as any of xpdist's sources. Its module must import no TensorFlow at
module level: the driver imports it. The task half is the spec's own `arrays(cfg, rng,
launch_dir) -> (x, y)`: NumPy arrays that xpdist shuffles, splits, batches and prefetches
(xpdist/task/data_sources/plugin.py), so every shared key of its schema is honoured. A
streamed pipeline of the user's own is `dataset=custom`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict

from hydra.utils import get_class

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec
from xpdist.core.errors import ConfigError
from xpdist.core.rules import open_mapping
from xpdist.core.targets import check_target

FIX = ("Give module.Class of an InMemorySpec subclass (docs/data.md, 'A source of your own'), with its "
       "package installed or on PYTHONPATH.")


@dataclass
class PluginDataset(InMemoryDataset):
    name: str = "plugin"
    # Dotted path of your own source: an InMemorySpec subclass (its driver half: size, checks)
    # with an arrays(cfg, rng, launch_dir) method returning (x, y) NumPy arrays; docs/data.md.
    _target_: str = "xpdist.core.data_sources.plugin.GaussianBlobs"
    # Your source's own keys, read by your class. Add one with dataset.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)


class Plugin(InMemorySpec):
    name = "plugin"
    config = PluginDataset

    def resolve(self, cfg) -> InMemorySpec:
        """The spec of the user's class that dataset._target_ names.

        Raises:
            ConfigError: naming dataset._target_, when it cannot be imported or is no InMemorySpec.
        """
        check_target(cfg, "dataset", FIX)
        return _spec(cfg.dataset._target_)


SPEC = Plugin()


@lru_cache(maxsize=None)
def _spec(target: str) -> InMemorySpec:
    """One instance per class: the driver and the task ask it many times per run."""
    try:
        cls = get_class(target)
    except Exception as err:  # ImportError, AttributeError, or a module that raises on import
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise ConfigError("dataset._target_", target, f"cannot be resolved ({reason})", FIX) from None
    if not (isinstance(cls, type) and issubclass(cls, InMemorySpec)) or not callable(getattr(cls, "arrays", None)):
        raise ConfigError("dataset._target_", target, "not an InMemorySpec subclass with an arrays() method", FIX)
    return cls()


class GaussianBlobs(InMemorySpec):
    """dataset.kwargs: num_examples (default 256), num_features (4), num_classes (3), spread (0.5).

    The driver half (size, input_shape) runs in the driver, without TensorFlow; arrays() runs
    in the task and returns NumPy arrays, which xpdist shuffles, splits and batches.
    """

    name = "gaussian_blobs"

    def size(self, cfg, launch_dir) -> int:
        return int(cfg.dataset.kwargs.get("num_examples", 256))

    def input_shape(self, cfg, launch_dir):
        return (int(cfg.dataset.kwargs.get("num_features", 4)),)

    def arrays(self, cfg, rng, launch_dir):
        import numpy as np

        kw = cfg.dataset.kwargs
        n, classes = self.size(cfg, launch_dir), int(kw.get("num_classes", 3))
        centres = rng.normal(size=(classes, self.input_shape(cfg, launch_dir)[0])) * 2
        y = rng.integers(0, classes, size=n)
        x = centres[y] + float(kw.get("spread", 0.5)) * rng.normal(size=(n, centres.shape[1]))
        return x.astype("float32"), y.astype(np.int32)
