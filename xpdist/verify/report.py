"""What verify prints and the tables it logs: the verdict in a few lines, per-step and
per-variable differences as CSV."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import List

from xpdist.verify.compare import STEP_TOLERANCE, Verdict

STEPS_TABLE = "steps.csv"
VARIABLES_TABLE = "variables.csv"
VERDICT_FILE = "verdict.txt"


def tolerance_text(verdict: Verdict, precision: str) -> str:
    return (f"{verdict.tol:.1e} ({precision}: {STEP_TOLERANCE[precision]:.0e} per step x {verdict.steps} steps, "
            "relative and absolute)")


def _g(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def text(verdict: Verdict, precision: str) -> str:
    """The verdict as the command prints it (and verdict.txt holds)."""
    tol = tolerance_text(verdict, precision)
    compared = (f"the loss and the weight-update norm at each of {verdict.steps} steps (the update norm "
                f"stands in for the gradient norm under both trainers), {len(verdict.variables)} variables "
                "(the model's, trainable or not, and the optimizer's)")
    if verdict.verdict == "equal":
        lines = [f"xpdist: verify: EQUAL within {tol}", f"  compared {compared}",
                 f"  largest difference of the updates and variables: {verdict.largest_abs:.3g}"]
        if verdict.reported_loss_step:
            row = verdict.step_rows[verdict.reported_loss_step - 1]
            ratio = row["run_loss"] / row["reference_loss"] if row["reference_loss"] else math.inf
            lines.append(f"  note: the loss reported for step {verdict.reported_loss_step} is {_g(row['run_loss'])}, "
                         f"the reference's {_g(row['reference_loss'])} (x{ratio:.3g}), while every update and "
                         "variable agrees: the same training, reported differently")
        return "\n".join(lines)
    lines: List[str] = []
    rows = verdict.step_rows
    if verdict.verdict == "nonfinite":
        where = " and ".join(verdict.nonfinite_in)
        at = f"at step {verdict.first_step}" if verdict.first_step else "in the final variables"
        lines.append(f"xpdist: verify: NONFINITE: the first non-finite value appeared {at} (in {where})")
        if verdict.first_step:
            row = rows[verdict.first_step - 1]
            lines.append(f"  step {verdict.first_step}: loss reference {_g(row['reference_loss'])}, run "
                         f"{_g(row['run_loss'])}; update norm reference {_g(row['reference_update_norm'])}, run "
                         f"{_g(row['run_update_norm'])}")
    else:
        lines.append(f"xpdist: verify: DIFFERS beyond {tol}")
        if verdict.first_step:
            row = rows[verdict.first_step - 1]
            lines.append(f"  the losses part at step {verdict.first_step}: reference {_g(row['reference_loss'])}, "
                         f"run {_g(row['run_loss'])}")
        else:
            lines.append("  the losses agree at every step" + ("" if rows else " (no step recorded)"))
        if verdict.steps_recorded[0] != verdict.steps_recorded[1]:
            lines.append(f"  the reference recorded {verdict.steps_recorded[0]} steps, the run {verdict.steps_recorded[1]}")
        if verdict.first_update_step:
            row = rows[verdict.first_update_step - 1]
            lines.append(f"  the weight updates part at step {verdict.first_update_step}: norm reference "
                         f"{_g(row['reference_update_norm'])}, run {_g(row['run_update_norm'])}")
    worst = verdict.worst()
    if worst:
        lines.append("  variables that differ most (largest absolute / relative difference):")
        width = max(len(v.name) for v in worst)
        lines += [f"    {v.name:<{width}}  {_g(v.max_abs):>9}  {_g(v.max_rel):>9}" for v in worst]
        parted = sum(not v.equal for v in verdict.variables)
        lines.append(f"  {parted} of {len(verdict.variables)} variables differ")
    if verdict.replicas_apart:
        lines.append("  the run's replicas disagree (copies of one variable, largest difference): " + ", ".join(
            f"{name} {_g(diff)}" for name, diff in sorted(verdict.replicas_apart.items(), key=lambda kv: -kv[1])[:5]))
    for run, names in verdict.only_in.items():
        lines.append(f"  only in the {run}: {', '.join(names)}")
    return "\n".join(lines)


def write(verdict: Verdict, precision: str, folder: Path) -> List[Path]:
    """steps.csv, variables.csv and verdict.txt in folder; their paths."""
    steps = folder / STEPS_TABLE
    with steps.open("w", newline="") as out:
        fields = ["step", "reference_loss", "run_loss", "loss_abs_diff", "reference_update_norm", "run_update_norm",
                  "update_norm_abs_diff"]
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(verdict.step_rows)
    variables = folder / VARIABLES_TABLE
    with variables.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["variable", "shape", "max_abs_diff", "max_rel_diff", "within_tolerance"])
        for v in sorted(verdict.variables, key=lambda v: -v.max_rel if math.isfinite(v.max_rel) else -math.inf):
            writer.writerow([v.name, "x".join(map(str, v.shape)) or "scalar", v.max_abs, v.max_rel, v.equal])
    summary = folder / VERDICT_FILE
    summary.write_text(text(verdict, precision) + "\n")
    return [steps, variables, summary]
