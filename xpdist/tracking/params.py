"""The params a run records: the summary every run carries, and the keys of the options it used."""

from __future__ import annotations

from typing import Any, Dict, Optional

from xpdist.core import strategies
from xpdist.core.plan import Plan, tf_version

# Params every run carries, whatever its strategy, so the compare view lines runs up.
SUMMARY_PARAMS = ("strategy", "cross_ops", "communication", "cluster", "model", "dataset", "trainer", "keras",
                  "num_replicas", "global_batch_size", "per_replica_batch_size", "learning_rate", "devices",
                  "steps_per_execution", "tf_version")
# Keys that say where and how the run is recorded, not what was trained.
NOT_PARAMS = ("tracking",)


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


def option_params(config: Dict[str, Any]) -> Dict[str, str]:
    """The keys of the options a run used, as dotted keys.

    The rule: every key of the chosen strategy, cluster, model, dataset, optimizer and
    trainer options; the keys of a tuning group (cross_ops, communication) only under a
    strategy whose spec applies it (strategy=mirrored and multi_worker_mirrored; elsewhere
    they change nothing); `devices.*`, `seed` and `verbose`; never `tracking.*`. A group's
    `name` is left out where a summary param of the same name carries it (`model`, not
    `model.name`). The schema has one dataclass per option, so a linear model's run has
    no `model.filters` to log, and a cluster option has keys only where it starts
    processes (cluster=local has only `_target_`, the user's engine class if any).

    Args:
        config: the composed config as plain data (enums as names).
    """
    applied = strategies.applied_groups(config["strategy"]["name"])
    used = {k: v for k, v in config.items()
            if k not in NOT_PARAMS and (k not in strategies.TUNING_GROUPS or k in applied)}
    params = flatten(used)
    for key in SUMMARY_PARAMS:
        params.pop(f"{key}.name", None)
    params.update(callback_params(config))
    return params


def callback_params(config: Dict[str, Any]) -> Dict[str, str]:
    """`callbacks`: the chosen callbacks options, comma-separated ("none": none), so a run
    with a callback of no keys (terminate_on_nan) says so; their keys come from flatten."""
    chosen = list(config.get("callbacks") or {})
    return {"callbacks": ",".join(chosen) or "none",
            **{f"callbacks.{name}": "on" for name in chosen if not config["callbacks"][name]}}


def run_params(config: Dict[str, Any], plan: Plan, extra: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """option_params(config) plus SUMMARY_PARAMS (which win on a clash)."""
    params = option_params(config)
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
    """The params of a sweep job rejected before it had a plan: the summary params every run has,
    so it lines up with its siblings (what only a plan knows, replicas and batch, is "none"),
    and the keys of the options it chose, as run_params logs them."""
    strategy = config["strategy"]["name"]
    applied = strategies.applied_groups(strategy)
    params = option_params(config)
    params.update({key: "none" for key in SUMMARY_PARAMS})
    params.update({
        "strategy": strategy, "cluster": config["cluster"]["name"], "model": config["model"]["name"],
        "dataset": config["dataset"]["name"], "trainer": config["trainer"]["name"], "keras": str(config["keras"]),
        "tf_version": tf_version(),
    })
    params.update({group: config[group]["name"] if group in applied else "none" for group in strategies.TUNING_GROUPS})
    return {k: str(v) for k, v in params.items()}
