"""MLflow: the store, run lifecycle, params, batched metric logging and artifacts.

Runs are created and closed by the Hydra process, so a run's status is set even when its
task process dies; the chief task logs metrics and artifacts into the run it was handed.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, TypeVar

from xpdist.plan import Plan, tf_version

T = TypeVar("T")
# Params every run carries, whatever its strategy, so the compare view lines runs up.
SUMMARY_PARAMS = ("strategy", "cross_ops", "communication", "cluster", "model", "dataset", "trainer", "keras",
                  "num_replicas", "global_batch_size", "per_replica_batch_size", "learning_rate", "devices",
                  "steps_per_execution", "tf_version")
# Tag holding the one-line error of a FAILED or KILLED run.
ERROR_TAG = "xpdist.error"
# The chief task's metrics, one JSON line per step, relayed to MLflow by the Hydra process.
METRICS_FILE = "metrics.jsonl"
# MLflow's own limit on entries per log_batch call.
_BATCH_LIMIT = 100

for _noisy in ("alembic", "mlflow.store.db.utils"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


def resolve_uri(configured: Optional[str], launch_dir: Path) -> str:
    """tracking.uri, else MLFLOW_TRACKING_URI, else sqlite:///<launch dir>/mlflow.db."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"


def retry(fn: Callable[..., T], *args: Any, attempts: int = 30, **kwargs: Any) -> T:
    """Calls fn, retrying while SQLite answers "database is locked" (parallel sweep jobs)."""
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # MlflowException wraps sqlalchemy's OperationalError
            if "locked" not in str(err).lower() or attempt == attempts - 1:
                raise
            time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def ensure_experiment(mlflow_client, name: str, uri: str) -> str:
    """Returns the id of experiment `name`, creating it (race-safe) if needed."""
    from mlflow.exceptions import MlflowException

    found = retry(mlflow_client.get_experiment_by_name, name)
    if found is not None:
        return found.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        # Artifacts beside the database rather than under whatever the current directory is.
        location = (Path(uri[len("sqlite:///"):]).parent / "mlruns").resolve().as_uri()
    try:
        return retry(mlflow_client.create_experiment, name, artifact_location=location,
                     tags={"mlflow.experimentKind": "custom_model_development"})
    except MlflowException:
        found = retry(mlflow_client.get_experiment_by_name, name)
        if found is None:
            raise
        return found.experiment_id


def flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}; lists become their string form."""
    flat: Dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = "none" if value is None else str(value)
    return flat


def run_params(config: Dict[str, Any], plan: Plan, extra: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """The whole resolved config as dotted keys, plus SUMMARY_PARAMS (which win on a clash)."""
    params = flatten(config)
    params.update({
        "strategy": plan.strategy, "cross_ops": plan.cross_ops, "communication": plan.communication,
        "cluster": plan.cluster, "model": config["model"]["name"], "dataset": config["dataset"]["name"],
        "trainer": config["trainer"]["name"], "keras": plan.keras, "num_replicas": plan.num_replicas,
        "global_batch_size": plan.global_batch_size, "per_replica_batch_size": plan.per_replica_batch_size,
        "learning_rate": plan.learning_rate, "devices": ",".join(plan.devices) or "none",
        "steps_per_execution": plan.steps_per_execution,
        "tf_version": tf_version(),
    })
    params.update(extra or {})
    return {k: str(v) for k, v in params.items()}


def git_commit(directory: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def create_run(uri: str, experiment: str, name: str, params: Dict[str, str], tags: Dict[str, str],
               parent_run_id: Optional[str] = None) -> str:
    """Creates a RUNNING run with its params and tags; returns its id."""
    from mlflow.entities import Param, RunTag

    mlflow_client = client(uri)
    experiment_id = ensure_experiment(mlflow_client, experiment, uri)
    all_tags = dict(tags)
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = retry(mlflow_client.create_run, experiment_id, run_name=name, tags=all_tags)
    run_id = run.info.run_id
    items = sorted(params.items())
    for start in range(0, len(items), _BATCH_LIMIT):
        chunk = [Param(k, v) for k, v in items[start:start + _BATCH_LIMIT]]
        retry(mlflow_client.log_batch, run_id, params=chunk)
    return run_id


def set_tags(uri: str, run_id: str, tags: Dict[str, str]) -> None:
    from mlflow.entities import RunTag

    retry(client(uri).log_batch, run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def terminate(uri: str, run_id: str, status: str, error: Optional[str] = None) -> None:
    """Closes a run as FINISHED, FAILED or KILLED; an error message goes in ERROR_TAG."""
    mlflow_client = client(uri)
    if error:
        retry(mlflow_client.set_tag, run_id, ERROR_TAG, error[:5000])
    retry(mlflow_client.set_terminated, run_id, status)


def log_artifacts(uri: str, run_id: str, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
    mlflow_client = client(uri)
    for path in paths:
        if path.is_dir():
            retry(mlflow_client.log_artifacts, run_id, str(path), artifact_path)
        elif path.exists():
            retry(mlflow_client.log_artifact, run_id, str(path), artifact_path)


class MetricLogger:
    """Buffers metrics and writes them with one log_batch call per flush.

    Per-step metrics are only buffered (no I/O on the training thread); flush() runs at
    each epoch end, or sooner when the buffer reaches MLflow's batch limit.
    """

    def __init__(self, uri: str, run_id: str):
        self._client = client(uri)
        self._run_id = run_id
        self._buffer: List[Any] = []

    def add(self, metrics: Dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items())

    def flush(self) -> None:
        while self._buffer:
            chunk, self._buffer = self._buffer[:1000], self._buffer[1000:]
            retry(self._client.log_batch, self._run_id, metrics=chunk)


class MetricFile:
    """The task's metric logger: appends metrics to <job dir>/metrics.jsonl, one JSON line each.

    The task process never imports MLflow (its import and store open took about 3 s here,
    all of it before training could start); the Hydra process, which holds the run, relays
    the lines to MLflow while training runs (MetricRelay). add() only buffers; flush() (at
    each epoch end) appends the buffered lines with one write.
    """

    def __init__(self, path: Path):
        self._path = Path(path)
        self._entries: List[tuple] = []

    def add(self, metrics: Dict[str, float], step: int) -> None:
        """Buffers; serialising waits for flush(), so a per-step call costs a few microseconds."""
        self._entries.append((int(step), int(time.time() * 1000), metrics))

    def steps_with(self, key: str) -> List[int]:
        """Steps at which metric `key` is already in the file (written before a restart)."""
        if not self._path.exists():
            return []
        steps = []
        for line in self._path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line cut short by a kill
                continue
            if key in entry["metrics"]:
                steps.append(entry["step"])
        return steps

    def flush(self) -> None:
        entries, self._entries = self._entries, []  # swapped first: add() may run on a callback thread
        if entries:
            lines = [json.dumps({"step": step, "timestamp": ts, "metrics": {k: float(v) for k, v in metrics.items()}})
                     for step, ts, metrics in entries]
            with open(self._path, "a") as out:
                out.write("\n".join(lines) + "\n")


class MetricRelay(threading.Thread):
    """Logs the lines a task appends to its metrics file into the MLflow run, in batches.

    Runs in the Hydra process beside the task; stop() logs whatever is left.
    """

    def __init__(self, uri: str, run_id: str, path: Path, interval_s: float = 1.0):
        super().__init__(name="xpdist-metric-relay", daemon=True)
        self._client = client(uri)
        self._run_id = run_id
        self._path = Path(path)
        self._interval_s = interval_s
        self._offset = 0
        self._halt = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        while not self._halt.wait(self._interval_s):
            try:
                self.relay()
            except Exception as err:  # kept for stop(), which tries once more and raises
                self.error = err

    def stop(self) -> None:
        """Stops polling and relays the rest of the file."""
        self._halt.set()
        if self.is_alive():
            self.join()
        self.relay()

    def relay(self) -> None:
        from mlflow.entities import Metric

        if not self._path.exists():
            return
        with open(self._path, "rb") as lines:
            lines.seek(self._offset)
            data = lines.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        if not complete:
            return
        metrics = []
        for line in complete.decode().splitlines():
            entry = json.loads(line)
            metrics += [Metric(k, v, entry["timestamp"], entry["step"]) for k, v in entry["metrics"].items()]
        for start in range(0, len(metrics), 1000):  # MLflow's limit per log_batch
            retry(self._client.log_batch, self._run_id, metrics=metrics[start:start + 1000])
        self._offset += len(complete)


def ui_command(uri: str) -> str:
    """The command that opens the MLflow UI on this store, bound to loopback."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --host 127.0.0.1 --port 5000 --backend-store-uri {uri}"
