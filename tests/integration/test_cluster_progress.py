"""cluster=localhost shows the chief's progress on the terminal while it trains, and says where
every task's log is."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_two_worker_run_streams_the_chiefs_epochs_and_names_the_logs(xpdist, tmp_path):
    job = tmp_path / "job"
    done = xpdist.run("strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2",
                      "trainer.epochs=2", "trainer.progress=true", f"hydra.run.dir={job}", tiny=False, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"xpdist: cluster task logs in {job / 'logs'}/; worker:0's log follows" in lines
    # tf-keras Model.fit's epoch lines (verbose=2), from worker 0's log, before the closing summary.
    epochs = [i for i, line in enumerate(lines) if re.match(r"\[worker:0\] Epoch [12]/2$", line)]
    summary = next(i for i, line in enumerate(lines) if line.startswith("xpdist: run "))
    assert len(epochs) == 2 and epochs[-1] < summary, done.stdout
    assert any(re.match(r"\[worker:0\] .*loss: ", line) for line in lines), done.stdout
    assert not any(line.startswith("[worker:1]") for line in lines)  # one task's lines: no interleaving
