"""What the driver gives every task process it starts: environment variables, and the job a
standby task is handed (xpdist/driver/processes/standby.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

# When the driver started the task process (time.time()), the zero of first_step_s: the
# kernel's process start time, rebuilt from the boot time in whole seconds, was up to a
# second off here.
LAUNCHED_AT_ENV = "XPDIST_TASK_LAUNCHED_AT"
# The driver's pid: the task dies with it (PR_SET_PDEATHSIG), or exits at once if the driver
# is already gone when it asks.
DRIVER_PID_ENV = "XPDIST_DRIVER_PID"
# `python -m xpdist.task --standby`: import TensorFlow, then wait on stdin for a Handoff.
STANDBY_ARG = "--standby"


@dataclass(frozen=True)
class Handoff:
    """The job a standby task is given, one JSON line on its stdin: what a task started for
    the job would have had as its arguments, working directory and environment."""

    argv: List[str]
    cwd: str
    env: Dict[str, str]
    # The file its stdout and stderr go to (appended), as for a cluster task started with its
    # output in its log; None: the driver's, which the standby has from its start.
    output: Optional[str] = None

    def line(self) -> bytes:
        return (json.dumps(asdict(self)) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> "Handoff":
        return cls(**json.loads(line))
