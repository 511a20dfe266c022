"""What xpdist takes from Hydra beyond its public API, in one place.

- The basic sweeper's split of a sweep into jobs: Hydra exposes no public function for it
  (`BasicSweeper.split_arguments` lives in `hydra._internal`), and the sweep check must compose
  the jobs exactly as that sweeper will.
- A failed job's exception: `JobReturn.return_value`, the public way, writes "Error executing
  job with overrides" to stderr before it raises, a line the sweep's output does not want.
- The basic launcher's and sweeper's class paths, to tell a sweep whose jobs run one after
  another in this process (each may take the standby task) by its hydra.launcher._target_.
- The run mode's discovery: before it composes the job's config, Hydra composes the whole
  config once more only to read `hydra.mode` (`Hydra.get_mode`, hydra-ecosystem/hydra#3440,
  open), 0.1-0.3 s of every command. `mode_from_flags` skips it where no config can set it.

hydra-core is bounded below 1.4 in pyproject.toml; tests/unit/test_hydra_private.py fails on
the release that changes any of them.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
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


# Hydra's flags that bring no config: any other flag (--config-dir, -cp, an abbreviation
# argparse accepts, ...) leaves the mode's discovery to Hydra.
_PLAIN_FLAGS = {"-m", "--multirun", "-r", "--run"}
# Override keys whose config may set hydra.mode: a recipe (the sweep recipes do), a search
# path of the user's, the mode itself.
_MODE_KEYS = {"recipe", "hydra.mode", "hydra.searchpath"}


def _may_set_mode(word: str) -> bool:
    if word.startswith("-"):
        return word not in _PLAIN_FLAGS
    return word.split("=", 1)[0].lstrip("+~").split("@", 1)[0] in _MODE_KEYS


def mode_from_flags(argv: Sequence[str]) -> None:
    """Hydra's run mode from -m/--multirun alone, without its extra compose.

    Hydra.get_mode composes the whole config to read `hydra.mode` and answers None where the
    config leaves it unset; Hydra then takes the mode from -m/--multirun. Of xpdist's configs
    only recipes set it (tests/unit/test_hydra_private.py checks every file), so where the
    command line picks no recipe, brings no other config and does not name the mode, the
    answer is None without the compose. Elsewhere Hydra's own get_mode runs. A config that
    cannot compose raises in the job's compose, as before (get_mode swallowed the error and
    answered None too).
    """
    if any(_may_set_mode(word) for word in argv):
        return
    Hydra.get_mode = _mode_unset


def _mode_unset(self, config_name, overrides):
    return None
