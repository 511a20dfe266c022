"""`python -m xpdist.task <job dir>`: one task process (xpdist/task/main.py).

`python -m xpdist.task --standby` imports TensorFlow first and then waits for its job
(xpdist/task/boot.py); the rest of the task is imported after TensorFlow.
"""

import sys

from xpdist.core.taskenv import STANDBY_ARG
from xpdist.task import boot

if __name__ == "__main__":
    if sys.argv[1:] == [STANDBY_ARG]:
        sys.argv[1:] = boot.standby()
    from xpdist.task.main import exit_now, main

    exit_now(main())
