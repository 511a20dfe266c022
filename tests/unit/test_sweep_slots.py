"""hydra.callbacks.sweep.max_parallel: real processes compete for the sweep's slots (no TensorFlow).

No timing: a job holds its slot until the test creates a `release` file, so the test sees
who is inside at leisure, however slowly the interpreters start on a loaded machine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from tests.helpers import xpdist_env

HOLD = """
import sys, time
from pathlib import Path
from omegaconf import OmegaConf
from xpdist.driver import sweep
folder, num = Path(sys.argv[1]), int(sys.argv[2])
hc = OmegaConf.create({"sweep": {"dir": str(folder)}, "job": {"num": num}})
with sweep.slot(hc):
    marker = folder / f"in-{num}"
    marker.touch()
    print(len(list(folder.glob("in-*"))), flush=True)  # jobs inside, this one included
    while not (folder / "release").exists():
        time.sleep(0.05)
    marker.unlink()
"""


def start(sweep_dir: Path, jobs: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", HOLD, str(sweep_dir), str(i)], env=xpdist_env(),
                             stdout=subprocess.PIPE, stderr=(sweep_dir / f"err-{i}").open("w"), text=True)
            for i in range(jobs)]


def wait_for(condition, procs, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [p.args[-1] for p in procs if p.poll() is not None]
        assert not dead, f"jobs {dead} ended while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def finish(sweep_dir: Path, procs: List[subprocess.Popen]) -> List[int]:
    (sweep_dir / "release").touch()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), outs
    return [int(out) for out in outs]


def write_info(sweep_dir: Path, host: str, max_parallel: int) -> None:
    info = {"parent_run_id": "x", "tracking_uri": "sqlite:///unused", "host": host, "max_parallel": max_parallel}
    (sweep_dir / "sweep.json").write_text(json.dumps(info))


def test_at_most_max_parallel_jobs_hold_a_slot(tmp_path):
    write_info(tmp_path, socket.gethostname(), 2)
    procs = start(tmp_path, 3)
    said = "waits for one of 2 slots (hydra.callbacks.sweep.max_parallel)"
    waiting = lambda: [i for i in range(3) if said in (tmp_path / f"err-{i}").read_text()]  # noqa: E731
    wait_for(lambda: len(list(tmp_path.glob("in-*"))) == 2 and waiting(), procs, "two jobs in, one waiting")
    assert len(waiting()) == 1 and not (tmp_path / f"in-{waiting()[0]}").exists()
    assert max(finish(tmp_path, procs)) <= 2


def test_jobs_on_another_host_are_left_to_their_scheduler(tmp_path):
    write_info(tmp_path, "another-host", 1)
    procs = start(tmp_path, 2)
    # With a slot limit of 1 applied, the second job would never enter before the release.
    wait_for(lambda: len(list(tmp_path.glob("in-*"))) == 2, procs, "both jobs inside")
    assert sorted(finish(tmp_path, procs))[-1] == 2
