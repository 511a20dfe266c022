"""What xpdist takes from Hydra beyond its public API, in one place.

- The basic sweeper's split of a sweep into jobs: Hydra exposes no public function for it
  (`BasicSweeper.split_arguments` lives in `hydra._internal`), and the sweep check must compose
  the jobs exactly as that sweeper will.
- A failed job's exception: `JobReturn.return_value`, the public way, writes "Error executing
  job with overrides" to stderr before it raises, a line the sweep's output does not want.
- The basic launcher's and sweeper's class paths, to tell a sweep whose jobs run one after
  another in this process (each may take the standby task) by its hydra.launcher._target_.

hydra-core is bounded below 1.4 in pyproject.toml; tests/unit/test_hydra_private.py fails on
the release that changes either.
"""

from __future__ import annotations

from typing import List, Optional

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.utils import JobReturn, JobStatus

# hydra.sweeper._target_ of Hydra's default sweeper.
BASIC_SWEEPER = f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}"
# hydra.launcher._target_ of Hydra's default launcher, which runs the jobs in this process.
BASIC_LAUNCHER = f"{BasicLauncher.__module__}.{BasicLauncher.__qualname__}"


def split_like_basic_sweeper(parsed_overrides) -> List[List[str]]:
    """Each job's overrides, in job order, as the basic sweeper runs them (one batch)."""
    return [job for batch in BasicSweeper.split_arguments(parsed_overrides, None) for job in batch]


def job_error(ret: JobReturn) -> Optional[BaseException]:
    """The exception a failed job raised; None for a completed one."""
    return None if ret.status == JobStatus.COMPLETED else ret._return_value


def job_result(ret: JobReturn):
    """What a completed job returned; None for a failed one."""
    return ret.return_value if ret.status == JobStatus.COMPLETED else None
