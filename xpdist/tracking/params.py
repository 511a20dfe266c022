"""The params a run records: the summary every run carries, and the options it used."""

from __future__ import annotations

from typing import Any, Dict, Optional

from xpdist.core.plan import Plan, tf_version

# Params every run carries, whatever its strategy, so the compare view lines runs up.
SUMMARY_PARAMS = ("strategy", "cross_ops", "communication", "cluster", "model", "dataset", "trainer", "keras",
                  "num_replicas", "global_batch_size", "per_replica_batch_size", "learning_rate", "devices",
                  "steps_per_execution", "tf_version")

def flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}; lists become their string form."""
    flat: Dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = "none" if value is None else str(value)
    return flat


def run_params(config: Dict[str, Any], plan: Plan, extra: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """The whole resolved config as dotted keys, plus SUMMARY_PARAMS (which win on a clash)."""
    params = flatten(config)
    params.update({
        "strategy": plan.strategy, "cross_ops": plan.cross_ops, "communication": plan.communication,
        "cluster": plan.cluster, "model": config["model"]["name"], "dataset": config["dataset"]["name"],
        "trainer": config["trainer"]["name"], "keras": plan.keras, "num_replicas": plan.num_replicas,
        "global_batch_size": plan.global_batch_size, "per_replica_batch_size": plan.per_replica_batch_size,
        "learning_rate": plan.learning_rate, "devices": ",".join(plan.devices) or "none",
        "steps_per_execution": plan.steps_per_execution,
        "tf_version": tf_version(),
    })
    params.update(extra or {})
    return {k: str(v) for k, v in params.items()}


def rejected_params(config: Dict[str, Any]) -> Dict[str, str]:
    """The params of a sweep job rejected before it had a plan: the same keys as run_params,
    so it lines up with its siblings; what only a plan knows (replicas, batch) is "none"."""
    strategy = config["strategy"]["name"]
    params = flatten(config)
    params.update({key: "none" for key in SUMMARY_PARAMS})
    params.update({
        "strategy": strategy, "cluster": config["cluster"]["name"], "model": config["model"]["name"],
        "dataset": config["dataset"]["name"], "trainer": config["trainer"]["name"], "keras": str(config["keras"]),
        "cross_ops": config["cross_ops"]["name"] if strategy == "mirrored" else "none",
        "communication": config["communication"]["name"] if strategy == "multi_worker_mirrored" else "none",
        "tf_version": tf_version(),
    })
    return {k: str(v) for k, v in params.items()}
