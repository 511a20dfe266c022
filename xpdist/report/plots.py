"""The report's PNG plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

from xpdist.report.runs import BASELINE_STRATEGY

_LOSS_LABELS = {"loss": "training loss", "val_loss": "validation loss"}
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


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _pyplot():
    # Imported here, not at the top: matplotlib costs about a second, and a report that fails
    # on its arguments, or a sweep with no chart, never needs it.
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and SSH sessions have no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def plot_losses(rows: Sequence[Dict[str, Any]], path: Path) -> Path | None:
    """Training and validation loss per epoch, one line per run; None if no run logged a loss."""
    metrics = [m for m in _LOSS_LABELS if any(r["history"].get(m) for r in rows)]
    if not metrics:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.5 * len(metrics), 4.5), squeeze=False)
    grouped = len(rows) > MAX_RUNS_SHOWN
    for ax, metric in zip(axes[0], metrics):
        if grouped:
            _loss_bands(ax, rows, metric)
        for row in rows if not grouped else ():
            points = row["history"].get(metric)
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], marker="o", label=row["label"])
        ax.set_title(f"{_LOSS_LABELS[metric].capitalize()} per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{_LOSS_LABELS[metric]} (the model's loss function, unitless)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(title="runs: median, shaded min to max" if grouped else "run", loc="upper left",
                       bbox_to_anchor=(1.02, 1), fontsize="small")
    return _save(fig, path)


def _loss_bands(ax, rows: Sequence[Dict[str, Any]], metric: str) -> None:
    """One line per group of runs: the median per epoch, shaded from the minimum to the maximum."""
    for name, members in group_rows(rows).items():
        by_epoch: Dict[int, List[float]] = {}
        for row in members:
            for step, value in row["history"].get(metric) or ():
                by_epoch.setdefault(step, []).append(value)
        if not by_epoch:
            continue
        epochs = sorted(by_epoch)
        (line,) = ax.plot(epochs, [_median(by_epoch[e]) for e in epochs], label=f"{name} ({len(members)} runs)")
        ax.fill_between(epochs, [min(by_epoch[e]) for e in epochs], [max(by_epoch[e]) for e in epochs],
                        color=line.get_color(), alpha=0.2)


def _bars(rows: Sequence[Dict[str, Any]], values: List[float], title: str, xlabel: str, fmt: str, path: Path,
          ideal: float | None = None) -> Path:
    """Horizontal bars, one per run, coloured by strategy, each with its value written beside it;
    beyond MAX_RUNS_SHOWN runs one bar per group at its median, its range as an error bar."""
    if len(rows) > MAX_RUNS_SHOWN:
        return _group_bars(rows, values, title, xlabel, fmt, path, ideal)
    plt = _pyplot()
    labels = [r["label"] for r in rows]
    strategies = sorted({str(r["strategy"]) for r in rows})
    colours = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(strategies)}
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(rows)))
    positions = range(len(rows))[::-1]  # first run on top
    ax.barh(list(positions), values, color=[colours[str(r["strategy"])] for r in rows])
    ax.set_yticks(list(positions), labels)
    for y, value in zip(positions, values):
        ax.annotate(fmt.format(value), (value, y), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize="small")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[s]) for s in strategies]
    names = list(strategies)
    if ideal is not None:
        handles.append(ax.axvline(ideal, color="black", linestyle="--", linewidth=1))
        names.append(f"ideal ({ideal:.1f})")
    ax.legend(handles, names, title="strategy", loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("run")
    ax.margins(x=0.15)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def _group_bars(rows: Sequence[Dict[str, Any]], values: List[float], title: str, xlabel: str, fmt: str,
                path: Path, ideal: float | None) -> Path:
    plt = _pyplot()
    value_of = {id(row): value for row, value in zip(rows, values)}
    groups = group_rows(rows)
    names = list(groups)
    spans = [[value_of[id(r)] for r in groups[name]] for name in names]
    medians = [_median(span) for span in spans]
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
    return _save(fig, path)


def plot_throughput(rows: Sequence[Dict[str, Any]], path: Path) -> Path | None:
    shown = [r for r in rows if r["examples_per_sec"] is not None]
    if not shown:
        return None
    return _bars(shown, [r["examples_per_sec"] for r in shown], "Training throughput per run",
                 "examples/sec (median over epochs after the first)", "{:,.0f}", path)


def plot_scaling(rows: Sequence[Dict[str, Any]], path: Path) -> Path | None:
    """Scaling efficiency against one_device; None when no run has a one_device baseline."""
    shown = [r for r in rows if r["scaling_efficiency"] is not None]
    if not shown:
        return None
    return _bars(shown, [r["scaling_efficiency"] for r in shown], f"Scaling efficiency against {BASELINE_STRATEGY}",
                 "efficiency = (examples/sec ÷ replicas) ÷ one_device examples/sec", "{:.2f}", path, ideal=1.0)


def write_plots(rows: Sequence[Dict[str, Any]], out_dir: Path) -> Dict[str, Path]:
    """All plots that the runs have data for, by name."""
    made = {"loss": plot_losses(rows, out_dir / "loss.png"),
            "examples_per_sec": plot_throughput(rows, out_dir / "examples_per_sec.png"),
            "scaling_efficiency": plot_scaling(rows, out_dir / "scaling_efficiency.png")}
    return {name: path for name, path in made.items() if path is not None}
