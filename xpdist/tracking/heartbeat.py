"""The driver's heartbeat: a tag on each run it holds open, renewed every few seconds.

A driver killed by SIGKILL (an OOM killer, a preempted login shell) cannot close its run;
its heartbeat then stops, and the next xpdist command on the same store closes the run as
FAILED (xpdist/tracking/reap.py). The tag is the one sign of life that works across
machines sharing a tracking server: no pid or host of one machine means anything on another.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Dict, Iterator, Optional

from xpdist.tracking import store

# Epoch seconds (the driver's clock) of the run's last heartbeat.
HEARTBEAT_TAG = "xpdist.heartbeat"
# Seconds between two heartbeats of that run: a reaper never closes a run whose heartbeat
# is younger than three of them, whatever its own tracking.heartbeat_timeout_s.
INTERVAL_TAG = "xpdist.heartbeat_s"


def initial_tags(interval_s: float) -> Dict[str, str]:
    """The tags a run is created with: alive now, beating every interval_s seconds."""
    return {HEARTBEAT_TAG: f"{time.time():.0f}", INTERVAL_TAG: f"{float(interval_s):g}"}


class _Beater(threading.Thread):
    """One thread per process for every run it holds (a sweep's parent and its job)."""

    def __init__(self):
        super().__init__(name="xpdist-heartbeat", daemon=True)
        self.lock = threading.Lock()
        self.runs: Dict[str, tuple] = {}  # run id -> (uri, interval_s, next beat at)
        self.wake = threading.Event()
        # Held while a heartbeat is written: paused() takes it to fork with no store call running.
        self.beating = threading.Lock()

    def run(self) -> None:
        while True:
            with self.lock:
                due = [(run_id, uri, interval) for run_id, (uri, interval, at) in self.runs.items()
                       if at <= time.monotonic()]
            for run_id, uri, interval in due:
                try:
                    with self.beating:
                        store.set_tags(uri, run_id, {HEARTBEAT_TAG: f"{time.time():.0f}"})
                except Exception:  # the server away for a while: beat again next time
                    pass
                with self.lock:
                    if run_id in self.runs:
                        self.runs[run_id] = (uri, interval, time.monotonic() + interval)
            with self.lock:
                waits = [at - time.monotonic() for _, _, at in self.runs.values()]
            self.wake.wait(max(0.05, min(waits, default=60.0)))
            self.wake.clear()


# Made when a run first needs it, and forgotten in a forked child (forked, registered below):
# CPython marks every Thread object that exists at a fork as stopped in the child
# (threading._after_fork), started or not, so one made at import, or before the fork, could
# never beat in a process forked after (a job of hydra/launcher=local_parallel, a user's
# multiprocessing with the fork start method, a test's zygote).
_beater: Optional[_Beater] = None
_start_lock = threading.Lock()


def keep_alive(uri: str, run_id: str, interval_s: float) -> None:
    """Renews the run's heartbeat every interval_s seconds until let_go(run_id)."""
    global _beater
    with _start_lock:
        if _beater is None:
            _beater = _Beater()
            _beater.start()
        beater = _beater
    with beater.lock:
        beater.runs[run_id] = (uri, float(interval_s), time.monotonic() + float(interval_s))
    beater.wake.set()


def let_go(run_id: str) -> None:
    """Stops the run's heartbeat (before it is closed)."""
    beater = _beater
    if beater is not None:
        with beater.lock:
            beater.runs.pop(run_id, None)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No heartbeat is written inside the block: a process forked in it (a job of
    hydra/launcher=local_parallel) holds none of the store's locks or connections half-used."""
    beater = _beater
    if beater is None:
        yield
        return
    with beater.beating:
        yield


def forked() -> None:
    """In a process just forked: the parent's heartbeat thread did not come along (only the
    forking thread does) and its runs are the parent's to beat. A new one is made when a run of
    this process needs it."""
    global _beater, _start_lock
    _beater, _start_lock = None, threading.Lock()


os.register_at_fork(after_in_child=forked)
