"""Sweeps: one MLflow parent run per `-m` sweep, each job a nested child run.

Hydra calls SweepCallback in the process that drives the sweep: it creates the store, the
experiment and the parent run before any job starts, and at the end reads the child runs
back from MLflow, prints one comparison table, logs it (CSV, Markdown, PNG) on the parent
and closes the parent. Jobs find the parent through sweep.json in the sweep directory (or, on
a node that does not see it, in ray_launcher.SWEEP_ENV, which hydra/launcher=ray sets) and
everything at the end is read from MLflow, so this works with any launcher, including ones
that run jobs in other processes or on other machines.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.jobdir import SWEEP_FILE
from xpdist.core.protocol.outcome import RESULT_FILE_ENV, Status
from xpdist.driver import engines, hydra_private
from xpdist.driver.checks import preflight, sweep as sweep_check
from xpdist.driver.processes import standby
from xpdist.driver.sweeps import ray_launcher
from xpdist.report import summary
from xpdist.tracking import heartbeat, reap, store

SUMMARY_DIR = "summary"


class _State:
    failed_jobs = 0
    # sweep.json of the sweep this process drives, until its parent run is closed.
    open_sweep: Optional[Dict[str, Any]] = None


def exit_code() -> int:
    return 1 if _State.failed_jobs else 0


def _read(sweep_dir: Path) -> Optional[dict]:
    path = sweep_dir / SWEEP_FILE
    return json.loads(path.read_text()) if path.exists() else None


def open_sweep() -> Optional[Dict[str, Any]]:
    """sweep.json of the sweep this process drives (for launchers that hand it to jobs), if open."""
    return _State.open_sweep


def join(ctx, hc) -> None:
    """Points a job's context at its sweep's parent run and store."""
    given = os.environ.get(ray_launcher.SWEEP_ENV)
    info = json.loads(given) if given else _read(Path(hc.sweep.dir))
    ctx.job_num = hc.job.num
    if info:
        ctx.parent_run_id = info["parent_run_id"]
        ctx.tracking_uri = info["tracking_uri"]


def _close_open_runs(info: Dict[str, Any], why: str, status: str = Status.KILLED) -> None:
    """Closes the parent and every child still RUNNING with `status`."""
    uri, parent_id = info["tracking_uri"], info["parent_run_id"]
    for run in _children(uri, parent_id):
        if run.info.status == Status.RUNNING:
            store.terminate(uri, run.info.run_id, status, why)
    heartbeat.let_go(parent_id)
    if store.retry(store.client(uri).get_run, parent_id).info.status == Status.RUNNING:
        store.terminate(uri, parent_id, status, why)


def leave_to_sweep() -> None:
    """In a job's process forked from the sweep's (hydra/launcher=local_parallel): the parent run
    is the sweep process's to close, not this job's (its own run it closes itself)."""
    _State.open_sweep = None
    _State.failed_jobs = 0


def interrupted(ctx, why: str) -> None:
    """Ctrl-C or SIGTERM in a job: the parent run, and any child left open, is KILLED too."""
    if ctx.parent_run_id and ctx.tracking_uri:
        _close_open_runs({"tracking_uri": ctx.tracking_uri, "parent_run_id": ctx.parent_run_id}, f"sweep {why}")
        _State.open_sweep = None


def abort(why: str, status: str = Status.KILLED) -> None:
    """The sweep driver stopped outside a job (interrupted between jobs, or a job raised)."""
    if _State.open_sweep:
        _State.failed_jobs = max(_State.failed_jobs, 1)
        _close_open_runs(_State.open_sweep, f"sweep {why}", status)
        _State.open_sweep = None


def _children(uri: str, parent_id: str) -> List[Any]:
    """The sweep's child runs, in every experiment: tracking.experiment may be swept."""
    mlflow_client = store.client(uri)
    experiments = [e.experiment_id for e in store.retry(mlflow_client.search_experiments)]
    return store.retry(mlflow_client.search_runs, experiments,
                       filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10000)


def refuse_swept_store(overrides: List[str]) -> None:
    """A sweep records its parent and every child in one store: sweeping tracking.uri is
    refused before any job starts (one line, exit 2) rather than silently ignored."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for text, override in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if override.get_key_element() == "tracking.uri" and override.is_sweep_override():
            error = ConfigError("tracking.uri", text.split("=", 1)[1],
                                "a sweep records its parent and child runs in one store",
                                "Run one sweep per store (set tracking.uri once per command).")
            print(f"xpdist: error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(2)


def _dotted(params, prefix: str = "") -> Dict[str, Any]:
    """Nested params (hydra.sweeper.params.optimizer.learning_rate=... on the command line) as dotted keys."""
    flat: Dict[str, Any] = {}
    for key, value in params.items():
        if hasattr(value, "items"):
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def swept_overrides(config: DictConfig) -> List[str]:
    """The sweep's overrides: the command line's, then hydra.sweeper.params (a recipe's)."""
    hc = config.hydra
    found = list(hc.overrides.task)
    params = _dotted(hc.sweeper.get("params") or {})
    keys = {item.split("=", 1)[0].lstrip("+~") for item in found}
    found += [f"{key}={value}" for key, value in params.items() if key not in keys]
    return found


def _plugins_preflight(config: DictConfig) -> None:
    """A sweeper or launcher with a `preflight(config)` checks its keys here (hydra/sweeper=optuna
    its search space, hydra/launcher=local_parallel its n_jobs), and hydra/launcher=ray its extra
    and address, before the store, the parent run or the sweep
    directory exist: bad input is one line, exit 2."""
    from hydra.utils import get_class

    target = config.hydra.sweeper.get("_target_")
    checks = [getattr(get_class(target), "preflight", None) if target else None]
    if ray_launcher.launches(config.hydra.launcher):  # its class needs the extra that preflight checks
        checks.append(ray_launcher.preflight)
    elif config.hydra.launcher.get("_target_"):
        checks.append(getattr(get_class(config.hydra.launcher._target_), "preflight", None))
    try:
        for check in filter(None, checks):
            check(config)
    except ConfigError as err:
        print(f"xpdist: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class SweepCallback(Callback):
    """Creates the sweep's parent run before the jobs and reports and closes it after them.

    How many jobs run at once is the launcher's business (hydra/launcher=local_parallel:
    hydra.launcher.n_jobs; slurm: hydra.launcher.array_parallelism).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        hc = config.hydra
        in_process = hc.launcher.get("_target_") == hydra_private.BASIC_LAUNCHER and \
            hc.sweeper.get("_target_") == hydra_private.BASIC_SWEEPER
        # The jobs run here one after another: the standby task serves each (xpdist/driver/processes/standby.py).
        standby.keep_if(in_process and engines.of(config).keeps_standby and not config.verbose)
        _plugins_preflight(config)
        uri = store.resolve_uri(config.tracking.uri, Path(hc.runtime.cwd))
        try:
            preflight.check_tracking_uri(uri)
        except ConfigError as err:  # no job could record: refuse the sweep before it starts
            print(f"xpdist: error: {err}", file=sys.stderr, flush=True)
            sys.exit(2)
        sweep_check.report_rejected(config)
        if in_process:
            standby.serve_sweep()
        sweep_dir = Path(hc.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = swept_overrides(config)
        refuse_swept_store(overrides)
        reap.announce(reap.close_stale(uri, config.tracking.heartbeat_timeout_s))
        name = f"sweep-{time.strftime('%Y%m%d-%H%M%S')} " + " ".join(overrides)
        tags = {"xpdist.sweep": "true", "xpdist.overrides": " ".join(overrides) or "(none)",
                "xpdist.sweep_dir": str(sweep_dir.resolve()), "mlflow.source.name": "python -m xpdist -m"}
        tags.update({f"sweep.{item.split('=', 1)[0].lstrip('+~')}": item.split("=", 1)[-1] for item in overrides})
        # Created here, once: parallel jobs that create the store or experiment race.
        tags.update(heartbeat.initial_tags(config.tracking.heartbeat_s))
        run_id = store.create_run(uri, config.tracking.experiment, name.strip(), {}, tags)
        heartbeat.keep_alive(uri, run_id, config.tracking.heartbeat_s)
        info = {"parent_run_id": run_id, "tracking_uri": uri, "experiment": config.tracking.experiment}
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(info, indent=2))
        _State.open_sweep = info
        print(f"xpdist: sweep parent run {run_id} ({name.strip()})", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        info = _read(sweep_dir)
        if not info:
            return
        uri, parent_id = info["tracking_uri"], info["parent_run_id"]
        for run in _children(uri, parent_id):  # a job process killed by its launcher left it open
            if run.info.status == Status.RUNNING:
                store.terminate(uri, run.info.run_id, Status.FAILED, "the job ended without closing its run")
        children = _children(uri, parent_id)
        rows = summary.rows(children)
        failed = [r for r in rows if r["status"] != Status.FINISHED]
        _State.failed_jobs = len(failed) if rows else 1
        report(rows, uri, parent_id, sweep_dir)
        error = None
        if failed or not rows:
            error = f"{len(failed)} of {len(rows)} jobs failed" if rows else "no job recorded a run"
        heartbeat.let_go(parent_id)
        store.terminate(uri, parent_id, Status.FAILED if error else Status.FINISHED, error)
        _State.open_sweep = None
        _write_outcome(parent_id, Status.FAILED if error else Status.FINISHED, error, rows, children)


def _write_outcome(parent_id: str, status: str, error: Optional[str], rows: List[Dict[str, Any]],
                   runs: List[Any]) -> None:
    """The sweep's outcome, for xpdist.sweep() (xpdist/api.py), where it asks for one."""
    path = os.environ.get(RESULT_FILE_ENV)
    if not path:
        return
    metrics = {run.info.run_id: {k: v for k, v in run.data.metrics.items() if not k.startswith("system/")}
               for run in runs}
    jobs = [{"job": r["job"], "overrides": r["overrides"], "run_id": r["run_id"], "run_name": r["run_name"],
             "status": r["status"], "error": r["error"], "metrics": metrics.get(r["run_id"], {}),
             "num_replicas": r["replicas"], "global_batch_size": r["global_batch"],
             "wall_time_s": r["wall_time_s"] or 0.0} for r in rows]
    Path(path).write_text(json.dumps({"parent_run_id": parent_id, "status": status, "error": error, "jobs": jobs}))


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def report(rows: List[Dict[str, Any]], uri: str, parent_id: str, sweep_dir: Path, out=sys.stdout) -> None:
    """Prints the sweep's table and logs it (CSV, Markdown, PNG) on the parent run."""
    title = f"sweep {sweep_dir.name}: {len(rows)} jobs"
    paths = summary.write_all(rows, sweep_dir / SUMMARY_DIR, title)
    store.log_artifacts(uri, parent_id, paths, SUMMARY_DIR)
    failed = [r for r in rows if r["status"] != Status.FINISHED]
    lines = ["", f"xpdist: {title}, {len(rows) - len(failed)} finished, {len(failed)} failed",
             summary.format_text(rows)]
    lines += [f"  job {r['job']} {r['status']}: {_short(r['error'] or 'no error recorded')}" for r in failed]
    lines += [f"  parent run: {parent_id}   tracking uri: {uri}",
              f"  table and chart: {sweep_dir / SUMMARY_DIR} (also artifacts of the parent run)",
              f"  open the MLflow UI: {store.ui_command(uri)}"]
    print("\n".join(lines), file=out, flush=True)
