"""The job side of a study: each epoch's objective reported to the job's Optuna trial, and the
task stopped at once when the pruner says so.

Runs in the driver process of a trial's job, beside the task: it reads the task's metric
file (the same lines the metric relay logs to MLflow) and talks to the study through its
storage, which every job shares with the sweeper (a database). A pruned trial's run ends
FINISHED, not KILLED: pruning is how a study is meant to end a trial, not an interruption;
its tags say it was pruned (xpdist.trial_state=PRUNED) and after which epoch
(xpdist.pruned_at_epoch, epochs counted from 1 as in the run's metric history).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from xpdist.core.protocol.jobdir import JobDir, STUDY_FILE, decode_metrics
from xpdist.core.protocol.outcome import Status
from xpdist.driver.processes import process
from xpdist.driver.processes.outcome import Outcome
from xpdist.driver.sweeps.tuning import optuna_private
from xpdist.driver.sweeps.tuning.settings import Settings, pruner, storage
from xpdist.tracking import store

# Seconds between two looks at the metric file: a pruned task stops within about this long.
POLL_S = 0.25
PRUNED_ATTR = "xpdist.pruned_at_epoch"


def link_of(job_num: Optional[int]) -> Optional[Dict[str, Any]]:
    """The study and trial of this job, when it is a trial of a study (None otherwise)."""
    from hydra.core.hydra_config import HydraConfig

    if job_num is None or not HydraConfig.initialized():
        return None
    path = Path(HydraConfig.get().sweep.dir) / STUDY_FILE
    if not path.exists():
        return None
    link = json.loads(path.read_text())
    trial = link["trials"].get(str(job_num))
    return None if trial is None else {**link, "trial": trial}


class TrialWatch(threading.Thread):
    """Reports the objective after each epoch; stops the job's task when the trial is pruned."""

    def __init__(self, link: Dict[str, Any], job: JobDir):
        super().__init__(name="xpdist-trial-watch", daemon=True)
        self.link, self.job = link, job
        self.objective = link["objective"]
        self.pruned_at: Optional[int] = None
        self.error: Optional[BaseException] = None
        self._halt = threading.Event()
        self._offset = 0
        self._trial = None

    @classmethod
    def start_for(cls, job_num: Optional[int], job: JobDir) -> Optional["TrialWatch"]:
        """Starts watching when this job is a trial of a study; None otherwise."""
        link = link_of(job_num)
        if link is None:
            return None
        watch = cls(link, job)
        watch.start()
        return watch

    def run(self) -> None:
        try:
            self._trial = self._open_trial()
            while not self._halt.wait(POLL_S) and self.pruned_at is None:
                self._look()
        except Exception as err:  # the trial trains on unwatched; the sweeper still tells its end
            self.error = err

    def _open_trial(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        settings = Settings(**self.link["pruning"])
        study = optuna.load_study(study_name=self.link["study_name"], storage=storage(self.link["storage"]),
                                  pruner=pruner(settings))
        return optuna_private.open_trial(study, self.link["trial"]["id"])

    def _look(self) -> None:
        if not self.job.metrics.exists():
            return
        with open(self.job.metrics, "rb") as lines:
            lines.seek(self._offset)
            data = lines.read()
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        for entry in filter(None, map(decode_metrics, complete.decode().splitlines())):
            step, _, values = entry
            if self.objective not in values:
                continue
            self._trial.report(float(values[self.objective]), int(step))
            if self._trial.should_prune():
                self._prune(int(step))
                return

    def _prune(self, epoch: int) -> None:
        self._trial.set_user_attr(PRUNED_ATTR, epoch)
        self.pruned_at = epoch
        number = self.link["trial"]["number"]
        print(f"xpdist: trial {number} pruned after epoch {epoch}: stopping its task", flush=True)
        if not stop_tasks(self.job):  # the pruner spoke after the training had ended
            print(f"xpdist: trial {number}: no task of its job was running to stop", flush=True)

    def settle(self, outcome: Outcome, uri: str, run_id: Optional[str]) -> Outcome:
        """Stops watching; a pruned trial's outcome becomes FINISHED and its run is tagged."""
        self._halt.set()
        self.join()
        if self.error is not None:  # the sweeper still tells the study the trial's end
            print(f"xpdist: trial {self.link['trial']['number']}: its epochs could not be reported to the study, "
                  f"so no pruner could stop it ({type(self.error).__name__}: {self.error})", flush=True)
        if self.pruned_at is None:
            return outcome
        if run_id:
            store.set_tags(uri, run_id, {PRUNED_ATTR: str(self.pruned_at), "xpdist.trial_state": Status.PRUNED})
        return Outcome(Status.FINISHED, restarts=outcome.restarts)


def stop_tasks(job: JobDir) -> int:
    """SIGTERMs the task processes this driver started for `job` (SIGKILL after process.GRACE_S);
    returns how many it found alive.

    The engine, waiting on them in the main thread, then sees them end. They are found by
    their command line (`python -m xpdist.task <job dir>`): the engines keep no handle this
    thread could reach.
    """
    import psutil

    root = str(job.root)
    tasks = [p for p in psutil.Process().children(recursive=False) if _is_task_of(p, root) and _alive(p)]
    found = len(tasks)
    for sig, wait_s in ((signal.SIGTERM, process.GRACE_S), (signal.SIGKILL, 0)):
        for task in tasks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(task.pid, sig)  # its group: the task runs in a session of its own
        deadline = time.monotonic() + wait_s
        tasks = [t for t in tasks if _alive(t)]
        while tasks and time.monotonic() < deadline:
            time.sleep(POLL_S)
            tasks = [t for t in tasks if _alive(t)]
    return found


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_task_of(proc, root: str) -> bool:
    import psutil

    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    return "xpdist.task" in cmd and root in cmd
