"""Loads the user's packages that add options to xpdist, once per process, in the driver and the task.

A package adds its strategies, engines and data sources by registering them
(xpdist/core/options.py) in a module that xpdist imports at start, named one of two ways:

- an entry point of the group `xpdist.options` in the package's metadata, the way an
  installed package announces itself (pyproject.toml:
  `[project.entry-points."xpdist.options"]` then `my_options = "my_pkg.xpdist_options"`);
- the environment variable XPDIST_OPTIONS, module names separated by commas, for a project
  that is not installed (on PYTHONPATH); the task processes inherit it from the driver.

Both processes import the same modules, so a registration must not import TensorFlow (the
driver never does) nor its task half (xpdist/core/options.py takes that as a path). A value
`module:function` names a function called with no argument instead.
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata
from typing import List

GROUP = "xpdist.options"
ENV = "XPDIST_OPTIONS"


class _State:
    loaded = False


def load() -> None:
    """Imports every module the entry points of GROUP and XPDIST_OPTIONS name, the first time only.

    Raises:
        ImportError: a module named cannot be imported; the message names where it was named.
    """
    if _State.loaded:
        return
    _State.loaded = True  # first: a module loaded here registers, and registering asks again
    for where, value in named():
        module, _, function = value.partition(":")
        try:
            loaded = importlib.import_module(module.strip())
        except ImportError as err:
            raise ImportError(f"xpdist: the options package {value} ({where}) cannot be imported: {err}") from err
        if function:
            getattr(loaded, function.strip())()


def named() -> List[tuple]:
    """(where it is named, "module[:function]") of every package to load, entry points first."""
    found = [(f"entry point {ep.name} of {GROUP}", ep.value) for ep in metadata.entry_points(group=GROUP)]
    found += [(ENV, name.strip()) for name in os.environ.get(ENV, "").split(",") if name.strip()]
    return found
