"""The advisor's settings, its candidates, their ranking and the recommendation (no TensorFlow).

Candidates, in the order they are probed (a budget that runs out cuts the end of the list):
1. at the data set's per-replica batch: strategy=default, one_device, then on CPU for each of
   logical_cpus (2 and 4 by default) mirrored with cross_ops=hierarchical and
   reduction_to_one_device (auto is reduction_to_one_device on a CPU) and central_storage; on a
   machine with 2 or more GPUs mirrored with nccl, hierarchical and reduction_to_one_device over
   all of them, and central_storage; with multi_process=true also multi_worker_mirrored on
   cluster=localhost with 2 workers;
2. the two fastest of those again at half and at twice the per-replica batch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from xpdist.core import plan, strategies
from xpdist.core.errors import ConfigError
from xpdist.core.protocol.outcome import Status

# Keys the advisor sets on each probe: the user cannot set them too.
_CHOSEN = ("strategy", "cross_ops", "communication", "cluster", "devices.logical_cpus",
           "trainer.epochs", "trainer.steps_per_epoch", "tracking.run_name")
# The per-replica batch of the first round; the second tries half and twice the fastest's.
BATCH_KEY = "dataset.per_replica_batch_size"


@dataclass
class Settings:
    # Seconds the advisor may spend: no probe starts after that (it ends within budget + one probe).
    budget_s: float = 300.0
    # Epochs of each probe's steady rate, the first (tracing) left out of it; a profiled probe trains one more.
    probe_epochs: int = 3
    # Steps of each probe epoch (null: the data set's whole epoch).
    probe_steps: Optional[int] = None
    # A probe still running after this many seconds is stopped and recorded as TIMEOUT (null: budget_s).
    probe_timeout_s: Optional[float] = None
    # Logical CPU devices tried for mirrored and central_storage on a machine without GPUs.
    logical_cpus: List[int] = field(default_factory=lambda: [2, 4])
    # Also probe multi_worker_mirrored with 2 worker processes on cluster=localhost.
    multi_process: bool = False
    # Per-replica batch of the first round: dataset.per_replica_batch_size on the command
    # line, else the data set's own (read from the composed config).
    batch: Optional[int] = None
    # GPUs on this machine, set by the advisor (xpdist.core.devices.gpu_count).
    gpus: int = 0
    # Training examples of one epoch, set by the advisor from the plan (None: not known).
    num_train: Optional[int] = None

    def params(self) -> Dict[str, str]:
        return {f"advise.{k}": str(v) for k, v in dataclasses.asdict(self).items()}


@dataclass
class Candidate:
    label: str
    strategy: str
    overrides: List[str]
    replicas: int
    per_replica_batch: int


def parse(argv: List[str]) -> Tuple[Settings, List[str]]:
    """Splits the command line into the advisor's keys (budget_s=..., ...) and the run's overrides.

    Raises:
        ConfigError: a bad advisor value, or an override of a key the advisor chooses.
    """
    settings, overrides = Settings(), []
    types = {f.name: f.type for f in dataclasses.fields(Settings)}
    for word in argv:
        key, eq, value = word.partition("=")
        if key == BATCH_KEY:
            settings.batch = _batch(value)
            continue
        if key in ("batch", "gpus", "num_train") or not eq or key not in types:
            if word in ("-m", "--multirun") or word.startswith("hydra/"):
                raise ConfigError("advise", word, "the advisor runs its own sweep", "Drop it.")
            if key.lstrip("+~").split(".")[0] in _CHOSEN or key.lstrip("+~") in _CHOSEN:
                raise ConfigError(key, value, "the advisor chooses it for each candidate",
                                  f"Drop {key}=...; the advisor prints the command line with its choice.")
            overrides.append(word)
            continue
        setattr(settings, key, _value(key, value))
    if settings.budget_s <= 0:
        raise ConfigError("budget_s", settings.budget_s, "must be more than 0 seconds", "Use budget_s=300.")
    if settings.probe_epochs < 2:
        raise ConfigError("probe_epochs", settings.probe_epochs, "steady examples/sec leaves out the first epoch, "
                          "so a probe needs 2 or more", "Use probe_epochs=3.")
    if any(n < 2 for n in settings.logical_cpus):
        raise ConfigError("logical_cpus", settings.logical_cpus, "mirrored and central_storage need 2 or more devices",
                          "Use logical_cpus=[2,4].")
    return settings, overrides


def _batch(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(BATCH_KEY, text, "the advisor starts from one per-replica batch size",
                          f"Give one positive integer, e.g. {BATCH_KEY}=32.")
    return int(text)


def _value(key: str, text: str) -> Any:
    try:
        if key == "logical_cpus":
            return [int(v) for v in text.strip("[]").split(",") if v.strip()]
        if key == "multi_process":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if text.lower() in ("null", "none") and key in ("probe_steps", "probe_timeout_s"):
            return None
        return int(text) if key in ("probe_epochs", "probe_steps") else float(text)
    except ValueError:
        raise ConfigError(key, text, "is not a valid value for the advisor's key",
                          "budget_s, probe_timeout_s: seconds; probe_epochs, probe_steps: integers; "
                          "logical_cpus: a list such as [2,4]; multi_process: true or false.") from None


def value_of(overrides: List[str], key: str) -> Optional[str]:
    for word in overrides:
        if word.partition("=")[0] == key:
            return word.partition("=")[2]
    return None


def _candidate(strategy: str, batch: int, replicas: int, cross_ops: Optional[str] = None, cpus: int = 1,
               workers: int = 0) -> Candidate:
    words = [f"strategy={strategy}", f"dataset.per_replica_batch_size={batch}"]
    label = strategy
    if cross_ops:
        words.append(f"cross_ops={cross_ops}")
        label += f"-{cross_ops}"
    if cpus > 1:
        words.append(f"devices.logical_cpus={cpus}")
        label += f"-{cpus}cpu"
    if workers:
        words += ["cluster=localhost", f"cluster.workers={workers}"]
        label += f"-{workers}workers"
    return Candidate(f"{label}-b{batch}", strategy, words, replicas, batch)


def first_round(settings: Settings, batch: int) -> List[Candidate]:
    """The first round, read off the strategy specs, so that a new strategy is probed too.

    One process: the strategies that place nothing themselves or train on one device, then
    those whose replicas are devices of one process, over every GPU or each count of logical
    CPUs, with each cross_ops option where it applies. With multi_process, the strategies whose
    cluster is workers only, on 2 localhost workers. A strategy whose replicas are known only
    once it reaches its accelerators (tpu) is not probed: its own preflight decides there.
    """
    specs = [strategies.get(name) for name in strategies.STRATEGIES]
    specs = [spec for spec in specs if not spec.replicas_at_run_time]
    found = [_candidate(spec.name, batch, 1) for spec in specs
             if not spec.needs.multi_process and not spec.replicas_in_one_process]
    spread = [spec for spec in specs if spec.replicas_in_one_process]
    ops_here = ("nccl", "hierarchical", "reduction_to_one_device") if settings.gpus else \
        ("hierarchical", "reduction_to_one_device")  # auto is reduction_to_one_device on a CPU
    if settings.gpus >= 2:
        for spec in spread:
            for ops in (ops_here if "cross_ops" in spec.applies_to else (None,)):
                found.append(_candidate(spec.name, batch, settings.gpus, ops))
    elif settings.gpus == 0:
        for cpus in settings.logical_cpus:
            for spec in spread:
                for ops in (ops_here if "cross_ops" in spec.applies_to else (None,)):
                    found.append(_candidate(spec.name, batch, cpus, ops, cpus))
    if settings.multi_process:
        found += [_candidate(spec.name, batch, 2, workers=2) for spec in specs
                  if spec.needs.multi_process and spec.needs.jobs == ("worker",)]
    return found


def candidates(settings: Settings, rows: List[Dict[str, Any]]) -> Iterator[Candidate]:
    """The candidates in probing order; the second round reads the first's rows as they come."""
    batch = int(settings.batch or 32)
    first = first_round(settings, batch)
    yield from first
    best = [r for r in rank(rows) if r["status"] == Status.FINISHED][:2]
    by_label = {c.label: c for c in first}
    for row in best:
        base = by_label[row["label"]]
        for other in sorted({max(1, batch // 2), batch * 2}):
            yield dataclasses.replace(
                base, label=base.label.rsplit("-b", 1)[0] + f"-b{other}", per_replica_batch=other,
                overrides=[w if not w.startswith("dataset.per_replica_batch_size=")
                           else f"dataset.per_replica_batch_size={other}" for w in base.overrides])


def rank(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Finished probes by steady examples/sec, fastest first, then the others; adds each one's
    scaling efficiency: examples/sec per replica over the best one-replica probe's at the same
    per-replica batch."""
    done = sorted((r for r in rows if r["status"] == Status.FINISHED and r.get("examples_per_sec")),
                  key=lambda r: -r["examples_per_sec"])
    rest = [r for r in rows if r not in done]
    for row in done:
        singles = [r["examples_per_sec"] for r in done
                   if r["replicas"] == 1 and r["per_replica_batch"] == row["per_replica_batch"]]
        row["scaling_efficiency"] = row["examples_per_sec"] / row["replicas"] / max(singles) if singles else None
    for row in rest:
        row["scaling_efficiency"] = None
    return done + rest


# The steps each probe traces with TensorFlow's profiler (trainer.profile_steps), counted within
# one epoch added after its probe_epochs, past that epoch's first steps. The traced epoch is left
# out of steady examples/sec (xpdist/task/measure/profile.traced_epochs), and the epochs the rate is taken
# from come before it: a trace made in the first epoch left some candidates training up to 35%
# faster for the rest of the run than they do untraced (MobileNetV2, per-replica batch 16,
# central_storage on 4 logical CPUs: docs/advisor.md). A probe whose epochs are shorter is not
# traced.
PROFILED = (2, 4)
# The share of a step that input wait or communication must take to be named as the cause.
SLOW_SHARE = 0.3


def probe_length(candidate: Candidate, settings: Settings) -> List[str]:
    """trainer.epochs of a probe, and trainer.profile_steps where it is traced: in one epoch
    more than probe_epochs, when the candidate's epoch reaches past PROFILED and its strategy
    trains in its tasks (a coordinator's process only dispatches steps)."""
    untraced = [f"trainer.epochs={settings.probe_epochs}"]
    steps = probe_steps(settings, candidate.per_replica_batch * candidate.replicas)
    if not steps or steps <= PROFILED[1] + 1 or strategies.get(candidate.strategy).needs.coordinator:
        return untraced
    at = settings.probe_epochs * steps  # the first step of the added epoch
    return [f"trainer.epochs={settings.probe_epochs + 1}",
            f"trainer.profile_steps=[{at + PROFILED[0]},{at + PROFILED[1]}]"]


def why_slow(parts: Dict[str, Any]) -> str:
    """Where a probe's traced steps' time went, when input wait or communication took much of it
    (the run's input_wait_fraction and communication_fraction); "" otherwise."""
    if (parts.get("input_wait_fraction") or 0) >= SLOW_SHARE:
        return (f"{parts['input_wait_fraction']:.0%} of the step waits on input: raise dataset.prefetch, cache the "
                "data or make its reading cheaper")
    if (parts.get("communication_fraction") or 0) >= SLOW_SHARE:
        return (f"{parts['communication_fraction']:.0%} of the step is communication: try another cross_ops or "
                "communication, a larger per-replica batch, or fewer replicas")
    return ""


# Below this many steps in a probe epoch, per-epoch costs weigh on examples/sec more than the
# strategy does (measured here: 2 steps an epoch made mirrored on 2 logical CPUs look 4x
# faster than one device, 2 replicas sharing 2 cores).
MIN_STEPS = 10


def recommend(ranked: List[Dict[str, Any]], overrides: List[str], settings: Optional[Settings] = None
              ) -> Optional[Dict[str, Any]]:
    """The fastest finished probe, why, and the command line that trains with it."""
    done = [r for r in ranked if r["status"] == Status.FINISHED and r.get("examples_per_sec")]
    if not done:
        return None
    best = done[0]
    singles = [r for r in done if r["replicas"] == 1 and r["per_replica_batch"] == best["per_replica_batch"]]
    reason = f"{best['examples_per_sec']:,.0f} steady examples/sec, the fastest of {len(done)} finished probes"
    if singles and best["replicas"] > 1:
        speedup = best["examples_per_sec"] / singles[0]["examples_per_sec"]
        reason += (f"; {speedup:.2f}x the best one-device probe ({singles[0]['label']}) on {best['replicas']} replicas "
                   f"(scaling efficiency {best['scaling_efficiency']:.0%})")
    if len(done) > 1 and done[1]["examples_per_sec"] > 0.95 * best["examples_per_sec"]:
        reason += (f"; the runner-up {done[1]['label']} is within 5%, inside the noise of a short probe: "
                   "either will do")
    if best.get("first_step_s") is not None:
        reason += f"; first step after {best['first_step_s']:.1f} s"
    if why_slow(best):
        reason += f"; even so, {why_slow(best)}"
    steps = probe_steps(settings, best.get("global_batch"))
    if steps is not None and steps < MIN_STEPS:
        reason += (f". Caution: its probe epochs had {steps} steps, too few for a steady rate; give the probes "
                   f"more data (dataset.num_examples) or probe_steps")
    command = "python -m xpdist " + " ".join([*overrides, *best["overrides"]])
    return {"label": best["label"], "reason": reason, "command": command, "examples_per_sec": best["examples_per_sec"]}


def probe_steps(settings: Optional[Settings], global_batch: Optional[int]) -> Optional[int]:
    """Training steps of a probe epoch at this global batch (core.plan.epoch_steps), where known."""
    if settings is not None and settings.probe_steps:
        return settings.probe_steps
    if settings is None or not settings.num_train or not global_batch:
        return None
    return plan.epoch_steps(None, settings.num_train, int(global_batch))
