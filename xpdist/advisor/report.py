"""The advisor's answer: the ranked table (text, Markdown, CSV), its chart, the recommendation."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Optional

from xpdist.core.protocol.outcome import Status

# (row key, heading, format) of each column of the table.
COLUMNS = (
    ("rank", "rank", "{}"), ("label", "candidate", "{}"), ("status", "status", "{}"), ("replicas", "replicas", "{}"),
    ("per_replica_batch", "per-replica batch", "{}"), ("examples_per_sec", "steady examples/s", "{:,.0f}"),
    ("scaling_efficiency", "scaling eff.", "{:.0%}"), ("first_step_s", "first step s", "{:.1f}"),
    ("peak_memory_mb", "peak memory MB", "{:,.0f}"), ("achieved_flops_per_sec", "achieved GFLOP/s", "{:,.2f}"),
    ("mfu", "mfu", "{:.1%}"), ("input_wait_fraction", "input wait", "{:.0%}"),
    ("communication_fraction", "communication", "{:.0%}"), ("probe_s", "probe s", "{:.1f}"),
)
NOTES = ("steady examples/s: the median over the probe's epochs after the first (which traces the step function), "
         "without the profiled one. scaling eff.: "
         "examples/s per replica over the best one-replica probe's at the same per-replica batch. peak memory: "
         "the task's peak resident memory (a GPU's allocator peak on a GPU). achieved GFLOP/s: flops_per_example "
         "(TensorFlow's profiler) x steady examples/s. mfu: that over the devices' peak FLOP/s, where known "
         "(empty on a CPU without devices.peak_flops). input wait, communication: their shares of the steps "
         "the probe traced in an epoch added after its probe_epochs (trainer.profile_steps; empty where its "
         "epochs were too short or a coordinator dispatches the steps). OOM: the probe ran out of memory; "
         "TIMEOUT: stopped after probe_timeout_s.")


def _cells(ranked: List[Dict[str, Any]]) -> List[List[str]]:
    out = []
    for i, row in enumerate(ranked, 1):
        values = dict(row, rank=i if row["status"] == Status.FINISHED else "-")
        if values.get("achieved_flops_per_sec") is not None:
            values["achieved_flops_per_sec"] = values["achieved_flops_per_sec"] / 1e9
        out.append(["" if values.get(k) is None else fmt.format(values[k]) for k, _, fmt in COLUMNS])
    return out


def text(ranked: List[Dict[str, Any]], answer: Optional[Dict[str, Any]]) -> str:
    heads = [h for _, h, _ in COLUMNS]
    rows = _cells(ranked)
    widths = [max(len(c) for c in col) for col in zip(heads, *rows)]
    lines = ["", "xpdist: advise: candidates, fastest first",
             "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines += [f"  {r['label']}: {r['error']}" for r in ranked if r["status"] != Status.FINISHED and r.get("error")]
    lines += [f"  {r['label']}: {r['why_slow']}" for r in ranked if r.get("why_slow")]
    lines += [_answer(answer)]
    return "\n".join(lines)


def _answer(answer: Optional[Dict[str, Any]]) -> str:
    if answer is None:
        return "xpdist: advise: no candidate finished its probe: no recommendation (see the errors above)"
    return (f"xpdist: advise: recommended {answer['label']}: {answer['reason']}.\n"
            f"  train with: {answer['command']}")


def write(ranked: List[Dict[str, Any]], answer: Optional[Dict[str, Any]], folder: Path) -> List[Path]:
    """advice.md, advice.csv and advice.png in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "advice.md"
    heads = [h for _, h, _ in COLUMNS]
    body = ["# Strategy advice", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    body += ["| " + " | ".join(r) + " |" for r in _cells(ranked)]
    body += ["", NOTES, "", _answer(answer).replace("xpdist: advise: ", "").replace("\n  ", "\n\n    "), ""]
    md.write_text("\n".join(body))
    path_csv = folder / "advice.csv"
    keys = [k for k, _, _ in COLUMNS if k != "rank"] + ["run_id", "error", "why_slow"]
    with path_csv.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["rank", *keys, "overrides"])
        for i, row in enumerate(ranked, 1):
            writer.writerow([i if row["status"] == Status.FINISHED else "", *[row.get(k) for k in keys],
                             " ".join(row["overrides"])])
    return [md, path_csv, chart(ranked, answer, folder / "advice.png")]


def chart(ranked: List[Dict[str, Any]], answer: Optional[Dict[str, Any]], path: Path) -> Path:
    """Horizontal bars of steady examples/sec, fastest on top, the recommendation highlighted;
    a probe that did not finish shows its status instead of a bar."""
    from xpdist.report import figures

    plt = figures.pyplot()
    labels = [r["label"] for r in ranked][::-1]
    values = [r.get("examples_per_sec") or 0.0 for r in ranked][::-1]
    colours = ["tab:orange" if answer and r["label"] == answer["label"] else "tab:blue" for r in ranked][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.5))
    bars = ax.barh(labels, values, color=colours)
    ax.bar_label(bars, labels=[f"{r['examples_per_sec']:,.0f}" if r.get("examples_per_sec") else r["status"]
                               for r in ranked][::-1], padding=3, fontsize=8)
    ax.set_xlabel("steady examples/sec (median over the probe's epochs after the first)")
    ax.set_title("xpdist advise: candidates" + (f" (recommended: {answer['label']})" if answer else ""))
    return figures.save(fig, path)
