"""strategy=tpu: TPUStrategy on the TPU that strategy.tpu names; TensorFlow counts its cores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import socket
from urllib.parse import urlparse

from xpdist.core.errors import ConfigError
from xpdist.core.strategies import ClassStrategy, StrategySpec

@dataclass
class TpuStrategy(ClassStrategy):
    name: str = "tpu"
    # The TPU name or grpc:// address handed to TPUClusterResolver; "local" for a TPU VM's
    # own chips.
    tpu: str = "local"


class Tpu(StrategySpec):
    name = "tpu"
    config = TpuStrategy
    # The cores of the TPU system it connects to: the plan says 1 until the task reports them.
    replicas_at_run_time = True

    def preflight(self, cfg) -> None:
        check_tpu(cfg.strategy.tpu)
        super().preflight(cfg)


def check_tpu(tpu: str) -> None:
    """Looks for a TPU the way TPUClusterResolver would, without starting TensorFlow.

    Raises:
        ConfigError: on strategy.tpu, when no TPU answers where it says.
    """
    if tpu in ("", "local"):
        if any(Path("/dev").glob("accel*")) or any(Path("/dev").glob("vfio/[0-9]*")):
            return
        raise ConfigError("strategy.tpu", tpu or '""', "no TPU is attached to this machine",
                          "Run on a TPU VM, or set strategy.tpu to a TPU name or grpc://host:port.")
    if tpu.startswith("grpc://"):
        address = urlparse(tpu)
        if _can_connect(address.hostname or "", address.port or 8470):
            return
        raise ConfigError("strategy.tpu", tpu, "no TPU answers at that address",
                          "Check the address, or use a strategy other than tpu.")
    # A TPU name is resolved through the Google Cloud metadata server.
    if _can_connect("metadata.google.internal", 80):
        return
    raise ConfigError("strategy.tpu", tpu, "a TPU name needs Google Cloud's metadata server, which is unreachable here",
                      "Give grpc://host:port, or use a strategy other than tpu.")


def _can_connect(host: str, port: int, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


SPEC = Tpu()
