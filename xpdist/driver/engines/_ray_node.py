"""cluster=ray's side on a node: one task of the job, kept by one Ray actor.

The driver (engines/ray.py) makes one `Node` actor per bundle of its placement group. The
actor lives on its node and shares no directory with the driver: it unpacks the job directory
the driver sends as bytes into a fresh directory of its node, runs `python -m xpdist.task`
there as its child (which dies with the actor: xpdist.task.boot.die_with_driver), and hands
back on request what the driver needs: the new lines of the task's log and metric file, its
exit code, and at the end the chief's result, model and checkpoints, as bytes.

Ray is imported only here and in engines/ray.py, and only when cluster=ray runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Optional

from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver.processes import spawn

# What a task leaves that the driver's job directory needs (JobDir's names, never spelled here).
OUTPUTS = ("result", "resolved", "task_error", "model", "mlflow_model", "checkpoints")
# What a restarted task resumes from: the chief's recovery state.
RECOVERY = ("checkpoints", "backup")
def pack(job: JobDir, names: Iterable[str]) -> bytes:
    """The named parts of a job directory (JobDir attributes) that exist, as a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            path = getattr(job, name)
            if path.exists():
                # resolve(): a part that is a link to shared storage travels as its contents
                tar.add(str(path.resolve()), arcname=path.relative_to(job.root).as_posix())
    return buffer.getvalue()


def unpack(data: bytes, root: Path) -> None:
    """Extracts an archive made by pack() into root (its members are relative, checked by the filter)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(root, filter="data")


class Node:
    """One task of a cluster=ray job on this node; a Ray actor (engines/ray.py wraps it).

    Args:
        task_file_name: the task's name in file names (worker-1).
        is_chief: it writes the metric file and the result.
        job_key: the job's key (in the name of its directory here, /tmp/xpdist-ray-<key>-<task>-*).
    """

    def __init__(self, task_file_name: str, is_chief: bool, job_key: str):
        self.name, self.is_chief, self.key = task_file_name, is_chief, job_key
        self.home: Optional[Path] = None  # made by start(), removed by close()
        self.job = JobDir(Path("."))
        self.proc: Optional[subprocess.Popen] = None
        self.log_offset = self.metrics_offset = 0

    def address(self) -> str:
        """host:port of this task's TensorFlow server: this node's address and a port free on it now."""
        import portpicker
        import ray

        return f"{ray.util.get_node_ip_address()}:{portpicker.pick_unused_port()}"

    def start(self, job_files: bytes, env: Dict[str, str], tf_config: str,
              shared: Optional[str] = None) -> int:
        """Materialises the job directory here and starts the task; returns its pid.

        Args:
            job_files: the driver's job files (pack()).
            env: the job's environment variables, laid over this node's own.
            tf_config: the task's TF_CONFIG, with addresses valid on every node.
            shared: cluster.checkpoint_dir's directory for this job, on storage every node mounts:
                the checkpoints and backups live there, so a task restarted elsewhere resumes.
        """
        self.home = Path(tempfile.mkdtemp(prefix=f"xpdist-ray-{self.key}-{self.name}-"))
        self.job = JobDir(self.home / "job")
        self.job.root.mkdir()
        unpack(job_files, self.job.root)
        if shared:
            for name in RECOVERY:
                self._link_shared(getattr(self.job, name), Path(shared) / name)
        self.job.logs.mkdir(exist_ok=True)
        self.job.cluster_state.mkdir(exist_ok=True)  # the task marks itself ready there
        self.metrics_offset = self.job.metrics.stat().st_size if self.job.metrics.exists() else 0
        env = {**os.environ, **env, "TF_CONFIG": tf_config}
        env.pop("RAY_ADDRESS", None)
        # A Ray worker ignores SIGINT and blocks SIGINT and SIGTERM, and a child inherits both
        # through exec; the task takes them back at its start (xpdist.task.boot.stoppable), so the
        # SIGINT that lets it save and stop reaches it, as on a terminal. SIGTERM alone would not
        # do: a multi_worker_mirrored task trains on after it (TensorFlow's preemption handling
        # watches SIGTERM, the likely cause, not traced).
        with open(self.job.log_of(self.name), "ab") as log:  # the child holds its own copy
            self.proc = spawn.spawn(spawn.task_command(str(self.job.root)), env, log)
        return self.proc.pid

    @staticmethod
    def _link_shared(local: Path, shared: Path) -> None:
        if local.exists() and not shared.exists():  # the driver's (tracking.resume): the first start seeds it
            shared.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(local, shared)
        shutil.rmtree(local, ignore_errors=True)
        shared.mkdir(parents=True, exist_ok=True)
        local.symlink_to(shared, target_is_directory=True)

    def poll(self) -> dict:
        """The task's state: exit code (None while it runs), ready, and what its log and
        (the chief's) metric file gained since the last poll."""
        code = self.proc.poll() if self.proc else None
        log, self.log_offset = _read_from(self.job.log_of(self.name), self.log_offset)
        metrics = b""
        if self.is_chief:
            metrics, self.metrics_offset = _read_from(self.job.metrics, self.metrics_offset, whole_lines=True)
        return {"code": code, "ready": self.job.ready_marker(self.name).exists(), "log": log, "metrics": metrics}

    def put(self, name: str, data: bytes) -> None:
        """Writes one job file the driver writes while the task runs (run_ready: JobDir's name)."""
        path = getattr(self.job, name)
        staged = path.with_name(path.name + ".tmp")
        staged.write_bytes(data)
        os.replace(staged, path)

    def outputs(self, recovery: bool = False) -> bytes:
        """The chief's outputs for the driver's job directory; recovery: its checkpoints and backup."""
        return pack(self.job, RECOVERY if recovery else OUTPUTS)

    def signal(self, signum: int) -> None:
        """Signals the task's process group (its SIGINT lets it save and stop, see start)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def close(self) -> None:
        """Kills what is left of the task and removes the job directory from this node."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def _read_from(path: Path, offset: int, whole_lines: bool = False) -> tuple:
    """The bytes of path after offset (up to the last newline with whole_lines), and the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return b"", offset
    if whole_lines:
        data = data[: data.rfind(b"\n") + 1]
    return data, offset + len(data)
