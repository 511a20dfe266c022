"""The comparison of a run with its one-device reference: tolerances, steps, variables, verdict.

NumPy only: the records are files the tasks wrote (xpdist/core/protocol/verification.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from xpdist.core.protocol.verification import FINAL_FILE, StepRecord

# Relative and absolute tolerance of one step, per precision: float32 rounding (about 6e-8) grows
# through a few hundred operations per step and a sum over replicas done in another order; the
# mixed policies compute in 16 bits (bfloat16 keeps 8 bits of mantissa, float16 11). A verification
# of n steps allows n times the one-step tolerance: differences of rounding add up step by step,
# while a real divergence (a wrong scale, a per-replica statistic) is far larger at its first step.
STEP_TOLERANCE = {"float32": 1e-5, "mixed_float16": 2e-3, "mixed_bfloat16": 1e-2}


def tolerance(precision: str, steps: int) -> float:
    """The tolerance of a verification of `steps` steps: both |a - b| <= tol + tol * |b|."""
    return STEP_TOLERANCE[precision] * max(1, steps)


@dataclass
class VariableDiff:
    name: str
    shape: Tuple[int, ...]
    max_abs: float
    max_rel: float  # max_abs over the reference's largest magnitude in that variable
    equal: bool
    finite: bool


@dataclass
class Verdict:
    """What verify concludes: equal, differs or nonfinite, and where."""

    verdict: str
    tol: float
    steps: int
    first_step: Optional[int] = None  # 1-based: where the losses part, or the first non-finite value
    first_update_step: Optional[int] = None  # where the weight-update norms part
    # Variables whose copies on the run's replicas disagree beyond the tolerance: {name: largest difference}.
    replicas_apart: Dict[str, float] = field(default_factory=dict)
    # Equal training whose reported loss parts from the reference's at this step (a reporting difference).
    reported_loss_step: Optional[int] = None
    nonfinite_in: List[str] = field(default_factory=list)  # which run(s): reference, run
    step_rows: List[Dict[str, float]] = field(default_factory=list)
    variables: List[VariableDiff] = field(default_factory=list)
    only_in: Dict[str, List[str]] = field(default_factory=dict)
    largest_abs: float = 0.0
    steps_recorded: Tuple[int, int] = (0, 0)  # (reference, run)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "equal" else 1

    def worst(self, count: int = 5) -> List[VariableDiff]:
        """The variables that differ most (relative difference first), those within tolerance left out."""
        parted = [v for v in self.variables if not v.equal]
        return sorted(parted, key=lambda v: (v.finite, -v.max_rel, -v.max_abs))[:count]


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol + tol * abs(b)


def compare_steps(ref: StepRecord, run: StepRecord, tol: float):
    """Rows of the per-step table; the first step where the losses part, where the update norms
    part, the first non-finite one and in which runs."""
    rows: List[Dict[str, float]] = []
    parted = parted_update = nonfinite = None
    where: List[str] = []
    for i in range(max(len(ref.loss), len(run.loss))):
        got = lambda rec, key: getattr(rec, key)[i] if i < len(getattr(rec, key)) else float("nan")  # noqa: E731
        row = {"step": i + 1, "reference_loss": got(ref, "loss"), "run_loss": got(run, "loss"),
               "reference_update_norm": got(ref, "update_norm"), "run_update_norm": got(run, "update_norm")}
        row["loss_abs_diff"] = abs(row["reference_loss"] - row["run_loss"])
        row["update_norm_abs_diff"] = abs(row["reference_update_norm"] - row["run_update_norm"])
        rows.append(row)
        if i >= min(len(ref.loss), len(run.loss)):  # one training stopped sooner: judged by its length
            continue
        bad = [name for name in ("reference", "run")
               if not (math.isfinite(row[f"{name}_loss"]) and math.isfinite(row[f"{name}_update_norm"]))]
        if bad and nonfinite is None:
            nonfinite, where = i + 1, bad
        if parted is None and not bad and not _close(row["run_loss"], row["reference_loss"], tol):
            parted = i + 1
        if parted_update is None and not bad and not _close(row["run_update_norm"], row["reference_update_norm"], tol):
            parted_update = i + 1
    return rows, parted, parted_update, nonfinite, where


def compare_variables(ref: Dict[str, np.ndarray], run: Dict[str, np.ndarray], tol: float) -> List[VariableDiff]:
    diffs = []
    for name in sorted(set(ref) & set(run)):
        a, b = np.asarray(run[name]), np.asarray(ref[name])
        if a.shape != b.shape:
            diffs.append(VariableDiff(name, tuple(b.shape), math.inf, math.inf, False, True))
            continue
        finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b))) if a.dtype.kind == "f" else True
        if a.size == 0:
            diffs.append(VariableDiff(name, tuple(b.shape), 0.0, 0.0, True, True))
            continue
        delta = np.abs(a.astype(np.float64) - b.astype(np.float64))
        max_abs = float(np.max(delta)) if finite else math.inf
        scale = float(np.max(np.abs(b))) if finite else 0.0
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        equal = finite and bool(np.all(delta <= tol + tol * np.abs(b.astype(np.float64))))
        diffs.append(VariableDiff(name, tuple(b.shape), max_abs, max_rel, equal, finite))
    return diffs


def load_final(folder: Path) -> Dict[str, np.ndarray]:
    with np.load(folder / FINAL_FILE) as saved:
        return {name: saved[name] for name in saved.files}


def judge(ref_dir: Path, run_dir: Path, precision: str, steps: int) -> Verdict:
    """Compares the two records.

    Raises:
        FileNotFoundError: a training left no record (it failed before its end).
    """
    ref, run = StepRecord.read(ref_dir), StepRecord.read(run_dir)
    if ref is None or run is None:
        missing = "reference" if ref is None else "run"
        raise FileNotFoundError(f"the {missing} training left no record of its steps")
    tol = tolerance(precision, steps)
    rows, parted, parted_update, nonfinite, where = compare_steps(ref, run, tol)
    ref_vars, run_vars = load_final(ref_dir), load_final(run_dir)
    variables = compare_variables(ref_vars, run_vars, tol)
    only = {k: sorted(set(a) - set(b)) for k, a, b in (("reference", ref_vars, run_vars), ("run", run_vars, ref_vars))}
    verdict = Verdict("equal", tol, steps, step_rows=rows, variables=variables,
                      only_in={k: v for k, v in only.items() if v}, steps_recorded=(len(ref.loss), len(run.loss)))
    verdict.replicas_apart = {k: v for k, v in run.replica_spread.items() if not v <= tol}
    finite_diffs = [v.max_abs for v in variables if math.isfinite(v.max_abs)]
    finite_diffs += [r["update_norm_abs_diff"] for r in rows if math.isfinite(r["update_norm_abs_diff"])]
    verdict.largest_abs = max(finite_diffs, default=0.0)
    if nonfinite is not None or not all(v.finite for v in variables):
        verdict.verdict, verdict.nonfinite_in = "nonfinite", where or ["final variables"]
        verdict.first_step = nonfinite
    elif (parted_update is not None or not all(v.equal for v in variables) or len(ref.loss) != len(run.loss)
          or verdict.replicas_apart):
        verdict.verdict = "differs"
        verdict.first_step, verdict.first_update_step = parted, parted_update
    elif parted is not None:
        # Every update and variable agrees: the training is the same, the loss reported for
        # it is not (tf-keras' batch logs under multi_worker_mirrored: the workers' sum).
        verdict.reported_loss_step = parted
    return verdict
