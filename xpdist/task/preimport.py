"""What a process imports so that task processes can be forked from it with nothing left to
import: the standby task's imports (xpdist/task/boot.py standby), for a process that is not the
standby. Apart from boot.py so that the task's modules can be imported here (main imports boot).
"""

from __future__ import annotations

import os

from xpdist.task import boot


def import_for_forks() -> None:
    """Imports what the standby task imports before it forks tasks (TensorFlow without Keras, and
    the task's own modules), in a process that forks drivers: each then forks its standby from
    itself, with nothing to import (xpdist/driver/processes/standby.py _fork). A parallel sweep's process
    calls it (xpdist/driver/sweeps/parallel_launcher.py), so that its jobs import TensorFlow once
    between them, as a sequential sweep's do.

    Nothing runs on TensorFlow here, so none of its thread pools starts and the process may fork.
    os.environ is left as it was, since the drivers forked from this process pass theirs on to
    their tasks: TensorFlow's quiet C++ log level is set for the import alone, and what the
    import writes (TF2_BEHAVIOR, ...) is taken back.
    """
    before = dict(os.environ)
    try:
        boot.quiet_tensorflow()
        boot.import_tensorflow(verbose=False, keras=False)  # the Keras flavour comes with each job
        import xpdist.task.main  # noqa: F401
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)
