"""Nothing lost, nothing stuck: a store that cannot be written, a deterministic error under
max_restarts, a driver killed by SIGKILL, a second Ctrl-C, a full disk, a resumed run, sweeps
over the experiment. Each ends in one line, with no run left RUNNING and no process behind.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from xpdist.tracking.heartbeat import HEARTBEAT_TAG
from xpdist.tracking.params import SUMMARY_PARAMS

from tests import zygote
from tests.helpers import REPO, TINY, Xpdist, xpdist_env

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def _one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("xpdist: error:")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return lines[0]


class _HealthyButBroken(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers /health and fails every API call."""

    def _answer(self):
        ok = self.path.rstrip("/") == "/health"
        self.send_response(200 if ok else 500)
        self.end_headers()
        self.wfile.write(b"OK" if ok else b"internal error")

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *_args):
        pass


@contextlib.contextmanager
def broken_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HealthyButBroken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("store", ["server", "corrupt_sqlite"])
def test_store_that_cannot_be_written_fails_before_training(xpdist, store):
    with contextlib.ExitStack() as stack:
        if store == "server":
            uri = stack.enter_context(broken_server())
        else:
            (xpdist.workdir / "bad.db").write_text("not a database")
            uri = f"sqlite:///{xpdist.workdir / 'bad.db'}"
        # MLflow's HTTP retries would only make the same answer slower.
        proc = xpdist.run(f"tracking.uri={uri}", "trainer.epochs=3", env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line_error(proc)
    assert f"tracking.uri={uri}" in line and "the MLflow run could not be created" in line
    assert "Epoch" not in proc.stdout
    metric_files = list(xpdist.workdir.glob("outputs/**/metrics.jsonl"))
    assert not metric_files or all(not f.read_text() for f in metric_files)
    assert not any(xpdist.workdir.glob("outputs/**/checkpoints/*"))


def test_deterministic_failure_is_not_restarted(xpdist):
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{HERE}"}
    proc = xpdist.run("strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2",
                      "cluster.max_restarts=2", "model=custom", "model._target_=lifecycle_models.raising_model",
                      env=env, timeout=400)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "restarting" not in proc.stdout + proc.stderr
    (run,) = xpdist.runs()
    assert run.info.status == "FAILED"
    assert "ValueError: this model function always fails" in run.data.tags["xpdist.error"]
    assert "xpdist.restarts" not in run.data.tags
    logs = list(xpdist.workdir.glob("outputs/**/logs/worker-0.log"))
    assert len(logs) == 1 and "attempt 2" not in logs[0].read_text()


# 4000 steps per epoch at one step per call: long enough to be interrupted mid-epoch.
LONG = ["dataset.num_examples=20000", "trainer.steps_per_execution=1"]


def start(xpdist: Xpdist, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "xpdist", *TINY, *overrides]
    return zygote.popen(cmd, xpdist.workdir, xpdist_env())


def wait_for_epoch(xpdist: Xpdist, proc: subprocess.Popen, epoch: int, timeout: float = 300,
                   checkpointed: bool = False) -> Path:
    """Waits until the job's metric file holds `epoch` (and, if checkpointed, its checkpoint
    is written: it follows the epoch's metrics); returns the job directory."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in xpdist.workdir.glob("outputs/**/metrics.jsonl"):
            steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]
            index = path.parent / "checkpoints" / "checkpoint"
            saved = index.exists() and f'"ckpt-{epoch}"' in index.read_text().splitlines()[0]
            if epoch in steps and (saved or not checkpointed):
                return path.parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"epoch {epoch} not reached in {timeout} s")


def finish(proc: subprocess.Popen, timeout: float = 120):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def listening(ports) -> list:
    return [c for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port in ports]


def test_driver_killed_run_is_closed_by_the_next_command(xpdist):
    proc = start(xpdist, "strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2", "trainer=ctl",
                 "trainer.epochs=1000", "tracking.heartbeat_s=1", "dataset.num_examples=1000")
    try:
        # until epoch 1's checkpoint too: it follows the epoch's metrics, and a kill between the
        # two (seen once in CI) left no checkpoints folder for the check below
        job_dir = wait_for_epoch(xpdist, proc, 1, checkpointed=True)
        tasks = psutil.Process(proc.pid).children(recursive=True)
        assert len(tasks) >= 2
        ports = set()
        for task in tasks:
            with contextlib.suppress(psutil.Error):
                ports |= {c.laddr.port for c in task.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        assert ports, "the cluster's tasks should listen"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _, alive = psutil.wait_procs(tasks, timeout=15)
        assert not alive, f"tasks outlived their driver: {alive}"
        assert not listening(ports)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    (run,) = xpdist.runs()
    assert run.info.status == "RUNNING"  # nobody could close it
    assert (job_dir / "checkpoints").is_dir()
    # A reaper leaves a run alone until its last heartbeat is three of its 1 s intervals old (the
    # tag is in whole seconds): wait until then, counted from that heartbeat, not from now.
    beat = float(run.data.tags[HEARTBEAT_TAG])
    while time.time() - beat < 4:
        time.sleep(0.1)
    later = xpdist.run("tracking.heartbeat_timeout_s=2", "trainer.epochs=1")
    assert later.returncode == 0, later.stdout + later.stderr
    assert f"closed run {run.info.run_id} as FAILED" in later.stderr
    lost = xpdist.client().get_run(run.info.run_id)
    assert lost.info.status == "FAILED"
    assert lost.data.tags["xpdist.error"].startswith("driver lost; last heartbeat at ")
    assert [r.info.status for r in xpdist.runs()] == ["FAILED", "FINISHED"]


def test_second_ctrl_c_leaves_nothing_running(xpdist):
    proc = start(xpdist, "trainer=ctl", "trainer.epochs=1000", *LONG)
    try:
        wait_for_epoch(xpdist, proc, 1)
        tasks = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(tasks, timeout=10)
    assert not alive, f"left running: {alive}"
    assert code == 130, out + err
    assert "Traceback" not in err
    (run,) = xpdist.runs()
    assert run.info.status == "KILLED"


# fit under mirrored: its batches are skipped before the strategy distributes them. Interrupted
# once epoch 2 is checkpointed, so that the resumed run has one epoch of 4000 steps left.
@pytest.mark.parametrize("trainer", ["fit", "ctl"])
def test_resume_continues_the_same_run(xpdist, trainer):
    strategy = ["strategy=mirrored", "devices.logical_cpus=2"] if trainer == "fit" else []
    overrides = [f"trainer={trainer}", "trainer.epochs=3", *strategy, *LONG]
    proc = start(xpdist, *overrides)
    wait_for_epoch(xpdist, proc, 2, checkpointed=True)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, out + err
    (run,) = xpdist.runs()
    run_id = run.info.run_id
    assert run.info.status == "KILLED"

    changed = xpdist.run(*overrides, "optimizer.learning_rate=0.5", f"tracking.resume={run_id}")
    assert changed.returncode == 2
    assert _one_line_error(changed).startswith("xpdist: error: optimizer.learning_rate=0.5: ")

    resumed = xpdist.run(*overrides, f"tracking.resume={run_id}")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (run,) = xpdist.runs()
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert run.data.tags["xpdist.resumed"] == "1"
    assert "xpdist.error" not in run.data.tags
    for metric in ("loss", "epoch_time_s"):
        steps = [m.step for m in xpdist.client().get_metric_history(run_id, metric)]
        assert sorted(steps) == [1, 2, 3], (metric, steps)
    assert int(run.data.tags["xpdist.resumed_from_epoch"]) >= 2  # not from the start

    again = xpdist.run(*overrides, f"tracking.resume={run_id}")
    assert again.returncode == 2
    assert "the run is FINISHED" in _one_line_error(again)


def test_full_disk_ends_failed_in_one_line(xpdist):
    mount = xpdist.workdir / "small"
    mount.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    try:
        # The job directory on the small disk; the store beside it. An mlp whose checkpoints do not fit.
        proc = xpdist.run(f"hydra.run.dir={mount}/job", f"tracking.uri={xpdist.uri}", "model=mlp",
                          "model.hidden_units=[256,256]", "dataset.num_features=64")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = xpdist.runs()
    assert run.info.status == "FAILED"
    error = run.data.tags["xpdist.error"]
    assert "No space left on device" in error or "no space left on device" in error, error
    assert "\n" not in error
    assert "Traceback" not in proc.stdout + proc.stderr


def test_sweep_over_experiments_lists_every_job(xpdist):
    proc = xpdist.run("tracking.experiment=alpha,beta", "trainer.epochs=1", multirun=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 jobs, 2 finished, 0 failed" in proc.stdout
    assert len(xpdist.runs("alpha")) == 1 and len(xpdist.runs("beta")) == 1


def test_sweep_over_stores_is_refused(xpdist):
    proc = xpdist.run(f"tracking.uri={xpdist.uri},sqlite:///{xpdist.workdir / 'other.db'}", multirun=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "xpdist: error: tracking.uri=" in _one_line_error(proc)
    assert not (xpdist.workdir / "other.db").exists()
    assert "Epoch" not in proc.stdout


def test_rejected_child_carries_the_summary_params(xpdist):
    proc = xpdist.run("strategy=default,tpu", "trainer.epochs=1", multirun=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    children = [r for r in xpdist.runs() if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.info.status for r in children) == ["FAILED", "FINISHED"]
    for child in children:  # the same summary params; each its own option's keys (strategy.tpu)
        assert set(SUMMARY_PARAMS) <= set(child.data.params), child.info.run_name
    rejected = next(r for r in children if r.info.status == "FAILED")
    assert rejected.data.params["strategy"] == "tpu" and rejected.data.params["num_replicas"] == "none"
