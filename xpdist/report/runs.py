"""The runs a report covers, read from MLflow into Rows (no TensorFlow, no plotting).

Row, row_from_run and add_scaling_efficiency work on plain MLflow Run objects, so code that
already holds runs (a sweep's end-of-sweep summary) can build the same table.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import urllib.parse
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from xpdist import tracking

# Tags written by xpdist.job / xpdist.sweep.
WALL_TIME_TAG = "xpdist.wall_time_s"
SWEEP_TAG = "xpdist.sweep"
PARENT_TAG = "mlflow.parentRunId"
BASELINE_STRATEGY = "one_device"
# Metrics whose per-epoch history is read and plotted.
HISTORY_METRICS = ("loss", "val_loss", "examples_per_sec")
# Where scripts/mlflow_ui.sh serves the UI unless told otherwise.
DEFAULT_UI = "http://127.0.0.1:5000"


class ReportError(ValueError):
    """Bad input, reported as one line naming the command-line argument at fault."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")


@dataclasses.dataclass
class Row:
    """One run as the report shows it; numbers are None where the run did not log them."""

    run: str
    run_id: str
    strategy: str
    cross_ops: str
    communication: str
    replicas: Optional[int]
    global_batch: Optional[int]
    loss: Optional[float]
    val_loss: Optional[float]
    examples_per_sec: Optional[float]
    wall_time_s: Optional[float]
    status: str
    parent_run_id: Optional[str] = None
    error: Optional[str] = None
    scaling_efficiency: Optional[float] = None
    # metric name -> [(epoch, value)], for the plots.
    history: Dict[str, List[Tuple[int, float]]] = dataclasses.field(default_factory=dict)


def _number(text: Optional[str], kind=float):
    try:
        return kind(text) if text not in (None, "", "none") else None
    except ValueError:
        return None


def steady_rate(history: List[Tuple[int, float]]) -> Optional[float]:
    """Median examples/sec over the epochs after the first (which includes tracing), as xpdist's
    own summary computes it; the first epoch's figure when there is only one."""
    values = [v for _, v in sorted(history)]
    if not values:
        return None
    return statistics.median(values[1:] or values)


def row_from_run(run, history: Optional[Dict[str, List[Tuple[int, float]]]] = None) -> Row:
    """A Row from an MLflow Run; without `history`, examples/sec is the last epoch's figure."""
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    history = history or {}
    wall = _number(tags.get(WALL_TIME_TAG))
    if wall is None and run.info.end_time and run.info.start_time:
        wall = (run.info.end_time - run.info.start_time) / 1000.0
    rate = steady_rate(history.get("examples_per_sec", [])) if history.get("examples_per_sec") else None
    return Row(run=run.info.run_name or run.info.run_id, run_id=run.info.run_id,
               strategy=params.get("strategy", "-"), cross_ops=params.get("cross_ops", "-"),
               communication=params.get("communication", "-"),
               replicas=_number(params.get("num_replicas"), int),
               global_batch=_number(params.get("global_batch_size"), int),
               loss=metrics.get("loss"), val_loss=metrics.get("val_loss"),
               examples_per_sec=rate if rate is not None else metrics.get("examples_per_sec"),
               wall_time_s=wall, status=run.info.status, parent_run_id=tags.get(PARENT_TAG),
               error=tags.get(tracking.ERROR_TAG), history=history)


def add_scaling_efficiency(rows: List[Row]) -> Dict[Optional[str], Row]:
    """Sets each row's scaling_efficiency = (examples/sec / replicas) / one_device's examples/sec.

    The baseline is the one_device run of the same sweep (same parent run; runs outside any
    sweep form one group), the latest FINISHED one if there are several. Returns the baseline
    row per group.
    """
    baselines: Dict[Optional[str], Row] = {}
    for row in rows:  # rows are in start order, so the latest baseline wins
        if row.strategy == BASELINE_STRATEGY and row.status == "FINISHED" and row.examples_per_sec:
            baselines[row.parent_run_id] = row
    for row in rows:
        base = baselines.get(row.parent_run_id)
        if base and row.examples_per_sec and row.replicas:
            row.scaling_efficiency = row.examples_per_sec / row.replicas / base.examples_per_sec
    return baselines


def unique_labels(rows: Sequence[Row]) -> List[str]:
    """Run names, with the run id's start added where two runs share a name (several sweeps)."""
    names = [r.run for r in rows]
    return [f"{r.run} ({r.run_id[:8]})" if names.count(r.run) > 1 else r.run for r in rows]


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
    mlflow_client = tracking.client(uri)
    try:
        tracking.retry(mlflow_client.search_experiments, max_results=1)
    except Exception as err:  # MlflowException, requests' ConnectionError, sqlalchemy errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ReportError("--tracking-uri", f"cannot read the MLflow store at {uri}: {first[:300]}") from None
    return mlflow_client


def _get_run(mlflow_client, run_id: str, argument: str):
    from mlflow.exceptions import MlflowException

    try:
        return tracking.retry(mlflow_client.get_run, run_id)
    except MlflowException:
        raise ReportError(argument, f"no run with id {run_id!r} in this store") from None


def _search(mlflow_client, experiment_ids: List[str], filter_string: str = "") -> list:
    return tracking.retry(mlflow_client.search_runs, experiment_ids, filter_string=filter_string,
                          order_by=["attributes.start_time ASC"], max_results=5000)


def select_runs(mlflow_client, experiment: Optional[str] = None, sweep: Optional[str] = None,
                run_ids: Sequence[str] = ()) -> Tuple[list, Optional[object], str]:
    """The runs to report on, the sweep's parent run (or None), and a title.

    Raises:
        ReportError: unknown experiment or run id, or a sweep id that is not a parent run.
    """
    if experiment is not None:
        found = tracking.retry(mlflow_client.get_experiment_by_name, experiment)
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


def read_rows(mlflow_client, runs: list) -> List[Row]:
    """Rows with their per-epoch histories and scaling efficiency."""
    rows = []
    for run in runs:
        history = {}
        for name in HISTORY_METRICS:
            if name in run.data.metrics:
                points = tracking.retry(mlflow_client.get_metric_history, run.info.run_id, name)
                history[name] = sorted((m.step, m.value) for m in points)
        rows.append(row_from_run(run, history))
    add_scaling_efficiency(rows)
    return rows
