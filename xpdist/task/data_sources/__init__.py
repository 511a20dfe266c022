"""The data source seam, task half: how tf.data reads each `dataset` option.

Each module of this package is one data source, named as its driver half in
xpdist/core/data_sources/, and defines `load(cfg, plan, launch_dir, strategy)`: an in-memory
source returns `_arrays.Arrays` (NumPy arrays that xpdist.task.data shuffles and batches), a
streamed one `_stream.Streams`, whose splits stand where the arrays' x would be. A source may
also define `explain(tf, cfg, launch_dir, err)`: the error to report for a TensorFlow error
while training (tfrecord names the bad file). Modules starting with `_` are shared helpers.
TensorFlow is imported inside functions only: runs in the task process. `in_memory` (and
its `Arrays`) is public: a user's in-memory source's `load` returns `in_memory(cfg, plan,
launch_dir, make)`, with `make(cfg, rng, launch_dir) -> (x, y)` (xpdist/core/options.py).
"""

from __future__ import annotations

from types import ModuleType

from xpdist.core.registry import Registry
from xpdist.task.data_sources._arrays import Arrays, in_memory  # noqa: F401  (public: a user's source's task half)

# A user's source (xpdist.core.options.register_data_source) adds its task half by path.
SOURCES: Registry[ModuleType] = Registry("dataset", package=__name__, half="task")
