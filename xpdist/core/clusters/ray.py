"""cluster=ray: the tasks run as Ray actors in a placement group of a Ray cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Dict, Optional

from xpdist.core.clusters import ClusterBase
from xpdist.core import rules
from xpdist.core.rules import open_mapping


class RayPlacement(Enum):
    # One task per node where the cluster has nodes enough (Ray's SPREAD, best effort).
    spread = 0
    # As few nodes as possible (Ray's PACK, best effort).
    pack = 1


@dataclass
class RayCluster(ClusterBase):
    name: str = "ray"
    place: ClassVar[str] = "TF_CONFIG"
    # The Ray cluster: auto (the one this machine belongs to: RAY_ADDRESS or `ray start`),
    # local (a private one-node Ray started for the run and stopped after), or host:port of
    # the head's GCS (run xpdist on a node of that cluster).
    address: str = "auto"
    # Number of worker tasks (strategy=parameter_server adds a chief, the coordinator).
    workers: int = 2
    # Number of parameter-server tasks (strategy=parameter_server only).
    ps: int = 0
    # CPUs Ray reserves for each task (its bundle in the placement group).
    cpus_per_task: float = 1.0
    # GPUs Ray reserves for each task; Ray sets CUDA_VISIBLE_DEVICES for it.
    gpus_per_task: float = 0.0
    # Custom Ray resources each task needs, e.g. {accelerator_a: 1}; empty: none.
    resources: Dict[str, float] = field(default_factory=open_mapping)
    # How the placement group lays the tasks on nodes: spread or pack.
    placement: RayPlacement = RayPlacement.spread
    # A lost node with no replacement: go on with the workers left, as long as at least this
    # many remain (multi_worker_mirrored; the plan is redone at the new size, the global batch
    # kept, and a resize counts as one of cluster.max_restarts). null: restart every task on
    # as many workers as before, waiting for Ray to place them.
    min_workers: Optional[int] = field(default=None, metadata=rules.at_least(1, "Use e.g. cluster.min_workers=1."))
    # Restart every task this many times after a task or its node is lost, or fails with a
    # network-type error; never after an exception in user code or config.
    max_restarts: int = 0
    # Seconds to wait for the placement group, then for every task to start.
    start_timeout_s: float = 120.0
    # Shared storage every node mounts at the same path (NFS, a bucket's FUSE mount), for the
    # checkpoints and backups a restarted task resumes from on another node; null: each task
    # keeps them on its node and the driver brings the chief's back (a restart on the same nodes resumes).
    checkpoint_dir: Optional[str] = None


CONFIG = RayCluster
