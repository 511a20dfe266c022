"""cluster=slurm: one task per SLURM task, started by srun."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xpdist.core.clusters import ClusterBase


@dataclass
class SlurmCluster(ClusterBase):
    name: str = "slurm"
    place: ClassVar[str] = "SLURM"
    # strategy=parameter_server: SLURM tasks after the chief that are parameter servers.
    ps: int = 0
    # The task with index i on its node listens on port_base + i (SlurmClusterResolver's
    # layout); move it where 8888 and up are taken on the nodes.
    port_base: int = 8888


CONFIG = SlurmCluster
