"""Closes runs whose driver is gone: RUNNING, with a heartbeat older than the limit.

Every xpdist command that opens a store (a run, a sweep, xpdist-report) calls
close_stale() first; this module is also the explicit command for it:

    python -m xpdist.tracking.reap [--uri URI] [--timeout-s SECONDS]

A run is closed as FAILED with the tag xpdist.error = "driver lost; last heartbeat at ...".
Only runs that carry xpdist's heartbeat tag are looked at (runs made by other tools are
never touched), and a run is never closed before three of its own heartbeat intervals
have passed, so a live driver on another machine keeps its run. The heartbeat is the
driver's clock: machines sharing a tracking server need clocks within the limit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional

from xpdist.core.protocol.outcome import Status
from xpdist.core.schema import TrackingConfig
from xpdist.tracking import store
from xpdist.tracking.heartbeat import HEARTBEAT_TAG, INTERVAL_TAG

# tracking.heartbeat_timeout_s's default: a driver silent this long is taken for lost.
DEFAULT_TIMEOUT_S = TrackingConfig.heartbeat_timeout_s


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def stale_reason(tags: dict, timeout_s: float, now: float) -> Optional[str]:
    """Why a RUNNING run with these tags is taken for lost, or None while its driver may live."""
    try:
        last = float(tags[HEARTBEAT_TAG])
        interval = float(tags.get(INTERVAL_TAG, TrackingConfig.heartbeat_s))  # a run that predates the tag
    except (KeyError, ValueError):
        return None
    if now - last <= max(float(timeout_s), 3 * interval):
        return None
    return f"driver lost; last heartbeat at {_utc(last)} ({now - last:.0f} s before {_utc(now)})"


def close_stale(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> List[str]:
    """Closes every stale run of the store as FAILED; returns their ids.

    Two calls whatever the store holds: one search_experiments, one search_runs filtered
    on status RUNNING.
    """
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        return []  # a store not made yet holds no run
    mlflow_client = store.client(uri)
    experiments = [e.experiment_id for e in store.retry(mlflow_client.search_experiments)]
    if not experiments:
        return []
    running = store.retry(mlflow_client.search_runs, experiments,
                          filter_string=f"attributes.status = '{Status.RUNNING}'", max_results=10000)
    now, closed = time.time(), []
    for run in running:
        reason = stale_reason(run.data.tags, timeout_s, now)
        if reason:
            store.terminate(uri, run.info.run_id, Status.FAILED, reason)
            closed.append(run.info.run_id)
    return closed


def announce(closed: List[str], out=sys.stderr) -> None:
    for run_id in closed:
        print(f"xpdist: closed run {run_id} as FAILED: its driver was lost (no heartbeat)", file=out, flush=True)


def cli(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xpdist.tracking.reap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else ./mlflow.db)")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds without a heartbeat before a run is closed (default {DEFAULT_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    uri = store.resolve_uri(args.uri, Path.cwd())
    closed = close_stale(uri, args.timeout_s)
    announce(closed, sys.stdout)
    print(f"xpdist: {len(closed)} stale run(s) closed in {uri}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
