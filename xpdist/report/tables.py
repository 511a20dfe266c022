"""The report's tables: report.csv (full precision, for tools) and report.md (for people)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from xpdist.report.runs import BASELINE_STRATEGY, Row, unique_labels

CSV_COLUMNS = ("run", "run_id", "strategy", "cross_ops", "communication", "replicas", "global_batch",
               "loss", "val_loss", "examples_per_sec", "scaling_efficiency", "wall_time_s", "status")
# (header, Row attribute, format) of the Markdown table.
_MD_COLUMNS = (("Run", "run", "{}"), ("Strategy", "strategy", "{}"), ("cross_ops", "cross_ops", "{}"),
               ("communication", "communication", "{}"), ("Replicas", "replicas", "{}"),
               ("Global batch", "global_batch", "{}"), ("Final loss", "loss", "{:.4g}"),
               ("Final val loss", "val_loss", "{:.4g}"), ("Examples/s", "examples_per_sec", "{:,.0f}"),
               ("Scaling eff.", "scaling_efficiency", "{:.2f}"), ("Wall time (s)", "wall_time_s", "{:.1f}"),
               ("Status", "status", "{}"))


def write_csv(rows: Sequence[Row], path: Path) -> Path:
    """One line per run; empty cells where a run did not log the value."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            values = (getattr(row, column) for column in CSV_COLUMNS)
            writer.writerow("" if v is None else f"{v:.6g}" if isinstance(v, float) else v for v in values)
    return path


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(h for h, _, _ in _MD_COLUMNS) + " |",
             "|" + "|".join("---:" if fmt != "{}" or attr in ("replicas", "global_batch") else "---"
                            for _, attr, fmt in _MD_COLUMNS) + "|"]
    for label, row in zip(unique_labels(rows), rows):
        cells = []
        for _, attr, fmt in _MD_COLUMNS:
            value = label if attr == "run" else getattr(row, attr)
            cells.append("–" if value is None else fmt.format(value).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_markdown(rows: Sequence[Row], path: Path, title: str, source: str, plots: Dict[str, Path],
                   compare_url: Optional[str] = None) -> Path:
    """report.md: the table, what its figures mean, failed runs' errors, and the plots."""
    baseline = any(r.strategy == BASELINE_STRATEGY and r.scaling_efficiency is not None for r in rows)
    parts = [f"# xpdist report: {title}", "", f"Source: `{source}`, {len(rows)} runs.", "",
             markdown_table(rows), "",
             "- Final loss / val loss: the last epoch's value. Examples/s: training examples per second, "
             "median over the epochs after the first (the first includes tracing), or the first epoch's "
             "figure for a one-epoch run. Wall time: the whole `python -m xpdist` job, start-up included.",
             "- Scaling eff.: (examples/s ÷ replicas) ÷ examples/s of the one_device run of the same sweep; "
             "1.0 means each replica is as fast as one device alone. "
             + ("" if baseline else "No FINISHED one_device run here, so it is not computed. ")
             + "Logical CPU devices share the same cores, so on a CPU machine this measures overhead, "
             "not hardware scaling."]
    failed = [(label, r) for label, r in zip(unique_labels(rows), rows) if r.status != "FINISHED"]
    if failed:
        parts += ["", "## Runs that did not finish", ""]
        parts += [f"- {label} ({r.status}): {r.error or 'no error recorded'}" for label, r in failed]
    if compare_url:
        parts += ["", f"Compare them in the MLflow UI (`scripts/mlflow_ui.sh`): <{compare_url}>"]
    if plots:
        parts += ["", "## Plots", ""]
        parts += [f"![{name}]({p.name})" for name, p in plots.items()]
    path.write_text("\n".join(parts) + "\n")
    return path
