"""cluster=local: the one task process, started by the driver on this machine."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.clusters import ClusterBase


@dataclass
class LocalCluster(ClusterBase):
    name: str = "local"


CONFIG = LocalCluster
