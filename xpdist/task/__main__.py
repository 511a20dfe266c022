"""`python -m xpdist.task <job dir>`: one task process (xpdist/task/main.py).

`python -m xpdist.task --standby <fd>` imports TensorFlow first and then forks a task for each
job its driver hands it (xpdist/task/boot.py); the rest of the task is imported after TensorFlow.
"""

import sys

from xpdist.core.protocol.taskenv import STANDBY_ARG
from xpdist.task import boot


def _task_modules():
    import xpdist.task.main

    return xpdist.task.main


if __name__ == "__main__":
    if sys.argv[1:2] == [STANDBY_ARG]:
        sys.argv[1:] = boot.standby(int(sys.argv[2]), preload=_task_modules)
    from xpdist.task.main import exit_now, main

    exit_now(main())
