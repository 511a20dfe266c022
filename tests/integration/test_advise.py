"""`python -m xpdist advise`: real probes of every one-process strategy, a parent run with the
table and chart, a recommendation whose command line trains; the budget is held, and probes
that are stopped, refused or interrupted are recorded.

One advisor run serves the first tests here, with a budget it does not reach (it must probe
every candidate, whatever the machine's load). It takes over 60 s (45 to 90 s measured on 2
cores): 4 real probes, each a process that imports TensorFlow, and 5 refused ones.

The advisor's commands are forked from a test zygote (tests/zygote.py) with a copy of a migrated
store in place, as the other CLI tests' runs are, except where the test signals the advisor or
starts it in a memory cgroup (a real subprocess).
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import zygote
from tests.helpers import TINY, xpdist_env

pytestmark = pytest.mark.slow

BUDGET_S = 600
# 96 examples: one global batch of 2 replicas x 64 is larger than the data, so preflight refuses
# the mirrored and central_storage candidates for real (REJECTED) and the search must go on.
WORDS = ["model=cnn", "model.filters=[8]", "dataset=synthetic_images", "dataset.image_shape=[16,16,3]",
         "dataset.num_examples=96"]


def advise(workdir: Path, store: Path, *words: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m xpdist advise WORDS` in workdir, its store a copy of the migrated one."""
    shutil.copy(store, workdir / "mlflow.db")
    return zygote.run([sys.executable, "-m", "xpdist", "advise", *words], workdir, xpdist_env(), timeout, kind="run")


@pytest.fixture(scope="module")
def advised(tmp_path_factory, migrated_store):
    workdir = tmp_path_factory.mktemp("advise")
    done = advise(workdir, migrated_store, f"budget_s={BUDGET_S}", "probe_epochs=3", "logical_cpus=[2]", *WORDS,
                  timeout=600)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("xpdist")
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.advisor") == "true"]
    return dict(done=done, client=client, parent=parent, workdir=workdir,
                children=[r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id])


def _table(advised):
    path = advised["client"].download_artifacts(advised["parent"].info.run_id, "advice/advice.csv",
                                                str(advised["workdir"]))
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_the_advisor_probes_every_candidate_when_its_budget_allows(advised):
    done = advised["done"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "budget spent" not in done.stdout
    labels = [r["label"] for r in _table(advised)]
    assert {"default-b64", "one_device-b64", "mirrored-hierarchical-2cpu-b64",
            "mirrored-reduction_to_one_device-2cpu-b64", "central_storage-2cpu-b64"} <= set(labels)
    assert len(labels) == 9  # 5, then the two fastest (default and one_device) at 32 and 128


def test_the_parent_run_holds_the_table_chart_and_recommendation(advised):
    parent = advised["parent"]
    assert parent.info.status == "FINISHED"
    names = {f.path for f in advised["client"].list_artifacts(parent.info.run_id, "advice")}
    assert names == {"advice/advice.md", "advice/advice.csv", "advice/advice.png"}
    assert parent.data.metrics["candidates_probed"] == len(_table(advised))
    assert parent.data.tags["advise.recommendation"].startswith("python -m xpdist model=cnn")
    assert "recommended" in advised["done"].stdout


def test_every_finished_probe_is_a_child_run_and_rejected_ones_are_recorded(advised):
    rows = _table(advised)
    finished = [r for r in rows if r["status"] == "FINISHED"]
    assert {r["run_id"] for r in finished} == {c.info.run_id for c in advised["children"]}
    for child in advised["children"]:
        assert child.data.metrics["steady_examples_per_sec"] > 0 and child.data.metrics["flops_per_example"] > 0
        assert child.data.params["trainer.epochs"] == "3"
    rejected = [r for r in rows if r["status"] == "REJECTED"]
    assert rejected and all("dataset.per_replica_batch_size" in r["error"] for r in rejected)
    assert all(int(r["replicas"]) * int(r["per_replica_batch"]) > 96 for r in rejected)
    # the search went on after the rejections: a second round at other batch sizes
    assert any(r["per_replica_batch"] != "64" for r in rows)


def test_the_recommended_command_line_trains(advised):
    command = advised["parent"].data.tags["advise.recommendation"].split()
    assert command[:3] == ["python", "-m", "xpdist"]
    done = zygote.run([sys.executable, *command[1:], *TINY], advised["workdir"], xpdist_env(), 300, kind="run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FINISHED" in done.stdout


def test_xpdist_report_reads_the_advisor_as_a_sweep(advised):
    done = zygote.run([sys.executable, "-m", "xpdist.report", "--sweep", advised["parent"].info.run_id,
                       "--tracking-uri", f"sqlite:///{advised['workdir'] / 'mlflow.db'}", "--out", "report"],
                      advised["workdir"], xpdist_env(), 120, kind="run")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (advised["workdir"] / "report" / "report.md").exists()


def test_a_probe_traces_steps_of_an_epoch_of_its_own_and_the_table_shows_where_they_went(tmp_path, migrated_store):
    """budget_s=1: the first candidate's probe alone. Its epochs have 10 steps, so it trains a
    third epoch after its probe_epochs=2 and traces that epoch's steps 2 to 4 (steps 22 to 24):
    the run holds the trace and the split of those steps' time, and the advisor's table shows
    it. Its steady examples/sec is epoch 2's: neither the first (tracing) nor the profiled one."""
    done = advise(tmp_path, migrated_store, "budget_s=1", "probe_timeout_s=240", "probe_epochs=2", *WORDS[:-1],
                  "dataset.num_examples=640", "dataset.per_replica_batch_size=64")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("xpdist").experiment_id])
    (probe,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert probe.data.params["trainer.profile_steps"] == "[22, 24]"
    assert probe.data.params["trainer.epochs"] == "3"
    rates = {m.step: m.value for m in client.get_metric_history(probe.info.run_id, "examples_per_sec")}
    assert sorted(rates) == [1, 2, 3]
    assert probe.data.metrics["steady_examples_per_sec"] == pytest.approx(rates[2])
    assert [a.path for a in client.list_artifacts(probe.info.run_id, "profile")], "the trace is an artifact"
    parts = [probe.data.metrics[k] for k in ("input_wait_fraction", "communication_fraction", "compute_fraction")]
    assert sum(parts) == pytest.approx(1.0, abs=1e-6)
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.advisor") == "true"]
    path = client.download_artifacts(parent.info.run_id, "advice/advice.csv", str(tmp_path))
    with open(path) as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["input_wait_fraction"]) == pytest.approx(parts[0])
    assert "input wait" in done.stdout


def test_sigterm_closes_the_parent_and_the_probe_killed_and_leaves_no_process(tmp_path, migrated_store):
    import psutil

    shutil.copy(migrated_store, tmp_path / "mlflow.db")
    proc = zygote.popen([sys.executable, "-m", "xpdist", "advise", "budget_s=300", *WORDS], tmp_path, xpdist_env(),
                        stderr=subprocess.STDOUT)
    try:
        assert "parent run" in proc.stdout.readline()
        deadline = time.monotonic() + 60
        probes = []
        while time.monotonic() < deadline and not any("xpdist.task" in _cmdline(p) for p in probes):
            time.sleep(0.5)  # until the first probe's task process trains (or imports TensorFlow)
            probes = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.is_running()]
        assert probes, "no probe started"
        proc.terminate()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stdout.read()[-2000:]
    psutil.wait_procs(probes, timeout=30)
    assert not [p for p in probes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("xpdist").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.advisor") == "true"]
    assert parent.info.status == "KILLED"
    assert all(r.info.status in ("KILLED", "FINISHED") for r in runs)
    # the probe that was stopped, if it had made its run, is recorded under the parent
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in runs if r is not parent)


def test_probes_over_their_timeout_are_stopped_recorded_and_the_search_goes_on(tmp_path, migrated_store):
    # 3 s is less than any probe needs, on any CPU: 3 epochs of 5,000 steps (30 s and more on 2
    # cores). TensorFlow's import alone once took longer, but the first probe's task is the
    # standby, which imports it while the advisor starts: on the faster CPUs a probe of a few
    # steps finished in 2.9 s. A budget of 12 s leaves room for a second probe even where
    # stopping the first takes seconds (with 6 s a loaded machine once stopped the first too
    # late for a second); 256 examples make every first-round candidate a probe (none refused),
    # more than 12 s of them.
    done = advise(tmp_path, migrated_store, "budget_s=12", "probe_timeout_s=3", "probe_steps=5000", *WORDS[:-1],
                  "dataset.num_examples=256")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no candidate finished its probe: no recommendation" in done.stdout
    statuses = re.findall(r"^xpdist: advise: \S+: (\w+)$", done.stdout, re.M)
    assert len(statuses) >= 2 and set(statuses) == {"TIMEOUT"}, statuses  # the first timeout did not end the search
    assert "budget spent" in done.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("xpdist").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.advisor") == "true"]
    assert parent.info.status == "FAILED"
    assert all(r.info.status == "KILLED" for r in runs if r is not parent)
    # The budget held: no probe started after budget_s, so probing ended within it plus one probe
    # (a stopped probe takes its timeout and the driver's closing of its run).
    path = client.download_artifacts(parent.info.run_id, "advice/advice.csv", str(tmp_path))
    with open(path) as handle:
        longest = max(float(r["probe_s"]) for r in csv.DictReader(handle))
    assert parent.data.metrics["advise_s"] < 12 + longest + 5
    assert not _processes_in(tmp_path), "a stopped probe left a process behind"


def _cmdline(proc) -> str:
    import psutil

    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # ended meanwhile (a zombie until its parent reaps it)
        return ""


def _processes_in(folder) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        if proc.info["cwd"] == str(folder) and "xpdist" in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A memory cgroup under this process's own, capped at limit_bytes with no swap (v1, or v2
    where its parent delegates the memory controller), for a command (and everything it starts)
    to join; the kernel's OOM killer then SIGKILLs the largest
    process of the group that goes over, as it does to a container at its memory limit. Skips
    where no such group can be made (not root, no memory controller). Removing it at the end
    fails while any process is left in it. Yields the group's directory, for zygote.run's cgroup."""
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    v1 = next((path for ctrl, path in own.items() if "memory" in ctrl.split(",")), None)
    base = Path("/sys/fs/cgroup/memory" + v1) if v1 else Path("/sys/fs/cgroup" + own.get("", "/x").strip())
    files = (("memory.limit_in_bytes", "memory.memsw.limit_in_bytes") if v1 else ("memory.max", "memory.swap.max"))
    group = base / f"xpdist-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as err:
        pytest.skip(f"no memory cgroup can be made under {base}: {err}")
    try:
        if not (group / files[0]).exists():
            pytest.skip(f"{base} has no memory controller")
        (group / files[0]).write_text(str(limit_bytes))
        if (group / files[1]).exists():
            (group / files[1]).write_text(str(limit_bytes if v1 else 0))
        yield group
    finally:
        deadline = time.monotonic() + 30
        while (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = (group / "cgroup.procs").read_text().split()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        while (group / "cgroup.procs").read_text().split():
            time.sleep(0.1)
        group.rmdir()
        assert not left, f"processes left in the memory cgroup: {left}"


# 96x96 images, 16 filters, per-replica batch 512: the peak memory of a memory cgroup holding one
# such command (`python -m xpdist OOM_WORDS trainer.epochs=1`, memory.max_usage_in_bytes, AMD EPYC
# of this machine kind, 2026-12-06): one replica 2.09 GiB, forked from the test's zygote or started;
# two replicas (mirrored, hierarchical) 3.61 GiB forked, 3.78 started. Under 3,200 MiB for the
# advisor and everything it starts, two replicas of 512 (and one of 1,024) are OOM-killed, one
# replica of 512 or 256 is not: about half a GiB of margin either way.
OOM_WORDS = ["model=cnn", "model.filters=[16]", "dataset=synthetic_images", "dataset.image_shape=[96,96,3]",
             "dataset.num_examples=1024", "dataset.per_replica_batch_size=512"]


def test_a_probe_that_runs_out_of_memory_is_recorded_oom_and_the_search_goes_on(tmp_path, migrated_store):
    """A real out-of-memory: the advisor runs in a memory cgroup, and the probes with two replicas
    of 512 (and one of 1,024) go over it. Each is recorded OOM with the task's end, its run is
    closed FAILED, and the next candidates are probed; one of those is recommended."""
    shutil.copy(migrated_store, tmp_path / "mlflow.db")
    # Forked from the test's zygote: the pages it shares with the zygote are counted in the
    # zygote's group, not this one (above: 0.17 GiB less for two replicas).
    with memory_cgroup(3200 * 2**20) as group:
        done = zygote.run([sys.executable, "-m", "xpdist", "advise", "budget_s=600", "probe_epochs=2",
                           "probe_steps=2", "logical_cpus=[2]", *OOM_WORDS], tmp_path, xpdist_env(),
                          timeout=600, kind="run", cgroup=group)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_id: r for r in client.search_runs([client.get_experiment_by_name("xpdist").experiment_id])}
    (parent,) = [r for r in runs.values() if r.data.tags.get("xpdist.advisor") == "true"]
    path = client.download_artifacts(parent.info.run_id, "advice/advice.csv", str(tmp_path))
    with open(path) as handle:
        rows = {r["label"]: r for r in csv.DictReader(handle)}
    oom = [label for label, r in rows.items() if r["status"] == "OOM"]
    assert {"mirrored-hierarchical-2cpu-b512", "mirrored-reduction_to_one_device-2cpu-b512"} <= set(oom), rows
    assert all("SIGKILL" in rows[label]["error"] for label in oom)
    # their runs were made and closed, FAILED, under the parent: none is left RUNNING
    assert {r.info.status for r in runs.values()} <= {"FINISHED", "FAILED"}
    assert all(runs[rows[label]["run_id"]].info.status == "FAILED" for label in oom if rows[label]["run_id"])
    # the search went on past the OOMs: probes after the first finished, in the second round too
    # (the two fastest of the first at 256 and 1,024)
    order = re.findall(r"^xpdist: advise: (\S+): (\w+)", done.stdout, re.M)
    first_oom = [status for _, status in order].index("OOM")
    assert "FINISHED" in [status for _, status in order[first_oom + 1:]], order
    assert any(r["status"] == "FINISHED" and r["per_replica_batch"] == "256" for r in rows.values()), rows
    assert parent.info.status == "FINISHED"
    (best,) = re.findall(r"^xpdist: advise: recommended (\S+):", done.stdout, re.M)
    assert rows[best]["status"] == "FINISHED"
