"""`python -m xpdist --check [overrides]`: every preflight check, then the plan; nothing runs.

A flag, not a word: Hydra's command line is overrides and flags, and the flags that print
instead of running (`--cfg job`, `--info`, `--help`) are where a user looks for this one;
`--check` takes the same overrides as the run it checks, in any position. A bare word
`check` would be one more thing that is not `key=value` in the overrides.

The config is composed by the same @hydra.main entry as a run (so recipes and --config-dir
work), with Hydra told to write nothing (QUIET_HYDRA): no output folder, no log file, no
.hydra/. Then the driver's own checks run (preflight, the tracking URI), and the plan is
printed: "ok" and the strategy, replicas, global batch, learning rate, steps and where the
tasks would run, exit 0; or the one-line error, exit 2, as the run would print it. No
TensorFlow (no standby task: xpdist/driver/processes/standby.py), no MLflow run, no store is opened.
Left to the run: tracking.resume (reading the resumed run opens the store) and what only
the task can know (a custom model or data function's body; a TPU's replica count).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from xpdist.core import plan as planning
from xpdist.core import strategies
from xpdist.core.errors import ConfigError
from xpdist.driver import engines
from xpdist.driver.checks import preflight
from xpdist.tracking import store

FLAG = "--check"
# Appended to the overrides in check mode, so that Hydra creates no file or folder.
QUIET_HYDRA = ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]
_MULTIRUN = ("-m", "--multirun")


class _State:
    enabled = False


def take_flag(argv: List[str]) -> List[str]:
    """Removes --check from the command's arguments and turns check mode on if it was there.

    Raises:
        ConfigError: --check with -m (a sweep), which it does not check.
    """
    if FLAG not in argv:
        return argv
    _State.enabled = True
    rest = [arg for arg in argv if arg != FLAG]
    if any(arg in _MULTIRUN for arg in rest):
        raise ConfigError(FLAG, "-m", "--check checks one run, not a sweep",
                          "Drop -m and check one combination at a time.")
    return rest + QUIET_HYDRA


def enabled() -> bool:
    return _State.enabled


def run(cfg, launch_dir: Path, out=sys.stdout) -> planning.Plan:
    """Checks the composed config as a run would before creating its MLflow run; prints the plan.

    Args:
        cfg: the composed config as plain data (enums as names), as job.run hands it to preflight.
        launch_dir: the directory the command was run from.

    Raises:
        ConfigError: the first problem found.
    """
    plan = preflight.check(cfg, launch_dir)
    uri = store.resolve_uri(cfg.tracking.uri, launch_dir)
    preflight.check_tracking_uri(uri)
    print("\n".join(["ok"] + describe(cfg, plan, uri)), file=out, flush=True)
    return plan


def describe(cfg, plan: planning.Plan, uri: str) -> List[str]:
    """The plan in a few lines: what would run, with how many replicas and which numbers."""
    applied = strategies.get(plan.strategy).applies_to
    options = [f"{group}={getattr(plan, group)}" for group in strategies.TUNING_GROUPS if group in applied]
    if planning.resolved_at_run_time(plan):
        replicas = "decided by TensorFlow once the TPU is found"
        batch = f"{plan.per_replica_batch_size} per replica x the TPU's replicas"
        rate = f"{cfg.optimizer.learning_rate} scaled by optimizer.lr_scaling={cfg.optimizer.lr_scaling}"
    else:
        # strategy=default names no devices: TensorFlow places the ops itself.
        where = f" on {', '.join(plan.devices)}" if plan.devices else " on the devices TensorFlow picks"
        replicas = f"{plan.num_replicas}" + (where if plan.num_workers == 1 else f" over {plan.num_workers} workers")
        batch = f"{plan.global_batch_size} ({plan.per_replica_batch_size} per replica x {plan.num_replicas})"
        rate = f"{plan.learning_rate:g} (optimizer.lr_scaling={cfg.optimizer.lr_scaling})"
    epochs = cfg.trainer.epochs
    return [
        f"  strategy:      {plan.strategy}{' (' + ', '.join(options) + ')' if options else ''}, "
        f"trainer={cfg.trainer.name}, keras={plan.keras}",
        f"  replicas:      {replicas}",
        f"  global batch:  {batch}",
        f"  learning rate: {rate}",
        f"  steps:         {plan.steps_per_epoch} per epoch x {epochs} epochs = {plan.steps_per_epoch * epochs}"
        f" (data: {plan.num_train} training, {plan.num_val} validation examples of dataset={cfg.dataset.name})",
        f"  tasks:         {engines.of(cfg).describe(cfg, plan)}",
        f"  run:           {plan.run_name} in experiment '{cfg.tracking.experiment}' at {uri}",
    ]
