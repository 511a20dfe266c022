"""hydra.callbacks.sweep.max_parallel: real processes compete for the sweep's slots (no TensorFlow)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from tests.helpers import xpdist_env

HOLD = """
import sys, time
from omegaconf import OmegaConf
from xpdist.driver import sweep
hc = OmegaConf.create({"sweep": {"dir": sys.argv[1]}, "job": {"num": int(sys.argv[2])}})
with sweep.slot(hc):
    start = time.time()
    time.sleep(2.0)
    print(start, time.time())
"""


def _overlap(spans):
    """The most spans that are open at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def _run_jobs(sweep_dir, jobs):
    procs = [subprocess.Popen([sys.executable, "-c", HOLD, str(sweep_dir), str(i)], env=xpdist_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(jobs)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return [tuple(map(float, out.split())) for out, _ in outs], "".join(err for _, err in outs)


def test_at_most_max_parallel_jobs_hold_a_slot(tmp_path):
    info = {"parent_run_id": "x", "tracking_uri": "sqlite:///unused", "host": socket.gethostname(),
            "max_parallel": 2}
    (tmp_path / "sweep.json").write_text(json.dumps(info))
    spans, err = _run_jobs(tmp_path, 3)
    assert _overlap(spans) == 2
    assert "waits for one of 2 slots (hydra.callbacks.sweep.max_parallel)" in err


def test_jobs_on_another_host_are_left_to_their_scheduler(tmp_path):
    info = {"parent_run_id": "x", "tracking_uri": "sqlite:///unused", "host": "another-host", "max_parallel": 1}
    (tmp_path / "sweep.json").write_text(json.dumps(info))
    spans, _ = _run_jobs(tmp_path, 2)
    assert _overlap(spans) == 2
