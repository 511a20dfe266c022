"""Real multi-process TensorFlow clusters on 127.0.0.1 (cluster=localhost), and TF_CONFIG checks.

Every cluster test reads the MLflow run back, and checks afterwards that no task process of
its job is left and that no port of its cluster is still listening.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import List, Set

import psutil
import pytest

from tests import zygote
from tests.helpers import TINY, Xpdist, xpdist_env
from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import check_tf_config
from xpdist.core.protocol.jobdir import JobDir

CLUSTER = pytest.mark.cluster
SLOW = pytest.mark.slow
MWMS = ["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2"]
PS = ["strategy=parameter_server", "cluster=localhost", "cluster.workers=2", "cluster.ps=1"]
# Enough steps that an epoch lasts a few seconds, so a worker can be killed mid-training.
LONG = ["dataset.num_examples=2000", "trainer.epochs=5"]


# --- helpers -------------------------------------------------------------------------------

def cluster_ports(job_dir: Path) -> Set[int]:
    """Every port any task of the job was given (all attempts), from the launcher's log headers."""
    ports: Set[int] = set()
    for log in (job_dir / "logs").glob("*.log"):
        ports.update(int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", log.read_text(errors="replace")))
    return ports


def assert_nothing_left(job_dir: Path) -> None:
    """No task process of this job runs and none of its ports listens (allowing the kernel a
    moment); no task's temporary folder is left, a killed task's included (JobDir.scratch)."""
    assert not JobDir(job_dir).scratch.exists(), list(JobDir(job_dir).scratch.rglob("*"))
    deadline = time.monotonic() + 10
    while True:
        procs = [p for p in psutil.process_iter(["cmdline"])
                 if "xpdist.task" in " ".join(p.info["cmdline"] or []) and str(job_dir) in " ".join(p.info["cmdline"])]
        ports = cluster_ports(job_dir)
        listening = {c.laddr.port for c in psutil.net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port in ports}
        if not procs and not listening:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: processes {[p.pid for p in procs]}, listening ports {sorted(listening)}")
        time.sleep(0.5)


def only_run(xpdist: Xpdist):
    runs = xpdist.runs()
    assert len(runs) == 1, f"expected exactly one MLflow run, found {len(runs)}"
    return runs[0]


def epochs_logged(xpdist: Xpdist, run, key: str = "loss") -> List[int]:
    return [m.step for m in xpdist.client().get_metric_history(run.info.run_id, key)]


def weights(model_file: Path) -> dict:
    """The arrays of a .keras file's model.weights.h5, read without TensorFlow (tests/engines use it)."""
    import io

    import h5py

    arrays = {}
    with zipfile.ZipFile(model_file) as archive:
        with h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as h5:
            h5.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


def start(xpdist: Xpdist, job_dir: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "xpdist", *TINY, *overrides, f"hydra.run.dir={job_dir}"]
    return zygote.popen(cmd, xpdist.workdir, xpdist_env(), stderr=subprocess.STDOUT)


def kill_after(proc: subprocess.Popen, job_dir: Path, task: str, ready: Path, timeout: float = 300) -> int:
    """SIGKILLs `task` once `ready` exists (an epoch is done); returns the pid killed."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.communicate()[0] if proc.poll() is not None else "(still running)"
            pytest.fail(f"{ready} never appeared; xpdist output:\n{out}")
        time.sleep(0.1)
    pid = json.loads((job_dir / "cluster" / "tasks.json").read_text())["pids"][task]
    os.kill(pid, signal.SIGKILL)
    return pid


def finish(proc: subprocess.Popen, timeout: float = 400) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# --- TF_CONFIG (fast: no TensorFlow, no process) --------------------------------------------

GOOD = {"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("raw, why", [
    ("{not json", "not valid JSON"),
    (json.dumps({"cluster": {"worker": ["h:1"]}}), "no 'task'"),
    (json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster'"),
    (json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}), "out of range"),
    (json.dumps({"cluster": {"master": ["h:1"]}, "task": {"type": "master", "index": 0}}), "unknown job type"),
    (json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "boss", "index": 0}}), "unknown task type"),
    (json.dumps({"cluster": {"worker": ["nocolon"]}, "task": {"type": "worker", "index": 0}}), "host:port"),
    (json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}), "evaluator"),
    ("", "needs the TF_CONFIG"),
])
def test_malformed_tf_config_is_one_line_naming_the_key(raw, why):
    with pytest.raises(ConfigError) as err:
        check_tf_config(raw, "multi_worker_mirrored")
    message = str(err.value)
    assert "TF_CONFIG" in message and why in message and "\n" not in message


def test_parameter_server_tf_config_needs_a_chief():
    spec = {"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 0}}
    with pytest.raises(ConfigError, match="needs a 'chief' job"):
        check_tf_config(json.dumps(spec), "parameter_server")
    assert check_tf_config(json.dumps(GOOD), "multi_worker_mirrored")["task"]["index"] == 1


@SLOW
def test_malformed_tf_config_from_the_cli_leaves_no_run(xpdist):
    done = xpdist.run("strategy=multi_worker_mirrored", "cluster=tf_config",
                      env={"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}})})
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("xpdist: error:")]
    assert len(errors) == 1 and "TF_CONFIG" in errors[0] and "out of range" in errors[0]
    assert xpdist.runs() == []


# --- multi_worker_mirrored ---------------------------------------------------------------
# Two localhost workers ending with one_device's weights under ctl and fit (tf-keras), their
# params, epochs and task logs, and nothing left after them: test_training.py's 2-worker runs
# (equivalence-mwms-ctl and -fit, communication=ring) check all of it on runs made once.

@SLOW
@CLUSTER
@pytest.mark.parametrize("trainer", ["fit", "ctl"])
def test_killed_worker_restarts_the_cluster_and_training_resumes(xpdist, tmp_path, trainer):
    job = tmp_path / "job"
    proc = start(xpdist, job, *MWMS, *LONG, f"trainer={trainer}", "cluster.max_restarts=1")
    kill_after(proc, job, "worker:1", job / "checkpoints" / "ckpt-1.index")
    out = finish(proc)
    assert proc.returncode == 0, out
    assert "restarting the cluster (1/1)" in out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and run.data.tags["xpdist.restarts"] == "1"
    for key in ("loss", "epoch_time_s"):  # every epoch once: no gap, no repeat
        assert epochs_logged(xpdist, run, key) == [1, 2, 3, 4, 5]
    # Model.fit resumed from Keras' backup, made only where a task can start again.
    assert (job / "backup").is_dir() == (trainer == "fit")
    assert_nothing_left(job)


# --- parameter_server ----------------------------------------------------------------------

@SLOW
@CLUSTER
def test_parameter_server_fit(xpdist, tmp_path):
    job = tmp_path / "job"
    done = xpdist.run(*PS, "strategy.variable_partitioner=min_size", "strategy.min_shard_bytes=4",
                      f"hydra.run.dir={job}", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    run = only_run(xpdist)
    assert run.info.status == "FINISHED"
    assert (run.data.params["cluster.ps"], run.data.params["keras"]) == ("1", "legacy")
    assert epochs_logged(xpdist, run) == [1, 2]
    assert {p.name for p in (job / "logs").iterdir()} >= {"chief-0.log", "worker-0.log", "worker-1.log", "ps-0.log"}
    # No task can start again (cluster.max_restarts=0): no backup beside the checkpoints each epoch.
    assert (job / "checkpoints").is_dir() and not (job / "backup").exists()
    assert_nothing_left(job)


@SLOW
@CLUSTER
def test_parameter_server_ctl_survives_a_killed_worker(xpdist, tmp_path):
    """The launcher keeps going when a worker dies; ClusterCoordinator moves its steps.

    TensorFlow's coordinator sometimes reads a worker that dies in the middle of a call to
    the parameter server as a parameter-server failure and raises (seen once in 7 runs
    here); cluster.max_restarts=1 then restarts the cluster from the last checkpoint. The
    test accepts that path only with the coordinator, not the dead worker, as the cause.
    """
    job = tmp_path / "job"
    proc = start(xpdist, job, *PS, *LONG, "trainer=ctl", "dataset.num_examples=1000", "trainer.epochs=4",
                 "cluster.max_restarts=1")
    kill_after(proc, job, "worker:1", job / "checkpoints" / "ckpt-1.index")
    out = finish(proc)
    assert proc.returncode == 0, out
    assert "worker:1 died" in out and "worker:1 failed" not in out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and run.data.params["keras"] == "keras3"
    if "xpdist.restarts" in run.data.tags:
        assert "chief:0 failed" in out
    assert epochs_logged(xpdist, run) == [1, 2, 3, 4]
    assert_nothing_left(job)


# --- cluster=tf_config: processes a cluster manager started ---------------------------------

@SLOW
@CLUSTER
def test_tf_config_tasks_make_one_run_recorded_by_the_chief(xpdist, tmp_path):
    """Two `python -m xpdist cluster=tf_config` processes, as a TFJob would start them."""
    from xpdist.driver.processes.localhost import free_ports

    spec = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        env = xpdist_env({"TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "worker", "index": index}})})
        cmd = [sys.executable, "-m", "xpdist", *TINY, "strategy=multi_worker_mirrored", "cluster=tf_config",
               "trainer=ctl", f"hydra.run.dir={tmp_path / f'worker-{index}'}"]
        procs.append(subprocess.Popen(cmd, cwd=xpdist.workdir, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    chief_out, worker_out = (finish(p) for p in procs)
    assert [p.returncode for p in procs] == [0, 0], chief_out + worker_out
    assert "task worker:1 FINISHED" in worker_out and "the chief records the run" in worker_out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and run.data.params["num_replicas"] == "2"
    assert epochs_logged(xpdist, run) == [1, 2]
    # Only the chief's task writes the run's outputs: no result, no metrics from worker 1.
    assert not JobDir(tmp_path / "worker-1").result.exists() and not JobDir(tmp_path / "worker-1").metrics.exists()
    for index in range(2):
        assert_nothing_left(tmp_path / f"worker-{index}")
