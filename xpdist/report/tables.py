"""The report's tables, written with xpdist.summary (the sweep summary's table code):
report.csv (raw values, for tools) and report.md (for people)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from xpdist.core.protocol.outcome import Status
from xpdist.report import summary
from xpdist.report.runs import BASELINE_STRATEGY
from xpdist.tracking import store

# Row keys in report.csv, in order.
CSV_KEYS = ("run_name", "run_id", "job", "strategy", "cross_ops", "communication", "replicas", "global_batch",
            "final_loss", "final_val_loss", "examples_per_sec", "scaling_efficiency", "wall_time_s", "status",
            "error", "differs")
# (row key, header) of the Markdown table.
MD_COLUMNS = (("label", "run"), ("strategy", "strategy"), ("cross_ops", "cross_ops"),
              ("communication", "communication"), ("replicas", "replicas"), ("global_batch", "global batch"),
              ("final_loss", "final loss"), ("final_val_loss", "final val loss"),
              ("examples_per_sec", "steady examples/sec"), ("scaling_efficiency", "scaling eff."),
              ("wall_time_s", "wall time (s)"), ("status", "status"))

NOTES = (
    "- final loss / val loss: the last epoch's value. steady examples/sec: training examples per second in the "
    "steady state (the median of the epochs after the first, which includes tracing; the only epoch's "
    "figure for a one-epoch run). wall time: the whole `python -m xpdist` job, start-up included.",
    "- scaling eff.: (examples/sec ÷ replicas) ÷ examples/sec of the one_device run of the same sweep; "
    "1.0 means each replica is as fast as one device alone. Logical CPU devices share the same cores, "
    "so on a CPU machine this measures a strategy's overhead, not hardware scaling.",
)


def write_csv(rows: Sequence[Dict[str, Any]], path: Path) -> Path:
    """One line per run, every CSV_KEYS column; empty cells where a run did not log the value."""
    return summary.write_csv(rows, path, CSV_KEYS)


def write_markdown(rows: Sequence[Dict[str, Any]], path: Path, title: str, source: str, plots: Dict[str, Path],
                   compare_url: Optional[str] = None) -> Path:
    """report.md: the table, what its figures mean, failed runs' errors, and the plots."""
    columns = MD_COLUMNS
    if any(r.get("differs") for r in rows):  # the params that tell these runs apart, after their name
        columns = (MD_COLUMNS[0], ("differs", "params that differ")) + MD_COLUMNS[1:]
    parts = [f"# xpdist report: {title}", "", f"Source: `{source}`, {len(rows)} runs.", "",
             summary.format_markdown(rows, columns), *NOTES]
    if columns is not MD_COLUMNS:
        parts.append("- params that differ: the params whose values are not the same in every run here; a "
                     "group's option (`model=cnn`) stands for the settings that come with it.")
    if not any(r["strategy"] == BASELINE_STRATEGY and r["scaling_efficiency"] is not None for r in rows):
        parts.append("- No FINISHED one_device run here, so scaling efficiency is not computed.")
    failed = [r for r in rows if r["status"] != Status.FINISHED]
    if failed:
        parts += ["", "## Runs that did not finish", ""]
        parts += [f"- {r['label']} ({r['status']}): {r['error'] or 'no error recorded'}" for r in failed]
    if compare_url:
        server = source.startswith(("http://", "https://"))
        start = "" if server else f"Start the MLflow UI: `{store.ui_command(source)}`; then "
        parts += ["", f"{start}compare the runs there: <{compare_url}>"]
    if plots:
        parts += ["", "## Plots", ""]
        parts += [f"![{name}]({p.name})" for name, p in plots.items()]
    path.write_text("\n".join(parts) + "\n")
    return path
