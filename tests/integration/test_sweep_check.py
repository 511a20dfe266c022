"""A sweep checks every job's config before the first job starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import xpdist_env

pytestmark = pytest.mark.slow

REJECTED = "cluster=local: parameter_server needs workers and parameter servers"


def test_a_job_that_will_be_rejected_is_reported_before_the_first_job_trains(xpdist):
    cmd = [sys.executable, "-m", "xpdist", "-m", "strategy=mirrored,parameter_server", "devices.logical_cpus=2",
           "trainer.epochs=1", "trainer.progress=false"]
    proc = subprocess.run(cmd, cwd=xpdist.workdir, env=xpdist_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)  # one stream: the order shows
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout[-3000:]
    up_front = [i for i, line in enumerate(lines) if line.startswith("xpdist: job 1 (strategy=parameter_server")]
    assert len(up_front) == 1 and REJECTED in lines[up_front[0]], proc.stdout[-3000:]
    first_job = next(i for i, line in enumerate(lines) if "#0 : strategy=mirrored" in line)
    assert up_front[0] < first_job
    assert not any(line.startswith("xpdist: job 0") for line in lines)  # the good job is not reported
    # It still has its turn, and ends as a FAILED child run with the same error.
    runs = {r.data.tags.get("xpdist.job"): r for r in xpdist.runs()}
    assert runs["0"].info.status == "FINISHED"
    assert runs["1"].info.status == "FAILED" and runs["1"].data.tags["xpdist.error"].startswith(REJECTED)


@pytest.mark.new_store
def test_a_sweep_into_a_file_store_is_refused_before_it_starts(xpdist, tmp_path):
    proc = xpdist.run("strategy=mirrored,one_device", f"tracking.uri={(tmp_path / 'mlruns').as_uri()}",
                      multirun=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("xpdist: error: tracking.uri=file://")
    assert "Traceback" not in proc.stderr and not (tmp_path / "mlruns").exists()
    assert not (xpdist.workdir / "mlflow.db").exists()
