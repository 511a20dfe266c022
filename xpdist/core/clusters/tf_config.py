"""cluster=tf_config: the cluster manager started this process as one task of TF_CONFIG's cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xpdist.core.clusters import ClusterBase


@dataclass
class TfConfigCluster(ClusterBase):
    name: str = "tf_config"
    place: ClassVar[str] = "TF_CONFIG"


CONFIG = TfConfigCluster
