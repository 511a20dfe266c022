"""The `cluster` options, core half: each option's schema, read by the driver and the task alike.

Each module of this package (local.py, localhost.py, ...) is one `cluster` option and holds
its `CONFIG`, the dataclass of its keys, whose `place` says where each task learns its part of
the cluster (xpdist/core/clusterenv.py). The engine that runs the option's tasks is the
driver's module of the same name in xpdist/driver/engines/: the driver needs both, the task
only the schema (its place), and the key checks, --help and the configuration reference read
the option list from CLUSTERS.

Adding an engine `foo` is three files: `foo.py` here, `xpdist/driver/engines/foo.py` and
`conf/cluster/foo.yaml`. A user's package registers its own with
`xpdist.core.options.register_engine` (docs/contributing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from omegaconf import MISSING

from xpdist.core.registry import Registry


@dataclass
class ClusterBase:
    # Fixed by each option: choose another with cluster=NAME.
    name: str = MISSING
    # Your own subclass of this option's engine class (module.Class, see docs/contributing.md,
    # "Adding an engine"), run in its place with the option's keys. null: xpdist's engine.
    _target_: Optional[str] = None
    # Not a key: where each task learns its part of the cluster (core/clusterenv.py places):
    # nothing to read for one process, the TF_CONFIG variable, or srun's SLURM_* variables.
    place: ClassVar[str] = ""


CLUSTERS: Registry[type] = Registry("cluster", package=__name__, attribute="CONFIG")


def get(name: str) -> type:
    """The schema of cluster=name.

    Raises:
        KeyError: no such option; the message lists the known ones and the nearest.
    """
    return CLUSTERS.get(name)
