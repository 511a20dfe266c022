"""Comparison tables and a throughput chart built from MLflow runs (no TensorFlow).

The sweep summary uses it at the end of every `-m` sweep; `xpdist.report` can reuse it for
any list of runs. Everything is read from the MLflow Run objects themselves, so it works
whatever launcher ran the jobs and in whichever process.

    runs = client.search_runs([experiment_id], "tags.mlflow.parentRunId = '<id>'")
    rows = summary.rows(runs)                  # one dict per run, ordered by job number
    print(summary.format_text(rows))           # the table printed at the end of a sweep
    summary.write_all(rows, folder, "title")   # summary.csv, summary.md, examples_per_sec.png
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xpdist.core.protocol.outcome import Status

# (row key, column header) of the table printed at the end of a sweep.
SWEEP_COLUMNS: Tuple[Tuple[str, str], ...] = (
    ("job", "job"), ("job_overrides", "overrides"), ("status", "status"), ("replicas", "replicas"),
    ("global_batch", "global batch"), ("final_loss", "final loss"), ("examples_per_sec", "steady examples/sec"),
    ("wall_time_s", "wall time (s)"),
)
# Every key of a row, in the order the CSV file lists them.
ROW_KEYS: Tuple[str, ...] = (
    "job", "run_name", "run_id", "overrides", "job_overrides", "status", "strategy", "cross_ops", "communication", "replicas",
    "global_batch", "final_loss", "final_val_loss", "examples_per_sec", "wall_time_s", "error",
)
# Tags written by xpdist.job and xpdist.tracking.
JOB_TAG, OVERRIDES_TAG, WALL_TIME_TAG, ERROR_TAG = "xpdist.job", "xpdist.overrides", "xpdist.wall_time_s", "xpdist.error"


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text not in (None, "", "none") else None
    except ValueError:
        return None


def _job_number(run) -> Optional[int]:
    """The job's index in its sweep: the xpdist.job tag, else the run name's `N-` prefix."""
    tag = run.data.tags.get(JOB_TAG)
    if tag is not None and tag.isdigit():
        return int(tag)
    match = re.match(r"(\d+)-", run.info.run_name or "")
    return int(match.group(1)) if match else None


def _wall_time(run) -> Optional[float]:
    tagged = _number(run.data.tags.get(WALL_TIME_TAG))
    if tagged is not None:
        return tagged
    if run.info.end_time and run.info.start_time:
        return (run.info.end_time - run.info.start_time) / 1000.0
    return None


def row(run) -> Dict[str, Any]:
    """One MLflow Run as a flat dict with the keys in ROW_KEYS (None where unknown)."""
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    replicas = _number(params.get("num_replicas"))
    batch = _number(params.get("global_batch_size"))
    return {
        "job": _job_number(run), "run_name": run.info.run_name, "run_id": run.info.run_id,
        "overrides": tags.get(OVERRIDES_TAG, ""), "status": run.info.status,
        "strategy": params.get("strategy"), "cross_ops": params.get("cross_ops"),
        "communication": params.get("communication"),
        "replicas": int(replicas) if replicas is not None else None,
        "global_batch": int(batch) if batch is not None else None,
        "final_loss": metrics.get("loss"), "final_val_loss": metrics.get("val_loss"),
        # One figure under one name everywhere: the steady-state rate (median over the epochs
        # after the first) that the run logs and the report shows, never the last epoch's.
        "examples_per_sec": metrics.get("steady_examples_per_sec"), "wall_time_s": _wall_time(run),
        "error": tags.get(ERROR_TAG),
    }


def rows(runs: Sequence[Any]) -> List[Dict[str, Any]]:
    """Rows for `runs`, ordered by job number (runs outside a sweep last, by start time).

    `overrides` holds each run's whole command line; `job_overrides` only the overrides
    that are not the same in every run (what tells the jobs of a sweep apart).
    """
    ordered = sorted(runs, key=lambda r: (_job_number(r) is None, _job_number(r) or 0, r.info.start_time or 0))
    table = [row(r) for r in ordered]
    split = [r["overrides"].split() if r["overrides"] != "(none)" else [] for r in table]
    common = set.intersection(*map(set, split)) if len(split) > 1 else set()
    for r, items in zip(table, split):
        r["job_overrides"] = " ".join(item for item in items if item not in common) or "(none)"
    return table


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _cells(table_rows: Sequence[Dict[str, Any]], columns) -> Tuple[List[str], List[List[str]]]:
    headers = [header for _, header in columns]
    return headers, [[_cell(r.get(key)) for key, _ in columns] for r in table_rows]


def format_text(table_rows: Sequence[Dict[str, Any]], columns=SWEEP_COLUMNS) -> str:
    """A fixed-width text table for a terminal."""
    headers, body = _cells(table_rows, columns)
    widths = [max(len(h), *(len(line[i]) for line in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in body]
    return "\n".join(line.rstrip() for line in lines)


def format_markdown(table_rows: Sequence[Dict[str, Any]], columns=SWEEP_COLUMNS) -> str:
    """A GitHub-flavoured Markdown table; `|` inside cells is escaped."""
    headers, body = _cells(table_rows, columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in line) + " |" for line in body]
    return "\n".join(lines) + "\n"


def write_csv(table_rows: Sequence[Dict[str, Any]], path: Path, keys: Sequence[str] = ROW_KEYS) -> Path:
    """Every key of every row (raw values, empty where unknown), one run per line."""
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(keys), extrasaction="ignore")
        writer.writeheader()
        for r in table_rows:
            writer.writerow({k: "" if r.get(k) is None else r.get(k) for k in keys})
    return path


def write_markdown(table_rows: Sequence[Dict[str, Any]], path: Path, title: str, columns=SWEEP_COLUMNS) -> Path:
    path.write_text(f"# {title}\n\n" + format_markdown(table_rows, columns))
    return path


def plot_examples_per_sec(table_rows: Sequence[Dict[str, Any]], path: Path, title: str) -> Path:
    """A bar chart of steady examples/sec per run (a run with no figure, e.g. FAILED, shows no bar);
    for a large sweep, one bar per group of runs (the report's grouping)."""
    from xpdist.report import figures

    if len(table_rows) > figures.MAX_RUNS_SHOWN:
        shown = [r for r in table_rows if r["examples_per_sec"] is not None]
        return figures.grouped_bars(shown, [r["examples_per_sec"] for r in shown], title,
                                  "steady examples/sec (median over the epochs after the first)", "{:,.0f}", path)
    import matplotlib  # here, not at the top: only a finished sweep draws, and it costs ~1 s

    matplotlib.use("Agg")  # no display; safe in any process
    from matplotlib import pyplot as plt

    labels = [r["run_name"] or r["run_id"][:8] for r in table_rows]
    values = [r["examples_per_sec"] or 0.0 for r in table_rows]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(labels) + 2), 4.2))
    bars = ax.bar(range(len(labels)), values, color=["tab:blue" if r["status"] == Status.FINISHED else "tab:red"
                                                     for r in table_rows])
    ax.bar_label(bars, labels=[_cell(r["examples_per_sec"]) if r["examples_per_sec"] else r["status"]
                               for r in table_rows], fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("run")
    ax.set_ylabel("steady examples/sec (median over the epochs after the first)")
    ax.set_title(title)
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(table_rows: Sequence[Dict[str, Any]], folder: Path, title: str) -> List[Path]:
    """summary.csv, summary.md and examples_per_sec.png in `folder` (created if needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [write_csv(table_rows, folder / "summary.csv"),
            write_markdown(table_rows, folder / "summary.md", title),
            plot_examples_per_sec(table_rows, folder / "examples_per_sec.png", title)]
