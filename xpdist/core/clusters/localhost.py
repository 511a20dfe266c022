"""cluster=localhost: a multi-process TensorFlow cluster on 127.0.0.1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xpdist.core.clusters import ClusterBase


@dataclass
class LocalhostCluster(ClusterBase):
    name: str = "localhost"
    place: ClassVar[str] = "TF_CONFIG"
    # Number of worker processes.
    workers: int = 2
    # Number of parameter-server processes (strategy=parameter_server only).
    ps: int = 0
    # Restart the whole cluster this many times after a task is killed by
    # a signal, is lost, or fails with a network-type error (UnavailableError,
    # DeadlineExceeded, a connection reset); never after an exception in user code or
    # config. Training resumes from the last completed epoch.
    max_restarts: int = 0
    # Seconds to wait for every task to start before giving up.
    start_timeout_s: float = 120.0


CONFIG = LocalhostCluster
