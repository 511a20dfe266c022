"""The standby task (xpdist/driver/processes/standby.py): a single run trains in the task process started
with the command, which imports TensorFlow while Hydra composes the config; whatever happens to
the command, that process does not outlive it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from tests.helpers import LOG_MODEL, TINY, xpdist_env
from xpdist.core.protocol.taskenv import Handoff
from xpdist.driver.processes import standby

pytestmark = pytest.mark.slow
LINEAR = ["model=linear", "dataset=synthetic_regression"]


def standby_tasks(cwd) -> list:
    """Standby tasks started in cwd (a test's own folder)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[-2:-1] == ["--standby"] and proc.info["cwd"] == str(cwd):
            found.append(proc)
    return found


def temp_dir(xpdist):
    """A temporary directory of the test's own, for the command's TMPDIR: what it leaves there
    is what a run leaves in /tmp."""
    made = xpdist.workdir / "tmp"
    made.mkdir()
    return made


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_a_single_run_trains_in_the_task_started_with_the_command(xpdist, enabled):
    tmp = temp_dir(xpdist)
    run = xpdist.run(*LINEAR, "hydra.run.dir=job", env={"XPDIST_STANDBY": enabled, "TMPDIR": str(tmp)})
    assert run.returncode == 0, run.stdout + run.stderr
    # AutoGraph's source files, which TensorFlow deletes at exit, left by a task ending with
    # os._exit before xpdist.task.boot.private_tempdir
    assert not list(tmp.iterdir()), "the run left temporary files"
    assert not (xpdist.workdir / "job" / "tmp").exists(), "the task's own temporary folder is left"
    job = xpdist.workdir / "job"
    # With the standby the task process is older than its job (job.json is written once the
    # config was composed and checked); with XPDIST_STANDBY=0 it is not.
    assert _task_started_before_its_job(job) == (enabled == "1")
    (mlflow_run,) = xpdist.runs()
    assert mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.metrics["first_step_s"] > 0


def _task_started_before_its_job(job) -> bool:
    task_started = json.loads((job / "result.json").read_text())["started_at"]
    return task_started < (job / "job.json").stat().st_mtime


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_a_tf_keras_runs_mlflow_model_is_its_keras_model_standby_or_not(xpdist, enabled):
    """The standby imports TensorFlow before its job says which Keras. Before
    boot.keras_importable_as_tensorflow_keras, `import tensorflow.keras` then gave Keras 3 in a
    tf-keras run, and MLflow's tensorflow flavour saved the model as a SavedModel of a plain
    tf.Module (model_type tf2-module), where the same run without the standby saved the Keras
    model: the flavour depended on which process trained."""
    run = xpdist.run(*LINEAR, "strategy=central_storage", "hydra.run.dir=job", LOG_MODEL,
                     env={"XPDIST_STANDBY": enabled})
    assert run.returncode == 0, run.stdout + run.stderr
    job = xpdist.workdir / "job"
    assert _task_started_before_its_job(job) == (enabled == "1")
    flavour = yaml.safe_load((job / "mlflow-model" / "MLmodel").read_text())["flavors"]["tensorflow"]
    assert flavour["model_type"] == "keras", flavour
    assert (job / "mlflow-model" / flavour["data"] / "model.keras").is_file()


@pytest.mark.parametrize("launcher", ["basic", "local_parallel"])
def test_a_sweeps_jobs_get_standby_tasks(xpdist, launcher):
    # Two jobs. basic: the first takes the standby started with the command, the second one the
    # sweep started for it once the first job's task had ended (refill). local_parallel: each
    # job's process, forked from the sweep's, starts one as it begins (the command starts none).
    run = xpdist.run(*LINEAR, "optimizer.learning_rate=0.01,0.05", "hydra.sweep.dir=sweep",
                     f"hydra/launcher={launcher}", multirun=True)
    assert run.returncode == 0, run.stdout + run.stderr
    jobs = [xpdist.workdir / "sweep" / str(num) for num in range(2)]
    assert [_task_started_before_its_job(job) for job in jobs] == [True, True]
    deadline = time.monotonic() + 10  # a process just killed may still be listed: allow it a moment
    while standby_tasks(xpdist.workdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert standby_tasks(xpdist.workdir) == []
    children = xpdist.runs()
    assert sorted(r.info.status for r in children) == ["FINISHED"] * 3  # the parent and 2 jobs
    for child in (r for r in children if "mlflow.parentRunId" in r.data.tags):
        # counted from the job's start, not from the sweep's or its standby's
        assert 0 < child.data.metrics["first_step_s"] < float(child.data.tags["xpdist.wall_time_s"])


# On every Python process of a command (PYTHONPATH): notes the pid of a process that imports
# TensorFlow, in the file XPDIST_TEST_TF_IMPORTS names. (An audit hook, since the standby and the
# task import TensorFlow with stderr silenced: -X importtime's lines go with it.) With
# XPDIST_TEST_TF_BROKEN_IN_SWEEP=1 the import fails in a parallel sweep's process instead.
NOTE_TF_IMPORTS = """
import os, sys

def _note(event, args):
    if event == "import" and args[0] == "tensorflow" and "tensorflow" not in sys.modules:
        if os.environ.get("XPDIST_TEST_TF_BROKEN_IN_SWEEP") and "xpdist.driver.sweeps.parallel_launcher" in sys.modules:
            raise ImportError("a broken TensorFlow (the test's)")
        with open(os.environ["XPDIST_TEST_TF_IMPORTS"], "a") as notes:
            notes.write(f"{os.getpid()}\\n")

if os.environ.get("XPDIST_TEST_TF_IMPORTS"):
    sys.addaudithook(_note)
"""


@pytest.mark.parametrize("case", ["standby", "no standby", "broken in the sweep"])
def test_a_parallel_sweep_imports_tensorflow_once(xpdist, case):
    """hydra/launcher=local_parallel: the sweep's process imports TensorFlow before it forks the
    jobs, and each job forks its standby from itself (parallel_launcher._tensorflow_for_jobs):
    one import for the sweep, where each job's started standby imported it again. Without the
    standby the sweep's process imports nothing, and each job's task its own. Where the import
    fails in the sweep's process, it says so in one line and each job's standby imports its
    own. Started, not forked from the tests' zygote, which has TensorFlow imported already."""
    hooks = xpdist.workdir / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(NOTE_TF_IMPORTS)
    notes = xpdist.workdir / "tf-imports"
    env = {"PYTHONPATH": f"{hooks}{os.pathsep}{xpdist_env()['PYTHONPATH']}", "XPDIST_TEST_TF_IMPORTS": str(notes),
           "XPDIST_STANDBY": "0" if case == "no standby" else "1",
           "XPDIST_TEST_TF_BROKEN_IN_SWEEP": "1" if case == "broken in the sweep" else ""}
    run = xpdist.run(*LINEAR, "optimizer.learning_rate=0.01,0.05", "hydra.sweep.dir=sweep",
                     "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", multirun=True, env=env, fork="")
    assert run.returncode == 0, run.stdout + run.stderr
    pids = notes.read_text().split()
    assert len(pids) == len(set(pids)) == (1 if case == "standby" else 2), pids
    assert sorted(r.info.status for r in xpdist.runs()) == ["FINISHED"] * 3  # the parent and 2 jobs
    assert [_task_started_before_its_job(xpdist.workdir / "sweep" / str(num)) for num in range(2)] == \
        [case != "no standby"] * 2
    broken = "TensorFlow could not be imported once for the jobs (ImportError: a broken TensorFlow (the test's))"
    assert (broken in run.stdout + run.stderr) is (case == "broken in the sweep"), run.stdout + run.stderr


@pytest.mark.cluster
def test_a_localhost_clusters_chief_is_the_standby_and_writes_its_log(xpdist):
    # multi_worker_mirrored on 2 localhost workers: worker 0, the chief, is the task started with
    # the command (it imported TensorFlow while the driver composed the job); worker 1 starts
    # once the job is known. Each task's output is in its own log, the chief's too.
    tmp = temp_dir(xpdist)
    run = xpdist.run(*LINEAR, "strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2",
                     "trainer.progress=true", "hydra.run.dir=job", env={"TMPDIR": str(tmp)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert not list(tmp.iterdir()), "the cluster's tasks left temporary files"
    job = xpdist.workdir / "job"
    assert _task_started_before_its_job(job)
    for log in ("worker-0.log", "worker-1.log"):
        assert "Epoch 2/2" in (job / "logs" / log).read_text(), log
    (mlflow_run,) = xpdist.runs()
    assert mlflow_run.info.status == "FINISHED"
    assert not standby_tasks(xpdist.workdir)


def test_verbose_runs_in_a_task_that_shows_tensorflows_start_up_log(xpdist):
    # The standby imports TensorFlow quietly; verbose=true must get a task that does not.
    run = xpdist.run(*LINEAR, "verbose=true")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "absl::InitializeLog" in run.stderr or re.search(r"^[IWE]\d{4} ", run.stderr, re.M), run.stderr


# `python -m xpdist` whose process outlives the driver's exit: the driver ends with os._exit,
# which here reports the code and keeps the process (the standby's parent) alive. A standby
# dies with its parent anyway, so only while that parent lives does a check show that the
# driver itself ended it.
OUTLIVES_ITS_EXIT = """
import os, sys, time
def stay(code):
    print(f"EXIT {code}", flush=True)
    time.sleep(120)
os._exit = stay
from xpdist.__main__ import cli
cli()
"""


def test_a_rejected_config_leaves_no_task_behind(xpdist):
    # refused after compose, in preflight
    cmd = [sys.executable, "-c", OUTLIVES_ITS_EXIT, *TINY, "model=cnn", "dataset=synthetic_regression"]
    proc = subprocess.Popen(cmd, cwd=xpdist.workdir, env=xpdist_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "EXIT 2"
        assert proc.poll() is None  # the standby's parent still runs
        assert standby_tasks(xpdist.workdir) == []
    finally:
        proc.kill()
        proc.wait()


def test_the_standby_task_goes_with_a_killed_driver(xpdist):
    proc = subprocess.Popen([sys.executable, "-m", "xpdist", *TINY, *LINEAR], cwd=xpdist.workdir, env=xpdist_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not standby_tasks(xpdist.workdir):
            assert proc.poll() is None and time.monotonic() < deadline, "no standby task was started"
            time.sleep(0.02)
        tasks = standby_tasks(xpdist.workdir)
        proc.send_signal(signal.SIGKILL)  # while Hydra composes: nothing can tell the standby
        proc.wait(10)
        _, alive = psutil.wait_procs(tasks, timeout=10)
        assert not alive, f"the standby task outlived its driver: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_each_task_is_forked_from_the_standby_as_a_child_of_the_driver(tmp_path):
    """The driver's side of the standby (driver/processes/standby.py) in this process: every claim forks a
    task that is this process's child, in a session of its own, showing the command line of a
    task started for its job; its process group takes the launchers' signals, and Popen-like
    waits see it end. The standby serves claims until the last one (or a discard) ends it, and
    the tasks forked from it outlive it."""
    jobs = [tmp_path / f"job-{n}" for n in range(3)]
    for job in jobs:
        job.mkdir()
        os.mkfifo(job / "job.json")  # the task blocks reading its job until this test ends it
    standby.start(["strategy=mirrored"])
    try:
        server = standby._State.server
        env = dict(xpdist_env(), TMPDIR=str(tmp_path))
        tasks = [standby.claim([str(job)], env, str(job / "task.log"), last=job == jobs[-1]) for job in jobs]
        assert server.returncode is not None and standby._State.server is None  # ended by the last claim
        for job, task in zip(jobs, tasks):
            assert psutil.Process(task.pid).ppid() == os.getpid()
            assert os.getsid(task.pid) == task.pid != server.pid
            assert " ".join(psutil.Process(task.pid).cmdline()) == f"{sys.executable} -m xpdist.task {job}"
            assert task.poll() is None
        for task in tasks:
            os.killpg(task.pid, signal.SIGTERM)  # as process.stop signals a task's group
        assert [task.wait(timeout=60) for task in tasks] == [-signal.SIGTERM] * 3
    finally:
        standby.discard()


# The standby's own program, with a preload that starts a thread, as a library might at import.
THREADED_STANDBY = """
import sys, threading, time
from xpdist.task import boot
boot.standby(int(sys.argv[1]), preload=lambda: threading.Thread(target=time.sleep, args=(60,), daemon=True).start())
"""


def test_a_standby_with_a_thread_of_its_own_forks_nothing(tmp_path):
    """A process with a thread besides numpy's may fork while that thread holds a lock, and the
    task then hangs: the standby refuses, and the driver's claim starts the task itself."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", THREADED_STANDBY, str(write_end)], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(write_end,), env=xpdist_env(), text=True)
    os.close(write_end)
    try:
        handoff = Handoff(argv=[str(tmp_path / "job")], cwd=str(tmp_path), env=xpdist_env())
        proc.stdin.write(handoff.line().decode())
        proc.stdin.close()
        with os.fdopen(read_end, "rb") as replies:
            assert replies.read() == b""  # no pid: nothing was forked
        assert proc.wait(timeout=60) == 0
        assert "cannot fork tasks; each task starts on its own" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# A driver's process that has imported TensorFlow (as the tests' zygote does, tests/zygote.py):
# its standby is itself forked, and serves a claim as a started one does. `--thread` starts a
# Python thread first: a process with one may not fork, so the standby is started instead.
# (OPENBLAS_NUM_THREADS=1: numpy's pool is a thread too; the zygote's children have none.)
FORKING_DRIVER = """
import json, os, sys, threading, time
from xpdist.task import boot
boot.quiet_tensorflow()
boot.import_tensorflow(verbose=False, keras=False)
if sys.argv[2:] == ["--thread"]:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
from xpdist.driver.processes import standby
standby.start(["strategy=mirrored"])
server = standby._State.server
job = sys.argv[1]
task = standby.claim([job], dict(os.environ), os.path.join(job, "task.log"), last=True)
facts = {"forked": type(server).__name__ != "Popen", "server_ended": standby._State.server is None,
         "task_pid": task.pid, "task_pgid": os.getpgid(task.pid), "server_pid": server.pid}
os.killpg(task.pid, 15)
facts["task_code"] = task.wait(timeout=60)
print(json.dumps(facts))
"""


@pytest.mark.parametrize("thread", [False, True])
def test_a_driver_that_imported_tensorflow_forks_its_standby(tmp_path, thread):
    """The standby is the driver's process forked when TensorFlow is imported there and no other
    thread runs (else started); either way it forks the claimed task as the driver's child, with
    a group of its own, and the task's command line and log are those of a started one."""
    job = tmp_path / "job"
    job.mkdir()
    os.mkfifo(job / "job.json")  # the task blocks reading its job until it is stopped
    done = subprocess.run([sys.executable, "-c", FORKING_DRIVER, str(job), *(["--thread"] if thread else [])],
                          capture_output=True, text=True, env=xpdist_env({"OPENBLAS_NUM_THREADS": "1"}), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.splitlines()[-1])
    assert facts["forked"] is (not thread)
    assert facts["server_ended"] and facts["task_pgid"] == facts["task_pid"] != facts["server_pid"]
    assert facts["task_code"] == -signal.SIGTERM
    assert not psutil.pid_exists(facts["server_pid"]) and not psutil.pid_exists(facts["task_pid"])
