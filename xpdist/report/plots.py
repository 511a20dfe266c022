"""The report's PNG plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

from xpdist.report.figures import MAX_RUNS_SHOWN, group_rows, grouped_bars, median
from xpdist.report.figures import pyplot as _pyplot, save as _save
from xpdist.report.runs import BASELINE_STRATEGY

_LOSS_LABELS = {"loss": "training loss", "val_loss": "validation loss"}

# Runs with the same curve (mirrored and central_storage often match to 1e-7) draw on top of
# each other: each run gets its own hollow marker shape and line style, so every one shows.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_LINESTYLES = ("-", "--", ":", "-.")


def run_styles(count: int) -> List[Dict[str, Any]]:
    """Matplotlib line styles, one per run: no two alike in marker shape and line style for up to
    40 runs (the colour cycle varies as well)."""
    return [{"marker": _MARKERS[i % len(_MARKERS)], "linestyle": _LINESTYLES[i // len(_MARKERS) % len(_LINESTYLES)],
             "markerfacecolor": "none"} for i in range(count)]


def loss_figure(rows: Sequence[Dict[str, Any]]):
    """Training and validation loss per epoch: one line per run, or beyond MAX_RUNS_SHOWN runs one
    line per group of runs (median, shaded min to max); None if no run logged a loss."""
    metrics = [m for m in _LOSS_LABELS if any(r["history"].get(m) for r in rows)]
    if not metrics:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.5 * len(metrics), 4.5), squeeze=False)
    grouped = len(rows) > MAX_RUNS_SHOWN
    for ax, metric in zip(axes[0], metrics):
        if grouped:
            _loss_bands(ax, rows, metric)
        for row, style in zip(rows if not grouped else (), run_styles(len(rows))):
            points = row["history"].get(metric)
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], label=row["label"], **style)
        ax.set_title(f"{_LOSS_LABELS[metric].capitalize()} per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{_LOSS_LABELS[metric]} (the model's loss function, unitless)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(title="runs: median, shaded min to max" if grouped else "run", loc="upper left",
                       bbox_to_anchor=(1.02, 1), fontsize="small")
    return fig


def plot_losses(rows: Sequence[Dict[str, Any]], path: Path) -> Path | None:
    """loss.png (loss_figure); None if no run logged a loss."""
    fig = loss_figure(rows)
    return None if fig is None else _save(fig, path)


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
        (line,) = ax.plot(epochs, [median(by_epoch[e]) for e in epochs], label=f"{name} ({len(members)} runs)")
        ax.fill_between(epochs, [min(by_epoch[e]) for e in epochs], [max(by_epoch[e]) for e in epochs],
                        color=line.get_color(), alpha=0.2)


def _bars(rows: Sequence[Dict[str, Any]], values: List[float], title: str, xlabel: str, fmt: str, path: Path,
          ideal: float | None = None) -> Path:
    """Horizontal bars, one per run, coloured by strategy, each with its value written beside it;
    beyond MAX_RUNS_SHOWN runs one bar per group at its median, its range as an error bar."""
    if len(rows) > MAX_RUNS_SHOWN:
        return grouped_bars(rows, values, title, xlabel, fmt, path, ideal)
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
