"""The runs a report covers, read from MLflow into rows (no TensorFlow, no plotting).

A row is xpdist.summary's dict for a run (the sweep summary's table), with what the report
adds: steady-state examples/sec, scaling efficiency, a unique label and the per-epoch history.
MLflow is imported where used (about 2 s): bad arguments are reported before paying for it.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xpdist.core.protocol.outcome import Status
from xpdist.report import summary
from xpdist.tracking import store

SWEEP_TAG = "xpdist.sweep"
PARENT_TAG = "mlflow.parentRunId"
BASELINE_STRATEGY = "one_device"
# Metrics whose per-epoch history is read and plotted.
HISTORY_METRICS = ("loss", "val_loss", "examples_per_sec")
# Where store.ui_command's `mlflow ui` serves the UI.
DEFAULT_UI = "http://127.0.0.1:5000"
# Runs per bulk history query (SQLite allows 32,766 bound variables) and points per query.
BULK_CHUNK = 500
MAX_POINTS = 10_000_000
# metric name -> [(epoch, value)]
History = Dict[str, List[Tuple[int, float]]]


class ReportError(ValueError):
    """Bad input, reported as one line naming the command-line argument at fault."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")


def steady_rate(history: List[Tuple[int, float]]) -> Optional[float]:
    """Examples/sec over the epochs after the first (which includes tracing), picked as xpdist's
    trainer picks steady_examples_per_sec (the upper median); the only epoch's for one epoch."""
    values = [v for _, v in sorted(history)]
    rates = sorted(values[1:] or values)
    return rates[len(rates) // 2] if rates else None


def report_row(run, history: Optional[History] = None) -> Dict[str, Any]:
    """summary.row(run) plus what the report adds: examples/sec is steady-state, parent run id,
    per-epoch history; scaling_efficiency is filled in by add_scaling_efficiency.

    Steady-state examples/sec is the run's own steady_examples_per_sec metric, else computed
    the same way from its history, else unknown (None): never the last epoch's figure, which
    is another number.
    """
    row = summary.row(run)
    history = history or {}
    steady = run.data.metrics.get("steady_examples_per_sec")
    if steady is None and history.get("examples_per_sec"):
        steady = steady_rate(history["examples_per_sec"])
    if steady is not None:
        row["examples_per_sec"] = steady
    row.update(parent_run_id=run.data.tags.get(PARENT_TAG), start_time=run.info.start_time or 0,
               scaling_efficiency=None, history=history, params=dict(run.data.params))
    return row


def add_scaling_efficiency(rows: List[Dict[str, Any]]) -> None:
    """Sets each row's scaling_efficiency = (examples/sec / replicas) / one_device's examples/sec.

    The baseline is the one_device run of the same sweep (same parent run; runs outside any
    sweep form one group), the latest FINISHED one if there are several.
    """
    baselines: Dict[Optional[str], Dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["start_time"]):  # the latest baseline wins
        if row["strategy"] == BASELINE_STRATEGY and row["status"] == Status.FINISHED and row["examples_per_sec"]:
            baselines[row["parent_run_id"]] = row
    for row in rows:
        base = baselines.get(row["parent_run_id"])
        if base and row["examples_per_sec"] and row["replicas"]:
            row["scaling_efficiency"] = row["examples_per_sec"] / row["replicas"] / base["examples_per_sec"]


def add_labels(rows: List[Dict[str, Any]]) -> None:
    """row["label"]: the run name, with the run id's start where two runs share a name (several sweeps)."""
    names = [r["run_name"] for r in rows]
    for row in rows:
        name = row["run_name"] or row["run_id"][:8]
        row["label"] = f"{name} ({row['run_id'][:8]})" if names.count(row["run_name"]) > 1 else name


# Params the report's table has a column for, or that follow from other params (the plan's
# figures), left out of a row's `differs`: they would repeat what the row already says.
SHOWN_OR_DERIVED = frozenset({"strategy", "cross_ops", "communication", "num_replicas", "global_batch_size",
                              "devices", "per_replica_batch_size", "steps_per_execution"})


def _options(params: Dict[str, str]) -> Dict[str, str]:
    """A run's params with `group.name` written `group` (optimizer.name=adam -> optimizer=adam)."""
    named = {key[:-len(".name")]: value for key, value in params.items() if key.endswith(".name")}
    merged = {key: value for key, value in params.items() if not key.endswith(".name")}
    return {**named, **merged}


def add_differences(rows: List[Dict[str, Any]]) -> None:
    """row["differs"]: `key=value` of each param whose value is not the same in every run compared.

    Left out: SHOWN_OR_DERIVED, and the settings of a group whose option differs: `model=cnn`
    stands for the settings that come with it (model.filters), which would only repeat it.
    Empty when nothing else differs.
    """
    options = [_options(r.get("params") or {}) for r in rows]
    common = set.intersection(*map(set, options)) if options else set()
    differing = {key for key in common - SHOWN_OR_DERIVED if len({o[key] for o in options}) > 1}
    shown = sorted(key for key in differing if "." not in key or key.split(".", 1)[0] not in differing)
    for row, values in zip(rows, options):
        row["differs"] = " ".join(f"{key}={values[key]}" for key in shown)


def compare_url(run_ids: Sequence[str], experiment_ids: Sequence[str], base: str = DEFAULT_UI) -> str:
    """The MLflow UI's compare view for these runs."""
    runs = urllib.parse.quote(json.dumps(list(run_ids), separators=(",", ":")))
    experiments = urllib.parse.quote(json.dumps(sorted(set(experiment_ids)), separators=(",", ":")))
    return f"{base}/#/compare-runs?runs={runs}&experiments={experiments}"


# --- selecting runs ---------------------------------------------------------------------------

def open_store(uri: str):
    """A client on an existing store; a missing SQLite file is an error, not a new empty store."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():
            raise ReportError("--tracking-uri", f"no MLflow store at {uri} ({path} does not exist). "
                              "Pass the store the runs were logged to, e.g. sqlite:///$PWD/mlflow.db")
    mlflow_client = store.client(uri)
    try:
        store.retry(mlflow_client.search_experiments, max_results=1)
    except Exception as err:  # MlflowException, requests' ConnectionError, sqlalchemy errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ReportError("--tracking-uri", f"cannot read the MLflow store at {uri}: {first[:300]}") from None
    return mlflow_client


def _get_run(mlflow_client, run_id: str, argument: str):
    from mlflow.exceptions import MlflowException

    try:
        return store.retry(mlflow_client.get_run, run_id)
    except MlflowException:
        raise ReportError(argument, f"no run with id {run_id!r} in this store") from None


def _search(mlflow_client, experiment_ids: List[str], filter_string: str = "") -> list:
    return store.retry(mlflow_client.search_runs, experiment_ids, filter_string=filter_string,
                          order_by=["attributes.start_time ASC"], max_results=5000)


def select_runs(mlflow_client, experiment: Optional[str] = None, sweep: Optional[str] = None,
                run_ids: Sequence[str] = ()) -> Tuple[list, Optional[object], str]:
    """The runs to report on, the sweep's parent run (or None), and a title.

    Raises:
        ReportError: unknown experiment or run id, or a sweep id that is not a parent run.
    """
    if experiment is not None:
        found = store.retry(mlflow_client.get_experiment_by_name, experiment)
        if found is None:
            known = ", ".join(e.name for e in mlflow_client.search_experiments()) or "none"
            raise ReportError("--experiment", f"no experiment named {experiment!r}. Known: {known}")
        runs = [r for r in _search(mlflow_client, [found.experiment_id]) if r.data.tags.get(SWEEP_TAG) != "true"]
        return runs, None, f"experiment {experiment}"
    if sweep is not None:
        parent = _get_run(mlflow_client, sweep, "--sweep")
        runs = _search(mlflow_client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{sweep}'")
        if not runs:
            raise ReportError("--sweep", f"run {sweep} has no child runs: pass the parent run id of a sweep "
                              "(printed by `python -m xpdist -m ...`, tag xpdist.sweep=true)")
        return runs, parent, f"sweep {parent.info.run_name or sweep}"
    runs = [_get_run(mlflow_client, run_id, "--runs") for run_id in run_ids]
    return sorted(runs, key=lambda r: r.info.start_time or 0), None, f"{len(runs)} runs"


def _in_order(runs: list) -> list:
    """Sweep by sweep (in the order they started), each in job order as the sweep summary lists it."""
    groups: Dict[Optional[str], list] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        groups.setdefault(run.data.tags.get(PARENT_TAG), []).append(run)
    ordered = {r["run_id"]: i for i, r in enumerate(row for group in groups.values() for row in summary.rows(group))}
    return sorted(runs, key=lambda r: ordered[r.info.run_id])


def _histories(mlflow_client, run_ids: List[str]) -> Dict[str, History]:
    """{run id: {metric: [(epoch, value)]}} for HISTORY_METRICS, in one query per metric and
    chunk of runs where the store allows it (SQL stores), else one call per run and metric."""
    found: Dict[str, History] = {run_id: {} for run_id in run_ids}
    # MlflowClient has no bulk history call; the SQL store behind it has had one since MLflow 2
    # (the UI's charts use it). A REST or file store falls back to a call per run and metric.
    bulk = getattr(getattr(mlflow_client, "_tracking_client", None), "store", None)
    bulk = getattr(bulk, "get_metric_history_bulk", None)
    for name in HISTORY_METRICS:
        if bulk is None:
            for run_id in run_ids:
                points = store.retry(mlflow_client.get_metric_history, run_id, name)
                if points:
                    found[run_id][name] = sorted((m.step, m.value) for m in points)
            continue
        for start in range(0, len(run_ids), BULK_CHUNK):
            chunk = run_ids[start:start + BULK_CHUNK]
            for point in store.retry(bulk, chunk, name, max_results=MAX_POINTS):
                found[point.run_id].setdefault(name, []).append((point.step, point.value))
    for history in found.values():
        for name in history:
            history[name].sort()
    return found


def read_rows(mlflow_client, runs: list) -> List[Dict[str, Any]]:
    """Rows with their per-epoch histories, scaling efficiency, labels and differing params,
    sweep by sweep in job order."""
    ordered = _in_order(runs)
    histories = _histories(mlflow_client, [r.info.run_id for r in ordered])
    rows = [report_row(run, histories[run.info.run_id]) for run in ordered]
    add_scaling_efficiency(rows)
    add_labels(rows)
    add_differences(rows)
    return rows
