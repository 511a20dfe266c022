"""`python -m xpdist verify [verify.steps=N] OVERRIDES` (dispatched by xpdist/__main__.py): check
the configurations (xpdist/verify/command.py), then run and record the verification
(xpdist/verify/session.py). docs/verify.md is the user's page."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from xpdist.core.errors import ConfigError
from xpdist.verify import session
from xpdist.verify.command import check, parse


def main(argv: Sequence[str]) -> None:
    """`python -m xpdist verify ...`: runs cli and exits without the interpreter's teardown of
    MLflow's modules (about 2 s), as the driver does; every run is closed by then."""
    code = cli(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cli(argv: Sequence[str]) -> int:
    """Runs a verification; returns the exit code (0 equal, 1 differs or failed, 2 bad input).

    A standby task imports TensorFlow while the configs are composed and checked, and both
    trainings' tasks are forked from it (xpdist/driver/processes/standby.py), as for the jobs
    of a sweep run in one process: a task then starts in a fraction of a second, not 5 to 7.
    """
    from xpdist.driver.processes import standby

    standby.start(list(argv))
    standby.serve_sweep()
    try:
        launch_dir = Path.cwd()
        try:
            steps, overrides = parse(list(argv))
            checked = check(overrides, steps, launch_dir)
        except ConfigError as err:
            print(f"xpdist: error: {err}", file=sys.stderr)
            return 2
        return session.run(checked, launch_dir)
    finally:
        standby.discard()
