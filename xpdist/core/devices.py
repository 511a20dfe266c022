"""The devices of this machine, counted without TensorFlow (the driver never imports it)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from typing import List, Optional

_DEVICE = re.compile(r"^(?:/job:\w+/replica:\d+/task:\d+)?/?(?:device:)?(cpu|gpu|tpu):(\d+)$", re.I)


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """GPUs visible to TensorFlow, counted without importing it (nvidia-smi)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if visible:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def parse_device(name: str) -> Optional[tuple]:
    """'/gpu:1', 'GPU:1' or a full device name -> ('gpu', 1); None if it is not one."""
    match = _DEVICE.match(name.strip())
    return (match.group(1).lower(), int(match.group(2))) if match else None


def local_devices(cfg) -> List[str]:
    """strategy.devices (one_device, mirrored, central_storage), else every GPU, else every logical CPU."""
    if cfg.strategy.get("devices"):
        return list(cfg.strategy.devices)
    gpus = gpu_count()
    if gpus:
        return [f"/gpu:{i}" for i in range(gpus)]
    return [f"/cpu:{i}" for i in range(max(1, cfg.devices.logical_cpus))]
