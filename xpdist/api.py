"""xpdist from Python (a notebook, a script): `xpdist.run([...overrides])`.

    import xpdist
    result = xpdist.run(["strategy=mirrored", "devices.logical_cpus=2"])
    result.run_id, result.status, result.metrics["loss"]

It runs the command itself, `python -m xpdist OVERRIDES`, in a child process: the same driver,
the same standby task, the same exit codes, and the caller's interpreter never imports
TensorFlow or opens the store. The child's output is relayed line by line to sys.stdout and
sys.stderr (a notebook's cells show it); its outcome comes back through a small JSON file
(RESULT_FILE_ENV) that the driver writes for a single run. The exit codes become:

    0    a Result (status FINISHED)
    1    RunFailed, holding the Result (status FAILED, the cause in .error)
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

# Where the driver writes a single run's outcome for run() (xpdist/driver/main.py).
RESULT_FILE_ENV = "XPDIST_RESULT_FILE"
_ERROR_PREFIX = "xpdist: error: "


@dataclass
class Result:
    """What a run ended with."""

    run_id: Optional[str]
    status: str  # FINISHED, FAILED or KILLED
    metrics: Dict[str, float] = field(default_factory=dict)  # each metric's last value, as `final:` prints
    run_name: Optional[str] = None
    error: Optional[str] = None
    num_replicas: Optional[int] = None
    global_batch_size: Optional[int] = None
    wall_time_s: float = 0.0


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
    if isinstance(overrides, str):
        raise TypeError("overrides is a list of words, e.g. ['strategy=mirrored', 'trainer.epochs=3']")
    if any(word in ("-m", "--multirun") for word in overrides):
        raise ValueError("run() runs one experiment; run each combination of a sweep with its own call")
    with tempfile.TemporaryDirectory(prefix="xpdist-run-") as tmp:
        result_file = Path(tmp) / "result.json"
        child_env = {**os.environ, **(env or {}), RESULT_FILE_ENV: str(result_file), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "xpdist", *overrides], cwd=cwd, env=child_env,
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
        raise KeyboardInterrupt(f"xpdist run {outcome and outcome.get('run_id')} interrupted; closed as KILLED")
    if outcome is None:
        raise TaskError(f"python -m xpdist ended with exit code {code} and no result: "
                        f"{errors[-1].strip() if errors else 'no output'}")
    result = Result(**{k: v for k, v in outcome.items() if k in Result.__dataclass_fields__})
    if code != 0 or result.status != "FINISHED":
        raise RunFailed(result)
    return result


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
