"""Sweeps end to end: real CLI in a subprocess, real TensorFlow jobs, runs read back from MLflow.

Budget: each job costs ~20-30 s on 2 cores (mostly importing TensorFlow), so checks are
combined. The strategy_sweep recipe runs as a user runs it, under the default, sequential
launcher (its 5 jobs' tasks forked from one standby task, one TensorFlow import); the
cross_ops_sweep recipe under the parallel launcher (hydra/launcher=local_parallel), which is
what the parallel-into-one-SQLite-store checks need. The failing-job and Ctrl-C tests exercise
both launchers too.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.datafiles import write_image_folder
from tests import zygote
from tests.helpers import REPO, compose, xpdist_env

pytestmark = pytest.mark.slow

RECIPES = sorted(p.relative_to(REPO / "recipes").with_suffix("").as_posix()
                 for p in (REPO / "recipes").rglob("*.yaml"))
# Per job: one epoch, no progress bar.
TINY = ["trainer.epochs=1", "trainer.progress=false"]
# A recipe sweep's jobs in parallel, all of them at once, into one SQLite store.
PARALLEL = ["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3"]
PARALLEL_RECIPES = {"cross_ops_sweep"}


def sweep_runs(xpdist):
    """(parent, children ordered by job number) of the one sweep in the store."""
    runs = xpdist.runs()
    parents = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == len(runs) - 1, "every run of the store belongs to the sweep"
    return parent, sorted(children, key=lambda r: int(r.data.tags["xpdist.job"]))


def check_summary(xpdist, proc, parent, children):
    """The table printed at the end and logged on the parent matches the child runs."""
    artifacts = {a.path for a in xpdist.client().list_artifacts(parent.info.run_id, "summary")}
    assert artifacts == {"summary/summary.csv", "summary/summary.md", "summary/examples_per_sec.png"}
    local = xpdist.client().download_artifacts(parent.info.run_id, "summary", str(xpdist.workdir / "dl"))
    with open(Path(local) / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["run_id"], r["status"]) for r in table] == [(c.info.run_id, c.info.status) for c in children]
    assert (Path(local) / "examples_per_sec.png").read_bytes()[:4] == b"\x89PNG"
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("job  overrides"))
    assert "examples/sec" in lines[header] and "wall time (s)" in lines[header]
    for child, line in zip(children, lines[header + 2:header + 2 + len(children)]):
        assert line.split()[0] == child.data.tags["xpdist.job"] and child.info.status in line


def check_finished_child(child):
    assert child.info.status == "FINISHED", child.data.tags.get("xpdist.error")
    assert {"loss", "examples_per_sec", "epoch_time_s"} <= set(child.data.metrics)
    assert child.data.params["trainer.epochs"] == "1"


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_runs(xpdist, recipe):
    if compose([f"recipe={recipe}"]).hydra.sweeper._target_.endswith("OptunaSweeper"):
        pytest.skip("an Optuna study: tests/integration/test_tuning.py::test_tuning_recipes_run runs it")
    sweep = bool(compose([f"recipe={recipe}"]).hydra.sweeper.params)
    if compose([f"recipe={recipe}"]).dataset.name == "image_folder":  # the recipe reads data/images
        write_image_folder(xpdist.workdir / "data" / "images", per_class=100, size=32)
    # One epoch per job: a recipe's warmup is shortened to half of it (a warmup as long as the
    # training is refused at preflight), so that its schedule still runs both phases.
    warmup = ["schedule.warmup_epochs=0.5"] if compose([f"recipe={recipe}"]).schedule.get("warmup_epochs") else []
    launcher = PARALLEL if recipe in PARALLEL_RECIPES else []
    proc = xpdist.run(f"recipe={recipe}", *TINY, *warmup, *launcher, tiny=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if not sweep:
        (run,) = xpdist.runs()
        check_finished_child(run)
        registered = compose([f"recipe={recipe}"]).tracking
        if registered.register_model:  # the recipe's model is a version of a registered model, by alias
            version = xpdist.client().get_model_version_by_alias(registered.register_model, registered.model_alias)
            assert version.run_id == run.info.run_id
        return
    parent, children = sweep_runs(xpdist)
    params = compose([f"recipe={recipe}"]).hydra.sweeper.params
    jobs = 1
    for key, values in params.items():
        jobs *= len(values.split(","))
        # group overrides land in the summary param of the same name, values in dotted keys
        assert {c.data.params[key] for c in children} == set(values.split(",")), key
    assert [c.data.tags["xpdist.job"] for c in children] == [str(i) for i in range(jobs)]
    for child in children:
        check_finished_child(child)
        assert {a.path for a in xpdist.client().list_artifacts(child.info.run_id)} >= {"config.yaml", "model"}
        assert len(xpdist.client().get_metric_history(child.info.run_id, "loss")) == 1
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name.startswith("sweep-") and f"recipe={recipe}" in parent.info.run_name
    for key, values in params.items():
        assert parent.data.tags[f"sweep.{key}"] == values
    check_summary(xpdist, proc, parent, children)
    if recipe == "strategy_sweep":
        replicas = {c.data.params["strategy"]: c.data.params["num_replicas"] for c in children}
        assert replicas == {"default": "1", "one_device": "1", "mirrored": "2", "central_storage": "2",
                            "multi_worker_mirrored": "1"}


def test_sweep_goes_on_after_failed_jobs_and_exits_non_zero(xpdist):
    # cross_ops=nccl is rejected before training (no GPU here); a model._target_ whose package
    # exists but whose module does not crashes inside its task process; the last job trains.
    proc = xpdist.run("strategy=mirrored", "devices.logical_cpus=2", "model=custom",
                      "model._target_=xpdist.no_such_module.build,xpdist.task.models.example_custom_model",
                      "cross_ops=nccl,hierarchical", *TINY,
                      multirun=True, tiny=False, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    parent, children = sweep_runs(xpdist)
    rejected, crashed, rejected_too, finished = children
    assert [c.info.status for c in children[:3]] == ["FAILED"] * 3
    for run in (rejected, rejected_too):
        assert run.data.tags["xpdist.error"].startswith("cross_ops=nccl: NCCL needs GPUs")
    assert "no_such_module" in crashed.data.tags["xpdist.error"] and crashed.data.params["num_replicas"] == "2"
    check_finished_child(finished)
    assert finished.data.params["cross_ops"] == "hierarchical" and finished.data.params["num_replicas"] == "2"
    assert parent.info.status == "FAILED" and parent.data.tags["xpdist.error"] == "3 of 4 jobs failed"
    assert parent.data.tags["sweep.cross_ops"] == "nccl,hierarchical"
    check_summary(xpdist, proc, parent, children)
    assert "job 1 FAILED: ValueError: model._target_=xpdist.no_such_module.build" in proc.stdout


def test_a_sweep_over_the_training_pieces(xpdist):
    """Issue 23's sweep as a user types it: optimizers by schedules, each job its own pieces."""
    proc = xpdist.run("optimizer=sgd,adamw", "schedule=constant,cosine", "trainer.epochs=2", multirun=True,
                      timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parent, children = sweep_runs(xpdist)
    assert [c.info.status for c in children] == ["FINISHED"] * 4
    pieces = [(c.data.params["optimizer.name"], c.data.params["schedule.name"]) for c in children]
    assert sorted(pieces) == [("adamw", "constant"), ("adamw", "cosine"), ("sgd", "constant"), ("sgd", "cosine")]
    for child in children:
        rates = [m.value for m in xpdist.client().get_metric_history(child.info.run_id, "learning_rate")]
        decays = child.data.params["schedule.name"] == "cosine"
        assert len(rates) == 2 and (rates[1] < rates[0] if decays else rates[1] == rates[0]), (pieces, rates)
    assert (parent.data.tags["sweep.optimizer"], parent.data.tags["sweep.schedule"]) == ("sgd,adamw", "constant,cosine")


def _descendants(pid):
    return psutil.Process(pid).children(recursive=True)


def _cmdline(proc) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


def _alive(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_ctrl_c_kills_the_running_job_and_the_sweep(xpdist):
    # A terminal's Ctrl-C: SIGINT to the CLI's whole process group while job 0 trains.
    cmd = [sys.executable, "-m", "xpdist", "-m", "seed=1,2", "trainer.epochs=100000", "trainer.progress=false",
           "trainer.keep_checkpoints=0"]
    cli = zygote.popen(cmd, xpdist.workdir, xpdist_env())
    try:
        seen = set()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and cli.poll() is None:
            seen.update(_descendants(cli.pid))
            # sweep.json is written once the CLI has created the store and the parent run
            runs = xpdist.runs() if list(xpdist.workdir.glob("multirun/*/*/sweep.json")) else []
            child = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
            if child and child[0].data.metrics.get("loss") is not None:
                break  # job 0 is training: an epoch is logged
            time.sleep(1)
        else:
            pytest.fail(f"job 0 never logged an epoch: {cli.communicate()}")
        seen.update(_descendants(cli.pid))
        assert any("xpdist.task" in _cmdline(p) for p in seen if p.is_running()), [_cmdline(p) for p in seen]
        os.killpg(cli.pid, signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    assert cli.returncode == 130, err[-3000:]
    assert "interrupted by SIGINT" in err
    parent, children = sweep_runs(xpdist)
    assert [c.info.status for c in children] == ["KILLED"], "job 1 never starts"
    assert parent.info.status == "KILLED"
    deadline = time.monotonic() + 10  # a process just killed may still be listed: allow it a moment
    while [p for p in seen if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in seen if _alive(p)]
    assert not left, [p.cmdline() for p in left]


def _training(xpdist, count: int) -> list:
    """The sweep's child runs once `count` of them have logged an epoch, else []."""
    runs = xpdist.runs() if list(xpdist.workdir.glob("multirun/*/*/sweep.json")) else []
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return children if sum(c.data.metrics.get("loss") is not None for c in children) >= count else []


def _start_parallel(xpdist, *overrides):
    cmd = [sys.executable, "-m", "xpdist", "-m", "trainer.progress=false", "trainer.keep_checkpoints=0",
           "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", *overrides]
    return zygote.popen(cmd, xpdist.workdir, xpdist_env())


def _kill_if_running(cli) -> None:
    """A test that failed before the sweep ended leaves none of its processes."""
    if cli.poll() is None:
        for proc in [psutil.Process(cli.pid), *_descendants(cli.pid)]:
            proc.kill()
        cli.wait()


def _wait_training(xpdist, cli, count: int, seen: set) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and cli.poll() is None:
        seen.update(_descendants(cli.pid))
        if _training(xpdist, count):
            return
        time.sleep(0.5)
    pytest.fail(f"{count} jobs never logged an epoch: {cli.communicate()}")


def test_ctrl_c_of_a_parallel_sweep_kills_every_running_job_and_the_sweep(xpdist):
    # Jobs 0 and 1 train at once in processes forked from the sweep's, each in a process group
    # of its own: the terminal's Ctrl-C reaches the sweep's process, which passes it on.
    cli = _start_parallel(xpdist, "seed=1,2,3", "trainer.epochs=100000")
    seen: set = set()
    try:
        _wait_training(xpdist, cli, 2, seen)
        seen.update(_descendants(cli.pid))
        os.killpg(cli.pid, signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    finally:
        _kill_if_running(cli)
    assert cli.returncode == 130, err[-3000:]
    assert "interrupted by SIGINT" in err
    parent, children = sweep_runs(xpdist)
    assert [c.info.status for c in children] == ["KILLED", "KILLED"], "job 2 never starts"
    assert parent.info.status == "KILLED"
    deadline = time.monotonic() + 10  # a process just killed may still be listed: allow it a moment
    while [p for p in seen if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in seen if _alive(p)]
    assert not left, [p.cmdline() for p in left]


def test_a_parallel_job_whose_process_is_lost_fails_and_the_sweep_goes_on(xpdist):
    # Job 0 trains until its process (the job's driver, forked from the sweep's) is killed, as
    # an OOM killer would; jobs 1 and 2 are short and finish. The sweep reaches its table.
    cli = _start_parallel(xpdist, "trainer.epochs=100000,2,2")
    seen: set = set()
    try:
        _wait_training(xpdist, cli, 1, seen)
        deadline = time.monotonic() + 60
        job0 = []
        while not job0 and time.monotonic() < deadline:
            job0 = [p for p in psutil.Process(cli.pid).children()
                    if any(f.path.endswith("/0/xpdist.log") for f in p.open_files())]
        (driver,) = job0
        seen.update(_descendants(cli.pid))
        driver.kill()
        out, err = cli.communicate(timeout=300)
    finally:
        _kill_if_running(cli)
    assert cli.returncode == 1, err[-3000:]
    assert "trainer.epochs=100000: its process ended by SIGKILL before the job's end" in err, err[-3000:]
    parent, children = sweep_runs(xpdist)
    assert [c.info.status for c in children] == ["FAILED", "FINISHED", "FINISHED"]
    assert children[0].data.tags["xpdist.error"] == "the job ended without closing its run"
    assert parent.info.status == "FAILED" and "3 jobs, 2 finished, 1 failed" in out
    deadline = time.monotonic() + 10
    while [p for p in seen if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in seen if _alive(p)], "job 0's task outlived its driver"
