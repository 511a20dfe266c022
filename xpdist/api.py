"""xpdist from Python (a notebook, a script): `xpdist.run([...overrides])`, `xpdist.sweep([...])`.

    import xpdist
    result = xpdist.run(["strategy=mirrored", "devices.logical_cpus=2"])
    result.run_id, result.status, result.metrics["loss"]

    swept = xpdist.sweep(["strategy=one_device,mirrored", "devices.logical_cpus=2"])
    swept.parent_run_id, [(job.overrides, job.status, job.metrics["loss"]) for job in swept.jobs]

It runs the command itself, `python -m xpdist OVERRIDES`, in a child process: the same driver,
the same standby task, the same exit codes, and the caller's interpreter never imports
TensorFlow or opens the store. The child's output is relayed line by line to sys.stdout and
sys.stderr (a notebook's cells show it); its outcome comes back through a small JSON file
(RESULT_FILE_ENV) that the driver writes for a single run, and the sweep's callback for a
sweep. The exit codes become:

    0    a Result (status FINISHED); for sweep(), a SweepResult whose jobs all FINISHED
    1    RunFailed, holding the Result (status FAILED, the cause in .error); for sweep(), a
         SweepResult with status FAILED (a sweep goes on past a failed job; its .failed lists them)
    2    ConfigRejected, a ConfigError: the one line the command prints; nothing was created
    130  KeyboardInterrupt (the run closed as KILLED); Ctrl-C here is passed on to the child
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from xpdist.core.errors import ConfigError, TaskError
from xpdist.core.protocol.outcome import JobResult, RESULT_FILE_ENV, Status

# How the command's one-line error starts (exit 2); the rest of the line becomes ConfigRejected.
_ERROR_PREFIX = "xpdist: error: "


# What a run ended with (status FINISHED, FAILED or KILLED): the driver's own JobResult, read
# back from the file it writes.
Result = JobResult


@dataclass
class SweepJob(JobResult):
    """One job of a sweep: its child run's Result, with its place in the sweep."""

    job: Optional[int] = None  # the job's number in the sweep (the tag xpdist.job)
    # The job's whole command line, as the sweep's table shows it, one string (a Result's are words).
    overrides: str = ""


@dataclass
class SweepResult:
    """What a sweep ended with: its MLflow parent run and one child run per job, in job order."""

    parent_run_id: str
    status: Status  # FINISHED (every job finished) or FAILED
    jobs: List[SweepJob] = field(default_factory=list)
    error: Optional[str] = None  # "<n> of <m> jobs failed"

    @property
    def failed(self) -> List[SweepJob]:
        return [job for job in self.jobs if job.status != Status.FINISHED]


class ConfigRejected(ConfigError):
    """The config cannot run (the command's exit 2); the message is the command's one line."""

    def __init__(self, line: str):
        key, _, rest = line.partition("=")
        received, _, _ = rest.partition(": ")
        self.key, self.received = key, received
        ValueError.__init__(self, line)


class RunFailed(TaskError):
    """The training failed (the command's exit 1); .result holds the FAILED run."""

    def __init__(self, result: Result):
        self.result = result
        super().__init__(f"run {result.run_id} {result.status}: {result.error}")


def run(overrides: Sequence[str] = (), cwd: Union[str, Path, None] = None, env: Optional[Dict[str, str]] = None,
        quiet: bool = False) -> Result:
    """Runs one experiment, as `python -m xpdist OVERRIDES` in `cwd` would.

    Args:
        overrides: the command line's words, e.g. ["strategy=mirrored", "trainer.epochs=3"].
        cwd: where the command runs (./mlflow.db, ./outputs); the current directory by default.
        env: variables to add to the environment of the command.
        quiet: drop the command's output instead of relaying it.

    Returns:
        The FINISHED run's Result.

    Raises:
        ConfigRejected: a config that cannot run (a ConfigError); nothing was created.
        RunFailed: the training failed; the run is recorded as FAILED.
        KeyboardInterrupt: interrupted; the run is recorded as KILLED.
    """
    _check_words(overrides)
    if any(word in _MULTIRUN for word in overrides):
        raise ValueError("run() runs one experiment; for a sweep call xpdist.sweep() with the same words, without -m")
    code, outcome = _command(list(overrides), cwd, env, quiet, "run")
    result = Result.from_json(outcome)
    if code != 0 or result.status != Status.FINISHED:
        raise RunFailed(result)
    return result


def sweep(overrides: Sequence[str] = (), cwd: Union[str, Path, None] = None, env: Optional[Dict[str, str]] = None,
          quiet: bool = False) -> SweepResult:
    """Runs a sweep, as `python -m xpdist -m OVERRIDES` in `cwd` would.

    Args:
        overrides: the command line's words after -m, e.g. ["strategy=one_device,mirrored",
            "devices.logical_cpus=2"]; a sweep recipe or hydra/sweeper=optuna works too.
        cwd, env, quiet: as for run().

    Returns:
        The SweepResult: the parent run's id, its status, and one SweepJob per job, in job
        order. A failed job does not raise: the sweep went on, and its status says FAILED.

    Raises:
        ConfigRejected: a sweep that cannot start (a bad value, a bad search space); nothing
            was created.
        KeyboardInterrupt: interrupted; the parent and the running job are closed KILLED.
    """
    _check_words(overrides)
    words = [word for word in overrides if word not in _MULTIRUN]
    code, outcome = _command(["-m", *words], cwd, env, quiet, "sweep")
    jobs = [SweepJob.from_json(job) for job in outcome.get("jobs", [])]
    return SweepResult(parent_run_id=outcome["parent_run_id"], status=Status(outcome["status"]), jobs=jobs,
                       error=outcome.get("error"))


_MULTIRUN = ("-m", "--multirun")


def _check_words(overrides) -> None:
    if isinstance(overrides, str):
        raise TypeError("overrides is a list of words, e.g. ['strategy=mirrored', 'trainer.epochs=3']")


def _command(args: List[str], cwd, env, quiet: bool, what: str):
    """Runs `python -m xpdist ARGS`; returns its exit code and the outcome the driver wrote,
    or raises what exit codes 2 and 130, or a missing outcome, mean."""
    with tempfile.TemporaryDirectory(prefix="xpdist-run-") as tmp:
        result_file = Path(tmp) / "result.json"
        child_env = {**os.environ, **(env or {}), RESULT_FILE_ENV: str(result_file), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "xpdist", *args], cwd=cwd, env=child_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        errors: List[str] = []
        relays = [threading.Thread(target=_relay, args=(proc.stdout, sys.stdout, quiet, None), daemon=True),
                  threading.Thread(target=_relay, args=(proc.stderr, sys.stderr, quiet, errors), daemon=True)]
        for relay in relays:
            relay.start()
        code = _wait(proc)
        for relay in relays:
            relay.join()
        outcome = json.loads(result_file.read_text()) if result_file.is_file() else None
    if code == 2:
        line = next((e for e in reversed(errors) if e.startswith(_ERROR_PREFIX)), _ERROR_PREFIX + "rejected")
        raise ConfigRejected(line[len(_ERROR_PREFIX):].strip())
    if code == 130:
        which = outcome and (outcome.get("run_id") or outcome.get("parent_run_id"))
        raise KeyboardInterrupt(f"xpdist {what} {which} interrupted; closed as KILLED")
    if outcome is None:
        raise TaskError(f"python -m xpdist ended with exit code {code} and no result: "
                        f"{errors[-1].strip() if errors else 'no output'}")
    return code, outcome


def _relay(stream, to, quiet: bool, kept: Optional[List[str]]) -> None:
    for line in stream:
        if kept is not None:
            kept.append(line)
            if line.startswith(_ERROR_PREFIX):  # it becomes the exception's message
                continue
        if not quiet:
            to.write(line)
            to.flush()


def _wait(proc: subprocess.Popen) -> int:
    """Waits for the command; a Ctrl-C here is passed on, and the command closes its run."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
