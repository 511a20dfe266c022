"""Sweeps: one MLflow parent run per `-m` sweep, each job a nested child run.

Hydra calls SweepCallback in the process that drives the sweep: it creates the store, the
experiment and the parent run before any job starts, and at the end reads the child runs
back from MLflow, prints one comparison table, logs it (CSV, Markdown, PNG) on the parent
and closes the parent. Jobs find the parent through sweep.json in the sweep directory and
everything at the end is read from MLflow, so this works with any launcher, including ones
that run jobs in other processes or on other machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from xpdist.core.jobdir import SWEEP_FILE
from xpdist.report import summary
from xpdist.tracking import store

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


def join(ctx, hc) -> None:
    """Points a job's context at its sweep's parent run and store."""
    info = _read(Path(hc.sweep.dir))
    ctx.job_num = hc.job.num
    if info:
        ctx.parent_run_id = info["parent_run_id"]
        ctx.tracking_uri = info["tracking_uri"]


@contextlib.contextmanager
def slot(hc) -> Iterator[None]:
    """Holds one of the sweep's max_parallel slots while a job runs.

    Parallel launchers (submitit_local) start every job at once; a job on the machine that
    started the sweep waits here for a free slot. Slots are flock()ed files in the sweep
    directory, so a job that dies frees its slot. Jobs on other machines (SLURM) are
    limited by their scheduler instead (hydra.launcher.array_parallelism).
    """
    sweep_dir = Path(hc.sweep.dir)
    info = _read(sweep_dir) or {}
    limit = info.get("max_parallel") or 0
    if limit <= 0 or info.get("host") != socket.gethostname():
        yield
        return
    folder = sweep_dir / ".slots"
    folder.mkdir(exist_ok=True)
    waiting_said = False
    while True:
        for index in range(limit):
            handle = open(folder / str(index), "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield
            finally:
                handle.close()  # releases the lock
            return
        if not waiting_said:
            print(f"xpdist: job {hc.job.num} waits for one of {limit} slots (hydra.callbacks.sweep.max_parallel)",
                  file=sys.stderr, flush=True)
            waiting_said = True
        time.sleep(0.5)


def _close_open_runs(info: Dict[str, Any], why: str, status: str = "KILLED") -> None:
    """Closes the parent and every child still RUNNING with `status`."""
    uri, parent_id = info["tracking_uri"], info["parent_run_id"]
    for run in _children(uri, parent_id):
        if run.info.status == "RUNNING":
            store.terminate(uri, run.info.run_id, status, why)
    if store.retry(store.client(uri).get_run, parent_id).info.status == "RUNNING":
        store.terminate(uri, parent_id, status, why)


def interrupted(ctx, why: str) -> None:
    """Ctrl-C or SIGTERM in a job: the parent run, and any child left open, is KILLED too."""
    if ctx.parent_run_id and ctx.tracking_uri:
        _close_open_runs({"tracking_uri": ctx.tracking_uri, "parent_run_id": ctx.parent_run_id}, f"sweep {why}")
        _State.open_sweep = None


def abort(why: str, status: str = "KILLED") -> None:
    """The sweep driver stopped outside a job (interrupted between jobs, or a job raised)."""
    if _State.open_sweep:
        _State.failed_jobs = max(_State.failed_jobs, 1)
        _close_open_runs(_State.open_sweep, f"sweep {why}", status)
        _State.open_sweep = None


def _children(uri: str, parent_id: str) -> List[Any]:
    mlflow_client = store.client(uri)
    parent = store.retry(mlflow_client.get_run, parent_id)
    return store.retry(mlflow_client.search_runs, [parent.info.experiment_id],
                          filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10000)


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


def _sweeper_preflight(config: DictConfig) -> None:
    """A sweeper with a `preflight(config)` (hydra/sweeper=optuna) checks its search space here,
    before the store, the parent run or the sweep directory exist: bad input is one line, exit 2."""
    from hydra.utils import get_class

    from xpdist.core.errors import ConfigError

    target = config.hydra.sweeper.get("_target_")
    check = getattr(get_class(target), "preflight", None) if target else None
    if check is None:
        return
    try:
        check(config)
    except ConfigError as err:
        print(f"xpdist: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class SweepCallback(Callback):
    """Creates the sweep's parent run before the jobs and reports and closes it after them.

    Args:
        max_parallel: jobs that train at the same time on the machine that started the
            sweep, under a parallel launcher (submitit_local). null: one per CPU core;
            0: no limit. The basic launcher runs one job at a time anyway.
    """

    def __init__(self, max_parallel: Optional[int] = None):
        self.max_parallel = (os.cpu_count() or 1) if max_parallel is None else int(max_parallel)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _sweeper_preflight(config)
        hc = config.hydra
        uri = store.resolve_uri(config.tracking.uri, Path(hc.runtime.cwd))
        sweep_dir = Path(hc.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = swept_overrides(config)
        name = f"sweep-{time.strftime('%Y%m%d-%H%M%S')} " + " ".join(overrides)
        tags = {"xpdist.sweep": "true", "xpdist.overrides": " ".join(overrides) or "(none)",
                "xpdist.sweep_dir": str(sweep_dir.resolve()), "mlflow.source.name": "python -m xpdist -m"}
        tags.update({f"sweep.{item.split('=', 1)[0].lstrip('+~')}": item.split("=", 1)[-1] for item in overrides})
        # Created here, once: parallel jobs that create the store or experiment race.
        run_id = store.create_run(uri, config.tracking.experiment, name.strip(), {}, tags)
        info = {"parent_run_id": run_id, "tracking_uri": uri, "experiment": config.tracking.experiment,
                "host": socket.gethostname(), "max_parallel": self.max_parallel}
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
            if run.info.status == "RUNNING":
                store.terminate(uri, run.info.run_id, "FAILED", "the job ended without closing its run")
        rows = summary.rows(_children(uri, parent_id))
        failed = [r for r in rows if r["status"] != "FINISHED"]
        _State.failed_jobs = len(failed) if rows else 1
        report(rows, uri, parent_id, sweep_dir)
        error = None
        if failed or not rows:
            error = f"{len(failed)} of {len(rows)} jobs failed" if rows else "no job recorded a run"
        store.terminate(uri, parent_id, "FAILED" if error else "FINISHED", error)
        _State.open_sweep = None


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def report(rows: List[Dict[str, Any]], uri: str, parent_id: str, sweep_dir: Path, out=sys.stdout) -> None:
    """Prints the sweep's table and logs it (CSV, Markdown, PNG) on the parent run."""
    title = f"sweep {sweep_dir.name}: {len(rows)} jobs"
    paths = summary.write_all(rows, sweep_dir / SUMMARY_DIR, title)
    store.log_artifacts(uri, parent_id, paths, SUMMARY_DIR)
    failed = [r for r in rows if r["status"] != "FINISHED"]
    lines = ["", f"xpdist: {title}, {len(rows) - len(failed)} finished, {len(failed)} failed",
             summary.format_text(rows)]
    lines += [f"  job {r['job']} {r['status']}: {_short(r['error'] or 'no error recorded')}" for r in failed]
    lines += [f"  parent run: {parent_id}   tracking uri: {uri}",
              f"  table and chart: {sweep_dir / SUMMARY_DIR} (also artifacts of the parent run)",
              f"  open the MLflow UI: {store.ui_command(uri)}"]
    print("\n".join(lines), file=out, flush=True)
