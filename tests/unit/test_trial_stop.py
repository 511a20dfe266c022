"""The job side of a trial (xpdist/driver/sweeps/tuning/trial.py): a pruned trial's task found and
stopped by its command line, with real processes (the job's task, another job's task, a task
that ended), and a study the job cannot reach told in its output."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver.processes.outcome import Outcome
from xpdist.driver.sweeps.tuning.trial import TrialWatch, stop_tasks

# A stand-in with a task's command line (`... xpdist.task <job dir>`) that sleeps instead of
# importing TensorFlow; it ends on SIGTERM as a task does.
SLEEP = "import time; time.sleep(120)"


def start_task_like(job_root) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SLEEP, "xpdist.task", str(job_root)], start_new_session=True)


def test_the_jobs_task_is_stopped_and_another_jobs_task_is_left(tmp_path):
    mine, other = JobDir(tmp_path / "job-0"), JobDir(tmp_path / "job-1")
    task, bystander = start_task_like(mine.root), start_task_like(other.root)
    try:
        assert stop_tasks(mine) == 1
        assert task.wait(timeout=30) == -15  # SIGTERM, no SIGKILL needed
        assert bystander.poll() is None
    finally:
        for proc in (task, bystander):
            proc.kill()
            proc.wait()


def test_a_task_that_has_ended_is_not_counted(tmp_path):
    """Ended but not yet reaped by the launcher (a zombie): the pruner came too late for it."""
    job = JobDir(tmp_path / "job-0")
    done = subprocess.Popen([sys.executable, "-c", "pass", "xpdist.task", str(job.root)], start_new_session=True)
    try:
        zombie = psutil.Process(done.pid)
        deadline = time.monotonic() + 30
        while zombie.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, zombie.status()
            time.sleep(0.02)
        assert stop_tasks(job) == 0
    finally:
        done.wait(timeout=30)


def test_a_watch_that_cannot_reach_the_study_says_so(tmp_path, capsys):
    """A study the job cannot open (here: none of that name in its storage): the trial trains on
    unwatched, and the job's output says that no pruner could stop it."""
    link = {"objective": "loss", "study_name": "absent", "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
            "pruning": {"pruner": "median", "pruner_startup_trials": 1, "pruner_warmup_epochs": 0},
            "trial": {"id": 1, "number": 3}}
    watch = TrialWatch(link, JobDir(tmp_path / "job-3"))
    watch.start()
    outcome = watch.settle(Outcome("FINISHED"), uri="unused", run_id=None)
    assert outcome.status == "FINISHED" and watch.pruned_at is None
    line = capsys.readouterr().out.strip()
    assert line.startswith("xpdist: trial 3: its epochs could not be reported to the study, so no pruner could stop it ("), line
