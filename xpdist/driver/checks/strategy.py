"""The values of cross_ops and communication options, checked as TensorFlow would check them.

TensorFlow checks these only when the task builds its strategy, seconds after the MLflow run
was created; here they cost nothing. The rules are TensorFlow's own
(tensorflow/python/distribute/cross_device_ops.py, collective_util.py), quoted beside each.
"""

from __future__ import annotations

from xpdist.core import plan as planning
from xpdist.core.errors import ConfigError


def check(cfg) -> None:
    """Refuses a cross_ops or communication value the strategy cannot use.

    Raises:
        ConfigError: naming the key (cross_ops.num_packs, cross_ops.reduce_to_device,
            communication.timeout_seconds).
    """
    ops = cfg.cross_ops
    # NcclAllReduce and HierarchicalCopyAllReduce: "requires num_packs >= 0"; 0 packs nothing.
    if "num_packs" in ops and ops.num_packs < 0:
        raise ConfigError("cross_ops.num_packs", ops.num_packs, f"cross_ops={ops.name} packs gradients into "
                          "num_packs tensors, which cannot be negative",
                          "Use 1 (the default), more to split the all-reduce, or 0 for no packing.")
    if ops.get("reduce_to_device"):
        _check_reduce_to_device(cfg, ops.reduce_to_device)
    timeout = cfg.communication.timeout_seconds
    # CommunicationOptions passes it to each collective as its timeout, where 0 means none.
    if timeout is not None and timeout <= 0:
        raise ConfigError("communication.timeout_seconds", timeout, "a collective's timeout must be above 0",
                          "Give seconds, e.g. 300, or null to wait forever (the default).")


def _check_reduce_to_device(cfg, device: str) -> None:
    """ReductionToOneDevice reduces on a device of this process; a missing one fails at the first step."""
    gpus = planning.gpu_count()
    parsed = planning.parse_device(device)
    kind, index = parsed if parsed else (None, None)
    limit = {"cpu": cfg.devices.logical_cpus, "gpu": gpus}.get(kind, 0)
    if parsed is None or index >= limit:
        have = [f"/cpu:{i}" for i in range(cfg.devices.logical_cpus)] + [f"/gpu:{i}" for i in range(gpus)]
        raise ConfigError("cross_ops.reduce_to_device", device, "no such device here",
                          f"Use one of {have}, or \"\" to let TensorFlow choose.")
