"""The job directory: the one protocol between the driver and its task processes.

    driver writes  config.yaml, overrides.yaml, job.json (JobSpec)      once, before any task
    tasks write    metrics.jsonl (MetricFile), result.json (TaskResult),
                   task_error.txt, model.keras, mlflow-model/, checkpoints/, logs/, cluster/*.ready
    driver reads   metrics.jsonl (relayed to MLflow), result.json, model.keras, mlflow-model/,
                   checkpoints/

Every file name of the job directory is spelled here and nowhere else. Neither TensorFlow
nor MLflow is imported: both sides load this module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from xpdist.core.plan import Plan

# The sweep directory's record of its parent run, written by the process that drives a sweep.
SWEEP_FILE = "sweep.json"


class JobDir:
    """Paths of one job's directory."""

    def __init__(self, root: Path):
        self.root = Path(root)

    spec = property(lambda self: self.root / "job.json")
    config = property(lambda self: self.root / "config.yaml")
    overrides = property(lambda self: self.root / "overrides.yaml")
    result = property(lambda self: self.root / "result.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    task_error = property(lambda self: self.root / "task_error.txt")
    model = property(lambda self: self.root / "model.keras")
    # The final model in MLflow's format (MLmodel, signature, input example), logged as `model`.
    mlflow_model = property(lambda self: self.root / "mlflow-model")
    # The chief's checkpoints: kept and logged to MLflow.
    checkpoints = property(lambda self: self.root / "checkpoints")
    # tf-keras BackupAndRestore's state (trainer=fit on a multi-process cluster).
    backup = property(lambda self: self.root / "backup")
    # One log per task of a multi-process cluster, and the launcher's own.
    logs = property(lambda self: self.root / "logs")
    # The localhost launcher's state: tasks.json (pids) and one ready marker per started task.
    cluster_state = property(lambda self: self.root / "cluster")

    @property
    def tasks(self) -> Path:
        """The localhost launcher's record of its task processes: {"attempt": n, "pids": {task: pid}}."""
        return self.cluster_state / "tasks.json"

    def worker_checkpoints(self, task: str) -> Path:
        """Where a non-chief worker writes the checkpoints TensorFlow needs every worker to write."""
        return self.root / "worker-checkpoints" / task

    def log_of(self, task_file_name: str) -> Path:
        return self.logs / f"{task_file_name}.log"

    def ready_marker(self, task_file_name: str) -> Path:
        return self.cluster_state / f"{task_file_name}.ready"

    def mark_ready(self, task_file_name: str) -> None:
        """Tells the localhost launcher a task has started (only it makes cluster_state)."""
        if self.cluster_state.is_dir():
            self.ready_marker(task_file_name).touch()


def _write_atomically(path: Path, text: str) -> None:
    staged = path.with_name(path.name + ".tmp")
    staged.write_text(text)
    os.replace(staged, path)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a task needs to run, written once by the driver before any task starts."""

    config: Dict[str, Any]  # the resolved config, plain data
    plan: Plan
    tracking_uri: str
    launch_dir: str  # relative data paths start here
    overrides: List[str] = dataclasses.field(default_factory=list)

    def write(self, job: JobDir) -> None:
        job.root.mkdir(parents=True, exist_ok=True)
        job.metrics.unlink(missing_ok=True)  # a reused job dir: relay only this run's metrics
        job.result.unlink(missing_ok=True)
        OmegaConf.save(OmegaConf.create(self.config), job.config)
        OmegaConf.save(OmegaConf.create(list(self.overrides)), job.overrides)
        spec = {"plan": dataclasses.asdict(self.plan), "tracking_uri": self.tracking_uri,
                "launch_dir": self.launch_dir}
        _write_atomically(job.spec, json.dumps(spec, indent=2))

    @classmethod
    def read(cls, job: JobDir) -> "JobSpec":
        spec = json.loads(job.spec.read_text())
        config = OmegaConf.to_container(OmegaConf.load(job.config))
        overrides = list(OmegaConf.load(job.overrides)) if job.overrides.exists() else []
        return cls(config=config, plan=Plan(**spec["plan"]), tracking_uri=spec["tracking_uri"],
                   launch_dir=spec["launch_dir"], overrides=overrides)


@dataclasses.dataclass
class TaskResult:
    """How the chief task ended. Its metrics travel through the metric file, not here."""

    status: str  # FINISHED, FAILED or KILLED
    error: Optional[str] = None
    # When the task process started (time.time()), for start-up figures.
    started_at: Optional[float] = None

    def write(self, job: JobDir) -> None:
        _write_atomically(job.result, json.dumps(dataclasses.asdict(self), indent=2))

    @classmethod
    def read(cls, job: JobDir) -> Optional["TaskResult"]:
        """The result the chief wrote, or None if it wrote none (it died)."""
        try:
            data = json.loads(job.result.read_text())
        except (OSError, ValueError):
            return None
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


class MetricFile:
    """The task's metric log: <job dir>/metrics.jsonl, one JSON line per step.

    The task never imports MLflow (its import and store open took about 3 s here, all of it
    before training could start); the driver, which holds the run, relays the lines to MLflow
    while training runs. add() only buffers; flush() (at each epoch end) appends the buffered
    lines with one write.
    """

    def __init__(self, path: Path):
        self._path = Path(path)
        self._entries: List[tuple] = []

    def add(self, metrics: Dict[str, float], step: int) -> None:
        """Buffers; serialising waits for flush(), so a per-step call costs a few microseconds."""
        self._entries.append((int(step), int(time.time() * 1000), metrics))

    def flush(self) -> None:
        entries, self._entries = self._entries, []  # swapped first: add() may run on a callback thread
        if entries:
            lines = [encode_metrics(step, ts, metrics) for step, ts, metrics in entries]
            with open(self._path, "a") as out:
                out.write("\n".join(lines) + "\n")

    def steps_with(self, key: str) -> List[int]:
        """Steps at which metric `key` is already in the file (written before a restart)."""
        return [step for step, _, metrics in read_metrics(self._path) if key in metrics]


def encode_metrics(step: int, timestamp_ms: int, metrics: Dict[str, float]) -> str:
    return json.dumps({"step": step, "timestamp": timestamp_ms, "metrics": {k: float(v) for k, v in metrics.items()}})


def decode_metrics(line: str) -> Optional[tuple]:
    """(step, timestamp_ms, metrics) of one line; None for a line cut short by a kill."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry["step"], entry["timestamp"], entry["metrics"]


def read_metrics(path: Path) -> List[tuple]:
    """Every complete (step, timestamp_ms, metrics) entry of a metric file."""
    if not Path(path).exists():
        return []
    return [entry for entry in map(decode_metrics, Path(path).read_text().splitlines()) if entry]
