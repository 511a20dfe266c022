"""A training that fails ends FAILED with its one-line error; Ctrl-C or SIGTERM ends it KILLED.

In both cases nothing is left behind: no RUNNING run, no process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests import zygote
from tests.helpers import TINY, Xpdist, xpdist_env
from tests.helpers import closed_port
from tests.integration.harness import describe, run_many, store_template

pytestmark = pytest.mark.slow


def test_mnist_offline_fails_with_one_line(tmp_path):
    """No network here; a proxy on a closed port makes sure of it, and an empty KERAS_HOME of no cache."""
    proxy = f"http://127.0.0.1:{closed_port()}"
    env = {"https_proxy": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "HTTP_PROXY": proxy,
           "KERAS_HOME": str(tmp_path / "keras-home")}
    done = run_many(tmp_path, None, {"mnist": ["dataset=mnist"]}, env=env)["mnist"]
    assert done.proc.returncode == 1, describe(done)
    assert done.run.info.status == "FAILED"
    error = done.run.data.tags["xpdist.error"]
    assert "\n" not in error
    assert error.startswith("RuntimeError: dataset=mnist could not be downloaded")
    assert "dataset=digits" in error  # says what to do instead
    assert f"xpdist task: {error}" in done.proc.stderr
    assert "Traceback" not in done.proc.stderr + done.proc.stdout
    assert "FAILED" in done.proc.stdout


# Long enough to be interrupted mid-training: 200 steps per epoch, a hundred thousand epochs.
LONG_EPOCHS = 100000
LONG = ["trainer=ctl", "dataset.num_examples=1000", f"trainer.epochs={LONG_EPOCHS}", "trainer.keep_checkpoints=0"]


def interrupt_mid_training(xpdist: Xpdist, signum: int, timeout: float = 300) -> dict:
    """Starts a long run, signals the CLI once the first epoch is done, and waits for the end.

    The task stops on the signal here; the grace-then-SIGKILL path for a task that does not
    is tests/unit/test_process.py.
    """
    cmd = [sys.executable, "-m", "xpdist", *TINY, *LONG]
    proc = zygote.popen(cmd, xpdist.workdir, xpdist_env())
    lines, first_epoch = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Epoch 1/"):
                first_epoch.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_epoch.wait(timeout), "".join(lines) + proc.stderr.read()
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert tree, "the task process should be running"
        proc.send_signal(signum)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    _, alive = psutil.wait_procs(tree, timeout=10)
    return dict(code=code, alive=alive, stdout="".join(lines), stderr=proc.stderr.read())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_ends_the_run_killed(signum, interrupted):
    name = signal.Signals(signum).name
    outcome, xpdist = interrupted[name]
    assert outcome["code"] == 130, outcome
    assert not outcome["alive"], f"left running: {outcome['alive']}"
    assert f"interrupted by {name}" in outcome["stderr"]
    assert "Traceback" not in outcome["stderr"]
    runs = xpdist.runs()
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "KILLED"
    assert run.data.tags["xpdist.error"] == f"interrupted by {name}"
    # Stopped mid-training: at least one epoch recorded, far from all of them.
    steps = [m.step for m in xpdist.client().get_metric_history(run.info.run_id, "loss")]
    assert 1 <= len(steps) < LONG_EPOCHS and steps == list(range(1, len(steps) + 1))


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Both signals, interrupting two runs side by side."""
    root = tmp_path_factory.mktemp("signals")
    template = store_template(root / "template")
    runs = {}
    for name in ("SIGINT", "SIGTERM"):
        xpdist = Xpdist(root / name)
        xpdist.workdir.mkdir()
        (xpdist.workdir / "mlflow.db").write_bytes(template.read_bytes())
        runs[name] = xpdist
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(interrupt_mid_training, runs[name], getattr(signal, name)) for name in runs}
        return {name: (future.result(), runs[name]) for name, future in futures.items()}
