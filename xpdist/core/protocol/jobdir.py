"""The job directory: the one protocol between the driver and its task processes.

    driver writes  config.yaml, overrides.yaml, job.json (JobSpec)      once, before any task
                   run.json (RunReady: the MLflow run exists, or why not)  once, beside the task
    tasks write    resolved.json (the plan as TensorFlow resolved it, strategy=tpu),
                   metrics.jsonl (MetricFile), result.json (TaskResult),
                   task_error.txt, model.keras, mlflow-model/, checkpoints/, logs/, cluster/*.ready,
                   profile/<task>/ (trainer.profile_steps)
    driver reads   metrics.jsonl (relayed to MLflow), result.json, model.keras, mlflow-model/,
                   checkpoints/, profile/

A task's exit code says whether a restart could help (EXIT_* below): the localhost launcher
restarts a cluster only after a task was lost (a signal) or failed with EXIT_RETRYABLE.

Every file name of the job directory is spelled here and nowhere else. Neither TensorFlow
nor MLflow is imported: both sides load this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from xpdist.core.plan import Plan

# The sweep directory's record of its parent run, written by the process that drives a sweep.
SWEEP_FILE = "sweep.json"
# The sweep directory's record of its Optuna study (hydra/sweeper=optuna): storage, name, job -> trial.
STUDY_FILE = "study.json"

# Task exit codes. EXIT_FAILED: a Python exception in user code, config or data, which a
# restart would only repeat. EXIT_RETRYABLE (sysexits' EX_TEMPFAIL): a network-type error
# (a peer unavailable, a deadline exceeded, a connection reset) that a restart may cure.
# EXIT_DISK_FULL (EX_IOERR): the job directory could not be written (no space left), told
# by its code because result.json cannot be written either. EXIT_INTERRUPTED: SIGINT/SIGTERM.
EXIT_FAILED = 1
EXIT_RETRYABLE = 75
EXIT_DISK_FULL = 74
EXIT_INTERRUPTED = 130


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
    # trainer.profile_steps: each training task's profiler trace, under its file name; logged.
    profile = property(lambda self: self.root / "profile")
    # tf-keras BackupAndRestore's state (trainer=fit on a multi-process cluster).
    backup = property(lambda self: self.root / "backup")
    # One log per task of a multi-process cluster, and the launcher's own.
    logs = property(lambda self: self.root / "logs")
    # The localhost launcher's state: tasks.json (pids) and one ready marker per started task.
    cluster_state = property(lambda self: self.root / "cluster")
    # The driver's word that the MLflow run exists (or could not be created): the chief task
    # waits for it before its first training step.
    run_ready = property(lambda self: self.root / "run.json")
    # The chief's plan once TensorFlow has decided the replica count (strategy=tpu).
    resolved = property(lambda self: self.root / "resolved.json")
    # Each training task's temporary files (xpdist.task.boot.private_tempdir), a folder per task
    # named <host>-<pid> (own_scratch): the task removes its own as it ends, the driver those of
    # the tasks that ended without (remove_ended_scratch).
    scratch = property(lambda self: self.root / "tmp")

    def own_scratch(self) -> Path:
        """This process's folder under scratch."""
        return self.scratch / f"{socket.gethostname()}-{os.getpid()}"

    def remove_ended_scratch(self) -> None:
        """Removes the folders under scratch of this host's processes that no longer run (a task
        killed outright), and scratch once empty. Another host's (a shared job directory) is
        left to its own driver."""
        import psutil  # here: only the driver asks, and the task's start need not import it

        host = socket.gethostname()
        for folder in self.scratch.glob(f"{host}-*"):
            pid = folder.name[len(host) + 1:]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.scratch.rmdir()

    def write_resolved(self, plan: Plan) -> None:
        _write_atomically(self.resolved, json.dumps(dataclasses.asdict(plan), indent=2))

    def read_resolved(self) -> Optional[Plan]:
        try:
            return Plan(**json.loads(self.resolved.read_text()))
        except (OSError, ValueError, TypeError):
            return None

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


def checkpoint_epoch(folder: Path) -> int:
    """The epoch of the newest checkpoint in folder (CheckpointManager's `checkpoint` index), 0 for none."""
    index = folder / "checkpoint"
    if not index.exists():
        return 0
    for line in index.read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            name = line.split(":", 1)[1].strip().strip('"')
            return int(name.rsplit("-", 1)[1])
    return 0


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a task needs to run, written once by the driver before any task starts."""

    config: Dict[str, Any]  # the resolved config, plain data
    plan: Plan
    tracking_uri: str
    launch_dir: str  # relative data paths start here
    overrides: List[str] = dataclasses.field(default_factory=list)
    # tracking.resume: epochs the resumed MLflow run already holds (not logged again).
    logged_epochs: List[int] = dataclasses.field(default_factory=list)
    # A task may start again in this job directory (engines.Engine.restarts_tasks): Model.fit
    # backs up every epoch for it.
    restartable: bool = True

    def write(self, job: JobDir, keep_metrics: bool = False) -> None:
        """Writes the job files; keep_metrics: the run continues (a requeued SLURM job), and the
        task reads from the metric file which epochs are logged already."""
        job.root.mkdir(parents=True, exist_ok=True)
        if not keep_metrics:
            job.metrics.unlink(missing_ok=True)  # a reused job dir: relay only this run's metrics
        job.result.unlink(missing_ok=True)
        job.run_ready.unlink(missing_ok=True)
        job.resolved.unlink(missing_ok=True)
        OmegaConf.save(OmegaConf.create(list(self.overrides)), job.overrides)
        self.rewrite(job)

    def rewrite(self, job: JobDir) -> None:
        """The spec and config of a job whose tasks go on at another size: nothing else (the
        run's run.json and metric file stay, the run continues)."""
        OmegaConf.save(OmegaConf.create(self.config), job.config)
        spec = {"plan": dataclasses.asdict(self.plan), "tracking_uri": self.tracking_uri,
                "launch_dir": self.launch_dir, "logged_epochs": list(self.logged_epochs),
                "restartable": self.restartable}
        _write_atomically(job.spec, json.dumps(spec, indent=2))

    @classmethod
    def read(cls, job: JobDir) -> "JobSpec":
        spec = json.loads(job.spec.read_text())
        config = OmegaConf.to_container(OmegaConf.load(job.config))
        overrides = list(OmegaConf.load(job.overrides)) if job.overrides.exists() else []
        return cls(config=config, plan=Plan(**spec["plan"]), tracking_uri=spec["tracking_uri"],
                   launch_dir=spec["launch_dir"], overrides=overrides,
                   logged_epochs=list(spec.get("logged_epochs", [])), restartable=spec.get("restartable", True))


@dataclasses.dataclass
class TaskResult:
    """How the chief task ended. Its metrics travel through the metric file, not here."""

    status: str  # FINISHED, FAILED or KILLED
    error: Optional[str] = None
    # When the task process started (time.time()), for start-up figures.
    started_at: Optional[float] = None
    # A FAILED task whose error a restart may cure (a network-type error); False for an
    # exception in user code, config or data.
    retryable: bool = False
    # The epoch after which a callback (early_stopping) stopped training, or None.
    stopped_early_at_epoch: Optional[int] = None

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


@dataclasses.dataclass
class RunReady:
    """The driver's answer to "does the MLflow run exist?": its id, or the one-line error."""

    run_id: Optional[str] = None
    error: Optional[str] = None

    def write(self, job: JobDir) -> None:
        _write_atomically(job.run_ready, json.dumps(dataclasses.asdict(self)))

    @classmethod
    def wait(cls, job: JobDir, poll_s: float = 0.1) -> "RunReady":
        """Blocks until the driver has written run.json.

        No timeout: the driver writes it once creating the run has succeeded or failed,
        and a task whose driver dies is killed with it (xpdist.task.boot.die_with_driver).
        """
        while True:
            try:
                data = json.loads(job.run_ready.read_text())
            except (OSError, ValueError):
                time.sleep(poll_s)
                continue
            return cls(run_id=data.get("run_id"), error=data.get("error"))


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
