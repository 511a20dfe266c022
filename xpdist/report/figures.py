"""Figure helpers shared by the report's plots and the sweep summary's chart (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

# Beyond this many runs a plot shows groups (median and range), not one line or bar per run:
# at hundreds of runs a per-run legend is most of the image and no line can be told apart.
MAX_RUNS_SHOWN = 12
# Row keys that can tell groups apart, and the most groups a plot shows before falling back to strategy.
GROUP_KEYS = ("strategy", "cross_ops", "communication", "replicas", "global_batch")
MAX_GROUPS = 12


def group_rows(rows: Sequence[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """Rows grouped by the GROUP_KEYS whose values differ between them ("key=value ..." -> rows);
    by strategy alone if that makes more than MAX_GROUPS groups; one group if nothing differs."""
    differing = [k for k in GROUP_KEYS if len({str(r.get(k)) for r in rows}) > 1]
    keys = differing if len({tuple(str(r.get(k)) for k in differing) for r in rows}) <= MAX_GROUPS else ["strategy"]
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for row in rows:
        name = " ".join(f"{k}={row.get(k)}" for k in keys) or "all runs"
        groups.setdefault(name, []).append(row)
    return groups


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def pyplot():
    # Imported here, not at the top: matplotlib costs about a second, and a report that fails
    # on its arguments, or a sweep with no chart, never needs it.
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and SSH sessions have no display
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
    return path


def grouped_bars(rows: Sequence[Dict[str, Any]], values: List[float], title: str, xlabel: str, fmt: str,
                 path: Path, ideal: float | None = None) -> Path:
    """One horizontal bar per group of runs (group_rows) at its median, its range as an error bar."""
    plt = pyplot()
    value_of = {id(row): value for row, value in zip(rows, values)}
    groups = group_rows(rows)
    names = list(groups)
    spans = [[value_of[id(r)] for r in groups[name]] for name in names]
    medians = [median(span) for span in spans]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(names)))
    positions = list(range(len(names)))[::-1]
    errors = [[m - min(s) for m, s in zip(medians, spans)], [max(s) - m for m, s in zip(medians, spans)]]
    ax.barh(positions, medians, xerr=errors, capsize=3,
            color=[plt.get_cmap("tab10")(i % 10) for i in range(len(names))])
    ax.set_yticks(positions, [f"{name} ({len(groups[name])} runs)" for name in names])
    for y, value in zip(positions, medians):
        ax.annotate(fmt.format(value), (value, y), xytext=(3, 6), textcoords="offset points", fontsize="small")
    if ideal is not None:
        ax.axvline(ideal, color="black", linestyle="--", linewidth=1, label=f"ideal ({ideal:.1f})")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
    ax.set_title(f"{title} ({len(rows)} runs: median per group, bar from min to max)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("group of runs")
    ax.margins(x=0.15)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)


