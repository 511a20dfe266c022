"""A sweep's jobs checked before the first one starts.

Hydra composes each job's config only when the job starts, so without this a job with a bad
config is rejected after every job before it has trained. Here every job's config is composed
up front, the way Hydra's basic sweeper splits the sweep into jobs, and put through preflight;
the rejected ones are reported at once. They still run their turn (and end as FAILED child
runs), so the sweep's table lists every job.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Tuple

from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from xpdist.core.errors import ConfigError
from xpdist.driver import hydra_private
from xpdist.driver.checks import preflight


def job_overrides(config: DictConfig) -> List[List[str]]:
    """Each job's overrides, in job order: hydra.sweeper.params (a recipe's), then the command
    line's, split as the basic sweeper splits them (its own split_arguments)."""
    hc = config.hydra
    params = [f"{key}={value}" for key, value in (hc.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides(params + list(hc.overrides.task))
    return hydra_private.split_like_basic_sweeper(parsed)


def rejected_jobs(config: DictConfig) -> List[Tuple[int, List[str], str]]:
    """(job number, overrides, one-line error) of each job preflight rejects.

    Only for the basic sweeper (Hydra's default); another sweeper picks its jobs itself.
    """
    hc = config.hydra
    if hc.sweeper._target_ != hydra_private.BASIC_SWEEPER:
        return []
    launch_dir = Path(hc.runtime.cwd)
    found = []
    for num, overrides in enumerate(job_overrides(config)):
        try:
            cfg = compose(config_name=hc.job.config_name, overrides=overrides)
        except Exception:  # noqa: BLE001  Hydra's own check of the batch reports compose errors, before any job
            continue
        plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
        try:
            preflight.check(plain, launch_dir)
        except ConfigError as err:
            found.append((num, overrides, str(err)))
    return found


def report_rejected(config: DictConfig, out=sys.stderr) -> int:
    """Prints a line for each job preflight rejects, before any job starts; returns how many."""
    rejected = rejected_jobs(config)
    for num, overrides, error in rejected:
        print(f"xpdist: job {num} ({' '.join(overrides)}) will be rejected at its turn: {error}", file=out, flush=True)
    return len(rejected)
