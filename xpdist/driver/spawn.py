"""Starting a task process, with nothing beyond the standard library imported: the standby
task (xpdist/driver/standby.py) is started from here before Hydra is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import IO, Dict, List, Optional, Sequence

from xpdist.core.taskenv import DRIVER_PID_ENV, LAUNCHED_AT_ENV


def task_command(*args: str) -> List[str]:
    return [sys.executable, "-m", "xpdist.task", *args]


def spawn(cmd: Sequence[str], env: Dict[str, str], log: Optional[IO] = None, stdin=None) -> subprocess.Popen:
    """Starts a task in a session (and process group) of its own; the task asks the kernel to
    kill it when this process dies (xpdist.task.boot.die_with_driver)."""
    env = {**env, LAUNCHED_AT_ENV: repr(time.time()), DRIVER_PID_ENV: str(os.getpid())}
    return subprocess.Popen(list(cmd), env=env, stdin=stdin, stdout=log,
                            stderr=subprocess.STDOUT if log else None, start_new_session=True)
