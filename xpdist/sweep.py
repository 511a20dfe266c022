"""Sweeps: one MLflow parent run per `-m` sweep, each job a nested child run.

Hydra calls SweepCallback in the process that drives the sweep: it creates the store, the
experiment and the parent run before any job starts, and closes the parent at the end.
Jobs find the parent through sweep.json in the sweep directory, so this works with any
launcher, including ones that run jobs in other processes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from xpdist import tracking

SWEEP_FILE = "sweep.json"


class _State:
    failed_jobs = 0


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


def interrupted(ctx, why: str) -> None:
    """Ctrl-C in a job: the parent run is KILLED too."""
    if ctx.parent_run_id and ctx.tracking_uri:
        tracking.terminate(ctx.tracking_uri, ctx.parent_run_id, "KILLED", why)


class SweepCallback(Callback):
    """Creates the sweep's parent run before the jobs and closes it after them."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        hc = config.hydra
        launch_dir = Path(hc.runtime.cwd)
        uri = tracking.resolve_uri(config.tracking.uri, launch_dir)
        sweep_dir = Path(hc.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = list(hc.overrides.task)
        name = f"sweep-{time.strftime('%Y%m%d-%H%M%S')} " + " ".join(overrides)
        run_id = tracking.create_run(uri, config.tracking.experiment, name.strip(), {},
                                     {"xpdist.sweep": "true", "xpdist.overrides": " ".join(overrides) or "(none)",
                                      "xpdist.sweep_dir": str(sweep_dir)})
        (sweep_dir / SWEEP_FILE).write_text(json.dumps({"parent_run_id": run_id, "tracking_uri": uri,
                                                         "experiment": config.tracking.experiment}))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        info = _read(Path(config.hydra.sweep.dir))
        if not info:
            return
        client = tracking.client(info["tracking_uri"])
        parent = client.get_run(info["parent_run_id"])
        children = client.search_runs([parent.info.experiment_id],
                                      filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        failed = [r for r in children if r.info.status != "FINISHED"]
        _State.failed_jobs = len(failed)
        if parent.info.status == "RUNNING":
            tracking.terminate(info["tracking_uri"], parent.info.run_id, "FAILED" if failed else "FINISHED",
                               f"{len(failed)} of {len(children)} jobs failed" if failed else None)
