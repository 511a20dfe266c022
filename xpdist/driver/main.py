"""The driver's entry point: `python -m xpdist [overrides]` and the `xpdist` console script.

This process composes and checks the config, records the run in MLflow and starts the
task process(es); it never imports TensorFlow.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.outcome import JobResult, RESULT_FILE_ENV, Status
from xpdist.core.protocol.resolved import resolve
from xpdist.core.schema import register_configs
from xpdist.driver import engines, hydra_private
from xpdist.driver.checks import check, config_errors
from xpdist.driver.jobs import job
from xpdist.driver.processes import process, standby
from xpdist.driver.sweeps import sweep
from xpdist.driver.sweeps.tuning.space import quote_params_overrides
from xpdist.driver.sweeps.tuning.trial import TrialWatch
from xpdist.tracking import store

# The configs ship inside the package (conf/ of the repository, mapped onto xpdist.conf).
CONFIG_PATH = "pkg://xpdist.conf"


class _State:
    exit_code = 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def main(cfg: DictConfig) -> JobResult:
    hc = HydraConfig.get()
    cfg = resolve(cfg)  # once: the job, the checks and the engine read this one object
    if check.enabled():  # --check: the checks and the plan, no run (driver/checks/check.py)
        return _check_only(cfg, Path(hc.runtime.cwd))
    multirun = hc.mode == RunMode.MULTIRUN
    standby.keep_if(engines.of(cfg).keeps_standby and not cfg.verbose)
    ctx = job.JobContext(launch_dir=Path(hc.runtime.cwd), job_dir=Path(hc.runtime.output_dir),
                         overrides=list(hc.overrides.task))
    if multirun:
        sweep.join(ctx, hc)
        ctx.watch_trial = functools.partial(TrialWatch.start_for, ctx.job_num)
    try:
        result = job.run(cfg, ctx)
    except process.Interrupted as err:
        if multirun and engines.schedules(hc.launcher) and getattr(err, "result", None) is not None:
            # SLURM cancelled or preempted this job alone, or Ray cancelled its task (a user's
            # Ctrl-C reaches the sweep's own process, which stops the rest itself): its run is
            # closed KILLED, and the sweep goes on with the others.
            print(f"xpdist: interrupted by {err}; run closed as KILLED", file=sys.stderr)
            _State.exit_code = 1
            return err.result
        if multirun:
            sweep.interrupted(ctx, str(err))
        else:
            _write_result(getattr(err, "result", None))
        print(f"xpdist: interrupted by {err}; run closed as KILLED", file=sys.stderr)
        sys.exit(130)
    if result.status == Status.REJECTED:
        print(f"xpdist: error: {result.error}", file=sys.stderr)
        _remove_rejected_output(ctx)
    elif not multirun:
        job.print_summary(result, ctx.tracking_uri or _uri(cfg, ctx), verbose=cfg.verbose)
    if not result.ok:
        _State.exit_code = 2 if result.status == Status.REJECTED else 1
    if not multirun:
        _write_result(result)
    return result


def _write_result(result: Optional[JobResult]) -> None:
    """A single run's outcome, for xpdist.run() (xpdist/api.py), where it asks for one."""
    path = os.environ.get(RESULT_FILE_ENV)
    if path and result is not None:
        Path(path).write_text(json.dumps(result.to_json()))


def _check_only(cfg: DictConfig, launch_dir: Path) -> JobResult:
    try:
        check.run(cfg, launch_dir)
    except ConfigError as err:
        print(f"xpdist: error: {err}", file=sys.stderr)
        _State.exit_code = 2
        return JobResult(status=Status.REJECTED, error=str(err))
    return JobResult(status=Status.CHECKED)


def _remove_rejected_output(ctx: job.JobContext) -> None:
    """Removes the output folder Hydra made for a rejected run (only its own config and log in it)."""
    folder = ctx.job_dir.resolve()
    launch_dir = ctx.launch_dir.resolve()
    if launch_dir not in folder.parents or any(p.name not in _HYDRA_FILES for p in folder.iterdir()):
        return
    shutil.rmtree(folder, ignore_errors=True)
    for parent in folder.parents:  # outputs/<day>/ and outputs/ when nothing else is left in them
        if parent == launch_dir or any(parent.iterdir()):
            break
        parent.rmdir()


# What Hydra writes into a job's output folder before the job runs (hydra.job.name: xpdist).
_HYDRA_FILES = {".hydra", "xpdist.log"}


def _uri(cfg: DictConfig, ctx: job.JobContext) -> str:
    return store.resolve_uri(cfg.tracking.uri, ctx.launch_dir)


def cli() -> None:
    register_configs()
    try:
        sys.argv[1:] = check.take_flag(quote_params_overrides(sys.argv[1:]))
    except ConfigError as err:
        print(f"xpdist: error: {err}", file=sys.stderr)
        _exit_now(2)
    # Hydra prints its compose errors over several lines and exits 1; told to raise them
    # (HYDRA_FULL_ERROR, which only Hydra reads), it lets them reach the handler below, which
    # prints one line and exits 2 like every bad config. A user's own HYDRA_FULL_ERROR=1
    # still gets Hydra's full traceback.
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    hydra_private.mode_from_flags(sys.argv[1:])  # one compose per command, not two
    code = None
    try:
        # SIGINT/SIGTERM anywhere (not only while a task runs) closes an open sweep as KILLED.
        with process.signals_raise():
            main()
    except process.Interrupted as err:
        sweep.abort(f"interrupted by {err}")
        print(f"xpdist: interrupted by {err}", file=sys.stderr)
        code = 130
    except config_errors.COMPOSE_ERRORS as err:
        if full_error:
            raise
        print(f"xpdist: error: {config_errors.one_line(err)}", file=sys.stderr)
        code = 2
    except SystemExit as err:  # main's sys.exit (interrupted): leave through _exit_now as well
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
    finally:
        # From here on the cleanup runs to its end: a second Ctrl-C must not cut it short (an
        # uncaught KeyboardInterrupt during the interpreter's teardown ended the process by SIGINT).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        sweep.abort("stopped before its end", Status.FAILED)  # Hydra stopped the sweep (a job raised)
    _exit_now(max(_State.exit_code, sweep.exit_code()) if code is None else code)


def _exit_now(code: int) -> None:
    """Exits without the interpreter's teardown of MLflow's module graph (about 2 s here).

    Every run is closed and every log written by now; logging.shutdown flushes Hydra's log file.
    The standby task, if no job took it, is stopped first.
    """
    standby.discard()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

