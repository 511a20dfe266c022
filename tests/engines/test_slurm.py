"""cluster=slurm on a real single-node SLURM (scripts/slurm_local.sh): srun steps, the sbatch script.

The node has no GPU and no nvidia-smi: the cluster is resolved without them. Task 0 records
the one MLflow run (a SQLite file in the test's directory: every task of this node sees it).
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from tests.helpers import LOG_MODEL, TINY, Xpdist
from tests.engines.conftest import slurm_client_env
from tests.services import free_port_base
from tests.integration.test_cluster import weights

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]


def srun(xpdist: Xpdist, slurm_env, tasks: int, out: Path, *overrides: str, timeout: float = 480,
         kill_on_bad_exit: bool = True) -> subprocess.CompletedProcess:
    """`srun -n TASKS python -m xpdist ...`, each task's driver with its own hydra.run.dir, the
    tasks on ports free now (cluster.port_base) rather than on 8888 and up, which a process of
    a test running beside this one may hold. kill_on_bad_exit: srun ends the step's other tasks
    when one exits non-zero, as a batch script would want."""
    command = " ".join([sys.executable, "-m", "xpdist", *TINY, f"cluster.port_base={free_port_base(tasks)}",
                        *overrides, "cluster=slurm", f"hydra.run.dir={out}/task-$SLURM_PROCID"])
    argv = ["srun", "-n", str(tasks), "--time=10", f"--kill-on-bad-exit={int(kill_on_bad_exit)}", "bash", "-c",
            f"exec {command}"]
    return subprocess.run(argv, cwd=xpdist.workdir, env=slurm_client_env(slurm_env), capture_output=True,
                          text=True, timeout=timeout)


@contextlib.contextmanager
def holding(port: int):
    """Port `port` taken (listening) for the duration, where it is free; else left to its holder."""
    with socket.socket() as s:
        with contextlib.suppress(OSError):
            s.bind(("", port))
            s.listen()
        yield


def epochs(xpdist: Xpdist, run, key: str = "loss") -> List[int]:
    return [m.step for m in xpdist.client().get_metric_history(run.info.run_id, key)]


def queued(env, job: str = "") -> List[str]:
    """SLURM's queue (one job's entries with `job`), a line per job: id and state."""
    argv = ["squeue", "-h", "-o", "%i %T"] + (["-j", job] if job else [])
    out = subprocess.run(argv, env=env, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def wait_gone(env, job: str, timeout: float) -> None:
    """Until the job (every job with "") has left the queue (ended), or fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not queued(env, job):
            return
        time.sleep(1)
    pytest.fail(f"still queued after {timeout}s: {queued(env, job)}")


def assert_no_step_left(slurm_env, settle_s: float = 30.0) -> None:
    """Nothing of the test's is left in SLURM's queue. A job whose program has just exited stays
    RUNNING for a moment while slurmd ends it (a sweep's last job, when the driver returns as
    soon as its result is written): that is allowed settle_s; a job still running is not."""
    wait_gone(slurm_client_env(slurm_env), "", settle_s)


# One trainer per strategy here: what SLURM changes (the cluster read from SLURM_*, one driver
# per srun task) is the same for both; tests/integration/test_cluster.py runs every trainer.
@pytest.mark.parametrize("trainer", ["fit"])
def test_multi_worker_mirrored_under_srun_matches_one_device(xpdist, slurm_env, tmp_path, trainer):
    common = [f"trainer={trainer}", "model=mlp", "model.hidden_units=[8]", "dataset.num_features=4",
              "dataset.noise=0.5", "seed=7", LOG_MODEL]
    out = tmp_path / "slurm"
    with holding(8888):  # SlurmClusterResolver's default base: the tasks must be on cluster.port_base
        done = srun(xpdist, slurm_env, 2, out, "strategy=multi_worker_mirrored", "communication=ring", *common,
                    "dataset.per_replica_batch_size=5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "task worker:1 FINISHED" in done.stdout and "nvidia-smi" not in done.stdout + done.stderr
    runs = xpdist.runs()
    assert len(runs) == 1, "task 0 alone records the run"
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert (run.data.params["cluster"], run.data.params["num_replicas"]) == ("slurm", "2")
    assert epochs(xpdist, run) == [1, 2]

    flavour = ["keras=legacy"] if trainer == "fit" else []
    single = tmp_path / "single"
    done = xpdist.run("strategy=one_device", *common, *flavour, "dataset.per_replica_batch_size=10",
                      f"hydra.run.dir={single}", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = weights(out / "task-0" / "model.keras"), weights(single / "model.keras")
    assert a.keys() == b.keys() and a
    for name in a:
        assert abs(a[name] - b[name]).max() < 1e-5, name
    assert_no_step_left(slurm_env)


@pytest.mark.parametrize("trainer", ["ctl"])
def test_parameter_server_under_srun(xpdist, slurm_env, tmp_path, trainer):
    """srun -n 4: task 0 coordinates, task 1 is the ps, tasks 2 and 3 are workers."""
    done = srun(xpdist, slurm_env, 4, tmp_path / "ps", "strategy=parameter_server", "cluster.ps=1",
                f"trainer={trainer}")
    assert done.returncode == 0, done.stdout + done.stderr
    for task in ("worker:1", "worker:2", "worker:3"):  # ClusterEnv names srun tasks by SLURM_PROCID
        assert f"task {task} FINISHED" in done.stdout, done.stdout
    runs = xpdist.runs()
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.params["cluster.ps"] == "1"
    assert epochs(xpdist, run) == [1, 2]
    assert_no_step_left(slurm_env)


def test_sbatch_script_as_the_docs_show(xpdist, slurm_env, tmp_path):
    """`sbatch [sizing options] scripts/slurm.sbatch [overrides]`, one node of 2 tasks here."""
    env = slurm_client_env(slurm_env, {"MLFLOW_TRACKING_URI": xpdist.uri})
    submit = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                             str(REPO / "scripts" / "slurm.sbatch"), *TINY,
                             f"cluster.port_base={free_port_base(2)}"],
                            cwd=xpdist.workdir, env=env, capture_output=True, text=True, check=True)
    job = submit.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 480
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True,
                               text=True).stdout.strip()
        if not state:  # gone from the queue: ended
            break
        time.sleep(0.5)  # the job ends some seconds in: look often
    log = xpdist.workdir / f"xpdist-{job}.out"
    assert not state, f"job {job} still {state}"
    text = log.read_text()
    runs = xpdist.runs()
    assert len(runs) == 1, text
    assert runs[0].info.status == "FINISHED", text
    assert runs[0].data.params["num_replicas"] == "2"
    assert (xpdist.workdir / "outputs" / f"slurm-{job}" / "task-1").is_dir()


def test_port_base_out_of_range_is_refused_before_start(xpdist, slurm_env, tmp_path):
    """The tasks' last port (port_base + tasks - 1) past 65535: one line naming the key, exit 2
    from every task, no run recorded."""
    # Each task refuses on its own. With --kill-on-bad-exit, srun would SIGTERM the slower one
    # (exit 130) as soon as the first exited 2: what "every task" saw would follow their speeds
    # (it did on a fresh clone, task 1 killed before its preflight).
    done = srun(xpdist, slurm_env, 2, tmp_path / "bad", "strategy=multi_worker_mirrored", "cluster.port_base=65535",
                timeout=120, kill_on_bad_exit=False)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("xpdist: error: cluster.port_base=65535")]
    assert len(errors) == 2 and "65535 to 65536" in errors[0] and "between 1 and 65534" in errors[0], done.stderr
    assert xpdist.runs() == []



def test_requeued_job_resumes_into_the_same_run(xpdist, slurm_env, tmp_path):
    """`scontrol requeue` mid-training: the job starts again, resumes from its checkpoint and
    continues its MLflow run, each epoch logged once."""
    env = slurm_client_env(slurm_env, {"MLFLOW_TRACKING_URI": xpdist.uri})
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --requeue\n#SBATCH --output=train-%j.out\n"
                      f"srun {sys.executable} -m xpdist trainer=ctl dataset.num_examples=2000 trainer.epochs=4 "
                      "trainer.keep_checkpoints=5 trainer.progress=false hydra.run.dir=$PWD/outputs/slurm-$SLURM_JOB_ID\n")
    job = subprocess.run(["sbatch", "--parsable", str(script)], cwd=xpdist.workdir, env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    first_checkpoint = xpdist.workdir / "outputs" / f"slurm-{job}" / "checkpoints" / "ckpt-1.index"
    saved = requeue_after(first_checkpoint, xpdist.workdir / f"train-{job}.out", env, job, gone_within_s=480)
    log = (xpdist.workdir / f"train-{job}.out").read_text()
    runs = xpdist.runs()
    assert len(runs) == 1, log
    run = runs[0]
    assert run.info.status == "FINISHED", log
    assert run.data.tags["xpdist.slurm_restarts"] == "1"
    for key in ("loss", "epoch_time_s"):
        assert epochs(xpdist, run, key) == [1, 2, 3, 4], log
    # Resumed, not started over: epoch 1 was not trained (and checkpointed) again.
    assert first_checkpoint.stat().st_mtime_ns == saved


def requeue_after(checkpoint: Path, log: Path, env: dict, job: str, gone_within_s: float) -> int:
    """`scontrol requeue` of the job once checkpoint is written; waits until the job is gone.
    Returns the checkpoint's mtime before the requeue (a resumed job does not write it again)."""
    deadline = time.monotonic() + 300
    while not checkpoint.exists():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    time.sleep(0.5)  # the checkpoint's other files
    saved = checkpoint.stat().st_mtime_ns
    subprocess.run(["scontrol", "requeue", job], env=env, check=True, capture_output=True)
    wait_gone(env, job, gone_within_s)
    return saved


# A multi_worker_mirrored run of 2 SLURM tasks and a one_device run that train the same steps
# (the same model, seed and global batch of 10), long enough to be requeued mid-training.
SAME_STEPS = ["trainer=ctl", "model=mlp", "model.hidden_units=[8]", "dataset.num_features=4", "dataset.noise=0.5",
              "seed=7", "dataset.num_examples=3000", "trainer.epochs=4", "trainer.keep_checkpoints=5",
              "trainer.progress=false", LOG_MODEL]


def requeue_two_task_job(xpdist, slurm_env, tmp_path, tasks_after: int = 2):
    """A 2-task multi_worker_mirrored job (each task its own output folder, task-$SLURM_PROCID)
    requeued by `scontrol` after its first checkpoint, brought back with tasks_after tasks.
    Returns the output folder, the job's log and the first checkpoint's mtime, after the job."""
    env = slurm_client_env(slurm_env, {"MLFLOW_TRACKING_URI": xpdist.uri})
    command = " ".join([sys.executable, "-m", "xpdist", "strategy=multi_worker_mirrored", "cluster=slurm",
                        "communication=ring", "dataset.per_replica_batch_size=5", *SAME_STEPS,
                        f"cluster.port_base={free_port_base(2)}"])
    script = tmp_path / "train.sbatch"
    # Brought back with another task count: the requeued start's step has tasks_after tasks (on
    # this one-node SLURM, `scontrol update NumTasks=1` on the held job left its step at 2).
    tasks = f"$(( ${{SLURM_RESTART_COUNT:-0}} > 0 ? {tasks_after} : 2 ))"
    script.write_text("#!/bin/bash\n#SBATCH --requeue\n#SBATCH --ntasks=2\n#SBATCH --output=train-%j.out\n"
                      f"srun -n {tasks} --kill-on-bad-exit=1 bash -c 'exec {command} "
                      "hydra.run.dir=$PWD/outputs/slurm-$SLURM_JOB_ID/task-$SLURM_PROCID'\n")
    job = subprocess.run(["sbatch", "--parsable", str(script)], cwd=xpdist.workdir, env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    out = xpdist.workdir / "outputs" / f"slurm-{job}"
    first_checkpoint = out / "task-0" / "checkpoints" / "ckpt-1.index"
    saved = requeue_after(first_checkpoint, xpdist.workdir / f"train-{job}.out", env, job, gone_within_s=600)
    return out, (xpdist.workdir / f"train-{job}.out").read_text(), first_checkpoint, saved


def assert_same_weights_as_one_device(xpdist, tmp_path, out: Path) -> None:
    single = tmp_path / "single"
    done = xpdist.run("strategy=one_device", "dataset.per_replica_batch_size=10", *SAME_STEPS,
                      f"hydra.run.dir={single}", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = weights(out / "task-0" / "model.keras"), weights(single / "model.keras")
    assert a.keys() == b.keys() and a
    worst = max(float(abs(a[name] - b[name]).max()) for name in a)
    assert worst < 1e-5, f"the resumed run's weights differ from the uninterrupted run's by {worst}"


def test_requeued_two_task_job_resumes_every_worker_from_the_chiefs_checkpoint(xpdist, slurm_env, tmp_path):
    """Only the chief's output folder holds the checkpoints: both tasks must resume from them,
    so the run ends with the weights of a run trained without interruption, every epoch logged
    once. (Before, the other task started over from its empty folder, and the job failed in
    its first collective.)"""
    out, log, first_checkpoint, saved = requeue_two_task_job(xpdist, slurm_env, tmp_path)
    runs = xpdist.runs()
    assert len(runs) == 1, log
    run = runs[0]
    assert run.info.status == "FINISHED", log[-3000:]
    assert run.data.tags["xpdist.slurm_restarts"] == "1"
    assert epochs(xpdist, run) == [1, 2, 3, 4], log[-3000:]
    # Resumed, not started over: epoch 1 was not trained (and checkpointed) again, and the
    # worker's folder got the chief's checkpoints.
    assert first_checkpoint.stat().st_mtime_ns == saved
    assert (out / "task-1" / "checkpoints" / "ckpt-1.index").is_file()
    assert "xpdist.resized" not in run.data.tags
    assert_same_weights_as_one_device(xpdist, tmp_path, out)
    assert_no_step_left(slurm_env)


def test_requeued_job_back_with_one_task_continues_at_that_size(xpdist, slurm_env, tmp_path):
    """Requeued onto one task: the run goes on at one replica with the global batch kept (the
    resize of tracking.resume), so it still ends with the uninterrupted run's weights."""
    out, log, first_checkpoint, saved = requeue_two_task_job(xpdist, slurm_env, tmp_path, tasks_after=1)
    runs = xpdist.runs()
    assert len(runs) == 1, log
    run = runs[0]
    assert run.info.status == "FINISHED", log[-3000:]
    assert epochs(xpdist, run) == [1, 2, 3, 4], log[-3000:]
    assert first_checkpoint.stat().st_mtime_ns == saved
    at = int(run.data.tags["xpdist.resized"].split(":")[0].removeprefix("from epoch ")) - 1
    assert run.data.tags["xpdist.resized"].endswith(": 2 -> 1 replicas, global batch 10 kept, per-replica batch "
                                                    "5 -> 10, learning rate 0.01 kept"), run.data.tags["xpdist.resized"]
    assert at >= 1 and "at another size: 2 -> 1 replicas" in log
    history = sorted((m.step, m.value) for m in xpdist.client().get_metric_history(run.info.run_id, "num_replicas"))
    assert history == [(e, 2.0 if e <= at else 1.0) for e in range(1, 5)]
    assert_same_weights_as_one_device(xpdist, tmp_path, out)
    assert_no_step_left(slurm_env)


def test_sweep_on_slurm_with_a_failed_and_a_cancelled_job(xpdist, slurm_env):
    """hydra/launcher=slurm against the real controller: one SLURM job per sweep job. The tpu
    job fails (no TPU), one_device is cancelled mid-training with scancel (its run KILLED),
    mirrored finishes; the sweep goes on, prints its table and exits non-zero."""
    env = slurm_client_env(slurm_env)
    argv = [sys.executable, "-m", "xpdist", "-m", "hydra/launcher=slurm", "strategy=one_device,mirrored,tpu",
            "trainer=ctl", "dataset.num_examples=2000", "trainer.epochs=20", "trainer.progress=false",
            "hydra.launcher.partition=debug", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10"]
    proc = subprocess.Popen(argv, cwd=xpdist.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # one_device (job 0) has logged an epoch: cancel its SLURM job
            metrics = list(xpdist.workdir.glob("multirun/*/*/0/metrics.jsonl"))
            if metrics and "epoch_time_s" in metrics[0].read_text():
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        submitted = [p.name for p in xpdist.workdir.glob("multirun/*/*/.submitit/*_*")
                     if re.fullmatch(r"\d+_\d+", p.name)]  # one folder per array task
        assert sorted(name.split("_")[1] for name in submitted) == ["0", "1", "2"], submitted
        subprocess.run(["scancel", sorted(submitted)[0]], env=env, check=True)
        out, err = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, out + err
    runs = xpdist.runs()
    parents = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id),
                      key=lambda r: int(r.data.tags["xpdist.job"]))
    assert [(c.data.tags["xpdist.overrides"].split()[0], c.info.status) for c in children] == [
        ("strategy=one_device", "KILLED"), ("strategy=mirrored", "FINISHED"), ("strategy=tpu", "FAILED")]
    assert "TPU" in children[2].data.tags["xpdist.error"]
    assert epochs(xpdist, children[1]) == list(range(1, 21))
    table = out[out.index("job  overrides"):]
    for line, status in zip(table.splitlines()[2:5], ("KILLED", "FINISHED", "FAILED")):
        assert status in line, table
    assert_no_step_left(slurm_env)
