"""cluster=ray on real Ray processes: a private Ray (cluster.address=local) and one Ray head
for the module (`ray start --head`), both on this machine.

What is checked is what a user sees: the MLflow run read back, the weights of the model the
chief's node sent back, the exit code and the one line of a refusal, and that nothing of the
job is left in Ray (placement groups REMOVED, no actor process, no task process).
Where Ray is not installed or cannot start, the tests that need it skip with the reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import psutil
import pytest

from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver.engines._ray_actors import job_key

from tests import zygote
from tests.helpers import LOG_MODEL, TINY, Xpdist, xpdist_env
from tests.integration.test_cluster import epochs_logged, finish, only_run, start, weights

# 2 workers x 5 examples and one device x 10 examples train the same steps (the same model
# and seed: their final weights agree within 1e-5, as test_training's equivalence runs check
# on cluster=localhost).
SAME_STEPS = ["trainer=ctl", "model=mlp", "model.hidden_units=[8]", "dataset.num_features=4", "dataset.noise=0.5",
              "seed=7", LOG_MODEL]
HAVE_RAY = importlib.util.find_spec("ray") is not None
# For the tests' own `ray start --block` nodes: stopped by SIGTERM to their process group, a
# node first waits for its raylet to drain (for Ray Serve's proxies), up to 30 s by default;
# with the group's raylet and GCS stopping too, it waited the whole 30 s at every module's
# end. 0 turns the drain off (the docstring of ray._private.node.Node._drain_node_before_shutdown).
STOP_AT_ONCE = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def need_ray() -> None:
    if not HAVE_RAY:
        pytest.skip("Ray is not installed (pip install 'xpdist[ray]')")


@pytest.fixture(scope="module")
def head():
    """host:port of a one-node Ray cluster started for this module (`ray start --head --block`,
    stopped by SIGTERM, which ends every process it started)."""
    need_ray()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="xr", dir="/tmp")  # Ray's socket paths must stay short
    log = open(Path(temp) / "head.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                             f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=4",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=xpdist_env(STOP_AT_ONCE))
    address = f"127.0.0.1:{port}"
    try:
        if not _answers(address, proc, timeout=90):
            pytest.skip(f"a Ray head could not start here: {(Path(temp) / 'head.log').read_text()[-400:]}")
        yield address
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _answers(address: str, proc: subprocess.Popen, timeout: float) -> bool:
    """Whether the head came up: a driver connects and sees its CPUs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _ray_query(address, "ray.cluster_resources().get('CPU', 0)") == 4:
            return True
        time.sleep(1)
    return False


def _ray_query(address: str, expression: str, netns=None):
    """An expression evaluated by a driver connected to the head (a process of its own: this
    one must not become a Ray driver; in netns, that host's namespace), its value read back as
    JSON; None if it failed."""
    code = ("import json, logging, ray\n"
            f"ray.init(address={address!r}, logging_level=logging.ERROR)\n"
            f"print(json.dumps({expression}))\n")
    argv = [sys.executable, "-c", code]
    done = subprocess.run(netns.exec_argv(argv) if netns else argv, capture_output=True, text=True, timeout=120,
                          env=xpdist_env({"RAY_AUTH_MODE": "token"}))
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None


def placement_groups(address: str, netns=None) -> Dict[str, str]:
    """Each placement group the head has known, and its state."""
    return _ray_query(address, "{k: v['state'] for k, v in ray.util.placement_group_table().items()}", netns)


def assert_nothing_left(job: Path, address: str = None, driver_pid: int = None, netns=None,
                        dirs: bool = True) -> None:
    """Nothing of the job is left: no task process, no task directory on a node (unless not dirs:
    a node that died could not remove its own); with address, every placement group of the Ray
    head REMOVED (Ray kills the actors of a removed group); with driver_pid, no process of that
    driver's private Ray."""
    mine = f"xpdist-ray-{job_key(JobDir(job))}"
    deadline = time.monotonic() + 15
    while True:
        left = []
        for p in psutil.process_iter(["cmdline"]):
            line = " ".join(p.info["cmdline"] or [])
            if mine in line or (driver_pid and "session_" in line and f"_{driver_pid}/" in line):
                left.append(f"{p.pid} {line[:80]}")
        found = list(Path(tempfile.gettempdir()).glob(f"{mine}-*")) if dirs else []
        if not left and not found:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: {left} {found}")
        time.sleep(0.5)
    if address:
        states = placement_groups(address, netns)
        assert states and set(states.values()) == {"REMOVED"}, states


def remove_dead_nodes_dirs(job: Path) -> None:
    """The directories a killed node left (as its machine's reboot would): none runs now."""
    for path in Path(tempfile.gettempdir()).glob(f"xpdist-ray-{job_key(JobDir(job))}-*"):
        shutil.rmtree(path)


# --- bad input: one line, exit 2, no run (no Ray is started) ---------------------------------

@pytest.mark.parametrize("overrides, line", [
    (["strategy=multi_worker_mirrored", "cluster.workers=0"], "cluster.workers=0: a cluster needs at least one worker"),
    (["strategy=multi_worker_mirrored", "cluster.placement=foo"], "cluster.placement=foo: cluster.placement takes one of spread, pack"),
    (["strategy=mirrored"], "cluster=ray: strategy=mirrored runs in one process"),
    (["strategy=parameter_server"], "cluster.ps=0: parameter_server needs at least one parameter server"),
    (["strategy=multi_worker_mirrored", "cluster.address=ray://head:10001"], "cluster.address=ray://head:10001: expected auto, local or host:port"),
    (["strategy=multi_worker_mirrored", "cluster.cpus_per_task=0"], "cluster.cpus_per_task=0.0: a task's bundle needs CPUs above 0"),
    (["strategy=multi_worker_mirrored", "cluster.min_workers=0"], "cluster.min_workers=0: must be 1 or more"),
    (["strategy=multi_worker_mirrored", "cluster.min_workers=3", "cluster.max_restarts=1"],
     "cluster.min_workers=3: above cluster.workers=2. Use a number from 1 to 2."),
    (["strategy=multi_worker_mirrored", "cluster.min_workers=1"],
     "cluster.min_workers=1: going on with the workers left is a restart, and cluster.max_restarts=0 allows none"),
    (["strategy=parameter_server", "cluster.ps=1", "cluster.min_workers=1", "cluster.max_restarts=1"],
     "cluster.min_workers=1: strategy=parameter_server's coordinator goes on without a lost worker already"),
])
def test_bad_input_is_one_line_and_no_run(xpdist: Xpdist, overrides, line):
    if any(key in str(overrides) for key in ("ray://", "cpus_per_task", "min_workers")):
        need_ray()  # checked after Ray's presence
    done = xpdist.run("cluster=ray", "cluster.address=local", *overrides, fork="check")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [out for out in done.stderr.splitlines() if out.startswith("xpdist: error:")]
    assert len(errors) == 1 and line in errors[0], done.stderr
    assert xpdist.runs() == []


def test_address_auto_without_a_cluster_is_one_line(xpdist: Xpdist):
    need_ray()
    if os.environ.get("RAY_ADDRESS") or Path("/tmp/ray/ray_current_cluster").exists():
        pytest.skip("a Ray cluster runs on this machine: address=auto would find it")
    done = xpdist.run("cluster=ray", "strategy=multi_worker_mirrored", fork="check")
    assert done.returncode == 2 and "cluster.address=auto: no Ray cluster runs on this machine" in done.stderr


def test_ray_missing_names_the_extra(monkeypatch):
    """Where Ray is not installed, preflight says which extra installs it."""
    from tests.unit.unit_helpers import plain
    from xpdist.core import strategies
    from xpdist.core.errors import ConfigError
    from xpdist.driver.engines import ray as engine

    cfg = plain("strategy=multi_worker_mirrored", "cluster=ray", "cluster.address=local")
    real = importlib.util.find_spec
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        engine.Ray.preflight(cfg, strategies.of(cfg).needs)
    assert str(err.value) == ("cluster=ray: Ray is not installed in this Python. "
                              "Install the extra: pip install 'xpdist[ray]'.")


@pytest.mark.parametrize("address, line", [
    ("ray://head:10001", "hydra.launcher.ray.init.address=ray://head:10001: expected auto, local or host:port"),
    ("auto", "hydra.launcher.ray.init.address=auto: no Ray cluster runs on this machine"),
])
def test_sweep_bad_address_is_one_line_and_no_run(xpdist: Xpdist, address, line):
    """hydra/launcher=ray checks its address before the sweep's parent run exists."""
    need_ray()
    if address == "auto" and (os.environ.get("RAY_ADDRESS") or Path("/tmp/ray/ray_current_cluster").exists()):
        pytest.skip("a Ray cluster runs on this machine: address=auto would find it")
    done = xpdist.run("hydra/launcher=ray", f"hydra.launcher.ray.init.address={address}", "seed=1,2", multirun=True,
                      fork="check")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [out for out in done.stderr.splitlines() if out.startswith("xpdist: error:")]
    assert len(errors) == 1 and line in errors[0], done.stderr
    assert xpdist.runs() == []


def test_ray_launcher_missing_names_the_extra(monkeypatch):
    """hydra/launcher=ray where the ray extra is not installed: one line before any run."""
    from tests.helpers import compose
    from xpdist.core.errors import ConfigError
    from xpdist.driver.sweeps import ray_launcher

    cfg = compose(["hydra/launcher=ray"])
    real = importlib.util.find_spec
    monkeypatch.setattr(ray_launcher.importlib.util, "find_spec",
                        lambda name, *a: None if name == "hydra_plugins.hydra_ray_launcher" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        ray_launcher.preflight(cfg)
    assert str(err.value) == ("hydra/launcher=ray: hydra_plugins.hydra_ray_launcher not installed in this Python. "
                              "Install the extra: pip install 'xpdist[ray]'.")


def test_without_the_ray_extra_hydras_plugin_scan_is_quiet(tmp_path):
    """Without the ray extra (its modules made unimportable here), a command prints no warning
    of Hydra's plugin scan about xpdist's Ray launcher, and hydra/launcher=ray is refused in
    one line."""
    blocked = ("import runpy, sys\n"
               "sys.modules['hydra_plugins.hydra_ray_launcher'] = sys.modules['ray'] = None\n"
               "sys.argv = ['xpdist'] + sys.argv[1:]\n"
               "runpy.run_module('xpdist', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-c", blocked, "-m", "hydra/launcher=ray", "seed=1,2"], cwd=tmp_path,
                          env=xpdist_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "xpdist: error: hydra/launcher=ray: hydra_plugins.hydra_ray_launcher and ray not installed in this Python. "
        "Install the extra: pip install 'xpdist[ray]'."], done.stderr


# --- training on Ray ------------------------------------------------------------------------

def assert_one_devices_weights(xpdist: Xpdist, job: Path, single: Path) -> None:
    """The run in job ended with the weights one_device trains on the same steps (within 1e-5)."""
    done = xpdist.run("strategy=one_device", *SAME_STEPS, "dataset.per_replica_batch_size=10",
                      f"hydra.run.dir={single}", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = weights(job / "model.keras"), weights(single / "model.keras")
    assert a.keys() == b.keys() and a
    for name in a:
        assert abs(a[name] - b[name]).max() < 1e-5, name


@pytest.mark.ray
@pytest.mark.slow
def test_multi_worker_mirrored_on_a_private_ray_matches_one_device(xpdist: Xpdist, tmp_path):
    """address=local: the laptop case. Ray starts for the run and is gone after it."""
    need_ray()
    job = tmp_path / "ray"
    proc = start(xpdist, job, "strategy=multi_worker_mirrored", "cluster=ray", "cluster.address=local",
                 "cluster.workers=2", "cluster.placement=spread", "communication=ring",
                 "dataset.per_replica_batch_size=5", *SAME_STEPS)
    out = finish(proc, timeout=400)
    if "Ray could not be reached" in out:
        pytest.skip(f"a private Ray could not start here: {out[-300:]}")
    assert proc.returncode == 0, out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert (params["cluster"], params["cluster.address"], params["cluster.placement"]) == ("ray", "local", "spread")
    assert params["num_replicas"] == "2"
    assert epochs_logged(xpdist, run) == [1, 2]
    logs = {p.name: p.read_text() for p in (job / "logs").iterdir()}
    assert {"worker-0.log", "worker-1.log"} <= logs.keys() and "start worker:1 on Ray" in logs["worker-1.log"]
    assert "[worker:0] --- xpdist: start worker:0 on Ray" in out, "the chief's log follows on the terminal"
    assert_nothing_left(job, driver_pid=proc.pid)
    assert_one_devices_weights(xpdist, job, tmp_path / "single")


@pytest.mark.ray
@pytest.mark.slow
def test_parameter_server_on_a_ray_cluster(xpdist: Xpdist, head, tmp_path):
    job = tmp_path / "ps"
    done = xpdist.run("strategy=parameter_server", "cluster=ray", f"cluster.address={head}", "cluster.workers=2",
                      "cluster.ps=1", "cluster.placement=pack", f"hydra.run.dir={job}", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    run = only_run(xpdist)
    assert run.info.status == "FINISHED"
    assert (run.data.params["cluster.ps"], run.data.params["cluster.placement"]) == ("1", "pack")
    assert epochs_logged(xpdist, run) == [1, 2]
    assert {p.name for p in (job / "logs").iterdir()} >= {"chief-0.log", "worker-0.log", "worker-1.log", "ps-0.log"}
    assert (job / "result.json").exists(), "the chief's result came back from its node"
    assert_nothing_left(job, head)


@pytest.mark.ray
@pytest.mark.slow
def test_optuna_trials_run_as_ray_tasks(xpdist: Xpdist, head):
    """hydra/sweeper=optuna through hydra/launcher=ray: two trials at a time, each a Ray task;
    every trial told COMPLETE with its run's loss, every run a FINISHED child of the study's parent."""
    import optuna
    from optuna.trial import TrialState

    done = xpdist.run("hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                      "hydra.sweeper.study_name=on_ray", "hydra.sweeper.params.optimizer.learning_rate=interval(1e-3, 1e-1)",
                      "hydra/launcher=ray", f"hydra.launcher.ray.init.address={head}", multirun=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = optuna.load_study(study_name="on_ray", storage=f"sqlite:///{xpdist.workdir / 'optuna.db'}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    runs = xpdist.runs()
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    trials = {r.info.run_id: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert parent.info.status == "FINISHED" and len(trials) == 2
    for trial in study.trials:
        run = trials[trial.user_attrs["mlflow_run_id"]]
        assert run.info.status == "FINISHED" and math.isclose(run.data.metrics["loss"], trial.value, rel_tol=1e-6)
    job_ids = {(d / ".hydra" / "hydra.yaml").read_text().split("id: ", 1)[1].split()[0]
               for d in next((xpdist.workdir / "multirun").glob("*/*")).iterdir() if (d / ".hydra").is_dir()}
    assert job_ids == {"job_id_for_0", "job_id_for_1"}, "the launcher's names for jobs run as Ray tasks"


@pytest.mark.ray
@pytest.mark.slow
def test_sweep_ctrl_c_cancels_every_job(xpdist: Xpdist, head, tmp_path):
    """Ctrl-C of a hydra/launcher=ray sweep with two jobs training: each job, cancelled by Ray,
    stops its task and closes its run KILLED; the parent ends KILLED; no task process is left."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "xpdist", "-m", *TINY, "strategy=one_device", "seed=1,2", "trainer.epochs=1000",
           "hydra/launcher=ray", f"hydra.launcher.ray.init.address={head}", f"hydra.sweep.dir={sweep}"]
    proc = zygote.popen(cmd, xpdist.workdir, xpdist_env(), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not all((sweep / job / "metrics.jsonl").is_file() for job in ("0", "1")):  # both jobs trained an epoch
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the jobs never trained:\n{finish(proc)}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out = finish(proc, timeout=60)
    assert proc.returncode == 130, out
    runs = xpdist.runs()
    assert len(runs) == 3 and {r.info.status for r in runs} == {"KILLED"}, [(r.info.run_name, r.info.status) for r in runs]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags.get("xpdist.error") for r in children} == {"interrupted by SIGINT"}, "each job closed its own run"
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(sweep) in " ".join(p.info["cmdline"] or [])]
    assert left == [], f"task processes left: {left}"


@pytest.mark.ray
@pytest.mark.slow
def test_ctrl_c_leaves_no_actor_placement_group_or_running_run(xpdist: Xpdist, head, tmp_path):
    # About 35 s here: two TensorFlow imports on 2 cores before the first epoch comes back.
    job = tmp_path / "job"
    proc = start(xpdist, job, "strategy=multi_worker_mirrored", "cluster=ray", f"cluster.address={head}",
                 "trainer=ctl", "dataset.num_examples=1000", "trainer.epochs=40")
    deadline = time.monotonic() + 300
    while not (job / "metrics.jsonl").exists() or not (job / "metrics.jsonl").read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:  # an epoch's metrics came back
            pytest.fail(f"no epoch came back from the chief's node:\n{finish(proc)}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out = finish(proc, timeout=120)
    assert proc.returncode == 130, out
    run = only_run(xpdist)
    assert run.info.status == "KILLED", run.info.status
    assert_nothing_left(job, head)



# --- two nodes: a Ray head and a worker node in network namespaces ---------------------------

RAY_PORT = 6379  # each namespace has its own ports


def _start_node(host, args, env, hidden: Path = None) -> subprocess.Popen:
    """`ray start --block` in host's namespace; with hidden, in a mount namespace of its own
    where that directory is an empty tmpfs (the node cannot see the driver's job directories)."""
    temp = tempfile.mkdtemp(prefix="xn", dir="/tmp")  # Ray's socket paths must stay short
    start = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--num-cpus=2",
             "--disable-usage-stats", f"--node-ip-address={host.address}", f"--temp-dir={temp}", *args]
    if hidden is not None:
        script = f"mount --make-rprivate / && mount -t tmpfs xpdist-hidden {hidden} && exec {' '.join(start)}"
        start = ["unshare", "--mount", "sh", "-c", script]
    log = open(Path(temp) / "node.log", "w")
    proc = subprocess.Popen(host.exec_argv(start), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.temp = temp
    return proc


def _stop_node(proc: subprocess.Popen) -> None:
    """SIGTERM to its process group (no drain: STOP_AT_ONCE), SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class TwoNodes:
    def __init__(self, head, worker, address: str, env: dict, hidden: Path):
        self.head, self.worker, self.address, self.env, self.hidden = head, worker, address, env, hidden
        self.nodes: List[subprocess.Popen] = []
        self.worker_node: subprocess.Popen = None

    def start_worker(self, give_up=pytest.skip) -> None:
        """Starts the worker node and waits until the head counts two live nodes (or gives up)."""
        self.worker_node = _start_node(self.worker, [f"--address={self.address}"], self.env, hidden=self.hidden)
        self.nodes.append(self.worker_node)
        live = (self.nodes[0], self.worker_node)  # the head, and this worker node
        deadline = time.monotonic() + 120
        while _ray_query(self.address, "len([n for n in ray.nodes() if n['Alive']])", self.head) != 2:
            if time.monotonic() > deadline or any(n.poll() is not None for n in live):
                logs = " | ".join(Path(n.temp, "node.log").read_text()[-300:] for n in live)
                give_up(f"a two-node Ray cluster could not start here: {logs}")
            time.sleep(1)


@pytest.fixture(scope="module")
def two_nodes(hosts, tmp_path_factory):
    """A Ray head (2 CPUs) in one namespace and a worker node (2 CPUs) in another, whose view
    of the file system lacks pytest's base temp directory, where every job directory lives."""
    need_ray()
    head, worker = hosts[0], hosts[1]
    # RAY_AUTH_MODE: both nodes and the driver read ~/.ray/auth_token
    env = xpdist_env({"RAY_AUTH_MODE": "token", **STOP_AT_ONCE})
    cluster = TwoNodes(head, worker, f"{head.address}:{RAY_PORT}", env, tmp_path_factory.getbasetemp())
    cluster.nodes.append(_start_node(head, ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"], env))
    try:
        cluster.start_worker()
        # The mount namespace works: a Ray task on the worker node cannot see the job directories.
        sees = "ray.get(ray.remote(lambda p: __import__('os').listdir(p)).options(resources={{'node:{}': 0.01}}).remote({!r}))"
        seen = tmp_path_factory.mktemp("seen")  # something to see where the directory is not hidden
        base = str(tmp_path_factory.getbasetemp())
        assert _ray_query(cluster.address, sees.format(worker.address, base), head) == []
        assert seen.name in _ray_query(cluster.address, sees.format(head.address, base), head)
        yield cluster
    finally:
        for node in reversed(cluster.nodes):
            _stop_node(node)


def run_on_head(cluster: TwoNodes, xpdist: Xpdist, *overrides: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """`python -m xpdist` on the head's node (the driver must run on a node of its cluster)."""
    argv = [sys.executable, "-m", "xpdist", *TINY, *overrides, "cluster=ray", f"cluster.address={cluster.address}"]
    return subprocess.run(cluster.head.exec_argv(argv), cwd=xpdist.workdir, env=cluster.env, capture_output=True,
                          text=True, timeout=timeout)


def hosts_in(job: Path) -> set:
    """The hosts of the TF_CONFIG each task was started with."""
    found = set()
    for log in (job / "logs").glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "TF_CONFIG" in line:
                spec = json.loads(line.split("TF_CONFIG ", 1)[1])["cluster"]
                found |= {address.rsplit(":", 1)[0] for addresses in spec.values() for address in addresses}
    return found


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_multi_worker_mirrored_one_task_per_node_matches_one_device(xpdist: Xpdist, two_nodes, tmp_path):
    """Also cluster.checkpoint_dir: a directory both nodes see (outside the hidden one), as NFS
    would be: the chief's checkpoints are written there, and come back to the job directory."""
    # Over 60 s when it is the module's first two-node test: it pays for starting both Ray
    # nodes (about 25 s), which the next ones share; then a Ray run and a one_device run.
    job = tmp_path / "ray"
    shared = Path(tempfile.mkdtemp(prefix="xpdist-shared-"))
    try:
        done = run_on_head(two_nodes, xpdist, "strategy=multi_worker_mirrored", "cluster.workers=2",
                           "cluster.placement=spread", "communication=ring", "dataset.per_replica_batch_size=5",
                           f"cluster.checkpoint_dir={shared}", *SAME_STEPS, f"hydra.run.dir={job}")
        assert done.returncode == 0, done.stdout + done.stderr
        kept = {p.name for p in shared.glob(f"ray-{job_key(JobDir(job))}/checkpoints/ckpt-2.*")}
    finally:
        shutil.rmtree(shared)
    assert kept == {"ckpt-2.index", "ckpt-2.data-00000-of-00001"}, kept
    assert (job / "checkpoints" / "ckpt-2.index").is_file(), "the checkpoints came back from the shared directory"
    assert hosts_in(job) == {two_nodes.head.address, two_nodes.worker.address}, "one task on each node"
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and epochs_logged(xpdist, run) == [1, 2]
    assert_one_devices_weights(xpdist, job, tmp_path / "single")
    assert_nothing_left(job, two_nodes.address, netns=two_nodes.head)


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_parameter_server(xpdist: Xpdist, two_nodes, tmp_path):
    job = tmp_path / "ps"
    done = run_on_head(two_nodes, xpdist, "strategy=parameter_server", "cluster.workers=2", "cluster.ps=1",
                       f"hydra.run.dir={job}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts_in(job) == {two_nodes.head.address, two_nodes.worker.address}
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and epochs_logged(xpdist, run) == [1, 2]
    assert {p.name for p in (job / "logs").iterdir()} >= {"chief-0.log", "worker-0.log", "worker-1.log", "ps-0.log"}
    assert_nothing_left(job, two_nodes.address, netns=two_nodes.head)


# One option of the sweep below per job: a strategy and, for one, a cluster=ray training.
SWEEP_OPTIONS = {
    "one_device": "defaults:\n  - override /strategy: one_device\n",
    "mirrored": "defaults:\n  - override /strategy: mirrored\n",
    "ray_mwms": "defaults:\n  - override /strategy: multi_worker_mirrored\n  - override /cluster: ray\n"
                "cluster:\n  workers: 2\n",
}


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_sweep_across_strategies(xpdist: Xpdist, two_nodes, tracking, tmp_path):
    """hydra/launcher=ray: three jobs as Ray tasks spread over both nodes, one of them a cluster=ray
    training whose actors share the cluster, recorded through the MLflow server. A job that ran
    on the worker node made its directory there (hidden from this view) and found the parent
    run without the sweep directory."""
    options = tmp_path / "conf" / "xp"
    options.mkdir(parents=True)
    for name, text in SWEEP_OPTIONS.items():
        (options / f"{name}.yaml").write_text("# @package _global_\n" + text)
    sweep, experiment = tmp_path / "sweep", f"ray-sweep-{tmp_path.name}"
    argv = [sys.executable, "-m", "xpdist", "-m", f"--config-dir={tmp_path / 'conf'}", *TINY,
            "+xp=one_device,mirrored,ray_mwms", "hydra/launcher=ray",
            f"hydra.launcher.ray.init.address={two_nodes.address}",
            "hydra.launcher.ray.remote.scheduling_strategy=SPREAD", f"hydra.sweep.dir={sweep}",
            f"tracking.uri={tracking.uri}", f"tracking.experiment={experiment}"]
    done = subprocess.run(two_nodes.head.exec_argv(argv), cwd=xpdist.workdir, env=two_nodes.env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "will be rejected" not in done.stderr, "the cluster=ray job's address=auto is the sweep's cluster"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and len(runs) == 4
    assert sorted(r.data.params["strategy"] for r in children) == ["mirrored", "multi_worker_mirrored", "one_device"]
    assert all(r.info.status == "FINISHED" for r in children), [r.data.tags.get("xpdist.error") for r in children]
    (trained_on_ray,) = [r for r in children if r.data.params["cluster"] == "ray"]
    assert trained_on_ray.data.params["num_replicas"] == "2"
    here = {p.name for p in sweep.iterdir() if p.name.isdigit()}
    assert here and here != {"0", "1", "2"}, f"job directories on the head's node: {here}"
    assert_nothing_left(sweep, two_nodes.address, netns=two_nodes.head, dirs=False)


def start_on_head(cluster: TwoNodes, xpdist: Xpdist, job: Path, *overrides: str) -> subprocess.Popen:
    """A long multi_worker_mirrored run's driver on the head's node, started; returns once an
    epoch's metrics have come back from the chief's node."""
    argv = [sys.executable, "-m", "xpdist", *TINY, "strategy=multi_worker_mirrored", "cluster=ray",
            f"cluster.address={cluster.address}", "trainer=ctl", "dataset.num_examples=1000", "trainer.epochs=40",
            *overrides, f"hydra.run.dir={job}"]
    proc = subprocess.Popen(cluster.head.exec_argv(argv), cwd=xpdist.workdir, env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (job / "metrics.jsonl").exists() or not (job / "metrics.jsonl").read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no epoch came back from the chief's node:\n{finish(proc)}")
        time.sleep(0.2)
    return proc


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_lost_node_restarts_on_the_node_left(xpdist: Xpdist, two_nodes, tmp_path):
    """cluster.max_restarts=1: Ray places the lost node's bundle on the head, every task starts
    again, and training finishes with every epoch logged once. The worker node is started
    again after, for the next test (about 20 s of this test's time).

    About 125 s here: 12 epochs, a lost node noticed, the tasks placed again once Ray has
    marked the node dead, every TensorFlow import paid twice, and the node started again.
    """
    job = tmp_path / "job"
    proc = start_on_head(two_nodes, xpdist, job, "cluster.max_restarts=1", "trainer.epochs=12")
    os.killpg(two_nodes.worker_node.pid, signal.SIGKILL)
    out = finish(proc, timeout=400)
    assert proc.returncode == 0, out
    assert "its Ray actor or node was lost" in out and "restarting every task (1/1)" in out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED" and run.data.tags["xpdist.restarts"] == "1"
    assert epochs_logged(xpdist, run) == list(range(1, 13))
    nothing_left_and_the_worker_node_back(job, two_nodes)


def lose_worker_node_after_a_checkpoint(cluster: TwoNodes, xpdist: Xpdist, job: Path, shared: Path,
                                        *overrides: str) -> subprocess.Popen:
    """A run of two workers, one task a node (a node's 2 CPUs hold one task of 2: the lost
    worker cannot be placed again on the head), whose worker node is SIGKILLed once the
    chief has saved a checkpoint on the shared directory (as NFS would be: the chief may be
    the task lost). Returns the driver, still running."""
    proc = start_on_head(cluster, xpdist, job, "cluster.workers=2", "cluster.cpus_per_task=2",
                         "cluster.placement=spread", "cluster.max_restarts=1", "cluster.start_timeout_s=60",
                         "trainer.epochs=8", f"cluster.checkpoint_dir={shared}", *overrides)
    index = shared / f"{job.name}-{job_key(JobDir(job))}" / "checkpoints" / "checkpoint"
    deadline = time.monotonic() + 120
    while not index.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no checkpoint was saved:\n{finish(proc)}")
        time.sleep(0.2)
    os.killpg(cluster.worker_node.pid, signal.SIGKILL)
    return proc


def run_losing_the_worker_node(cluster: TwoNodes, xpdist: Xpdist, job: Path, *overrides: str):
    """lose_worker_node_after_a_checkpoint with a shared checkpoint directory made for it and
    removed after; returns the driver and its output, once it ended."""
    shared = Path(tempfile.mkdtemp(prefix="xpdist-shared-"))
    try:
        proc = lose_worker_node_after_a_checkpoint(cluster, xpdist, job, shared, *overrides)
        return proc, finish(proc, timeout=400)
    finally:
        shutil.rmtree(shared)


def nothing_left_and_the_worker_node_back(job: Path, cluster: TwoNodes) -> None:
    """After a test that lost the worker node: nothing of the job is left, and the node is back
    for the next test."""
    assert_nothing_left(job, cluster.address, netns=cluster.head, dirs=False)
    remove_dead_nodes_dirs(job)
    cluster.start_worker(give_up=pytest.fail)


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_lost_node_goes_on_with_the_worker_left(xpdist: Xpdist, two_nodes, tmp_path):
    """cluster.min_workers=1: the job goes on with one worker in a placement group of one, the
    global batch kept, and ends FINISHED as one run: every epoch logged once, the change
    tagged, num_replicas 2 up to the checkpoint's epoch and 1 after. About 2 min here."""
    job = tmp_path / "job"
    proc, out = run_losing_the_worker_node(two_nodes, xpdist, job, "cluster.min_workers=1")
    assert proc.returncode == 0, out
    assert "its Ray actor or node was lost" in out and "going on with 1 of 2 workers (cluster.min_workers=1)" in out
    run = only_run(xpdist)
    assert run.info.status == "FINISHED", run.data.tags.get("xpdist.error")
    assert epochs_logged(xpdist, run) == list(range(1, 9))
    resized = run.data.tags["xpdist.resized"]
    at = int(resized.split(":")[0].removeprefix("from epoch ")) - 1
    params = run.data.params
    per, rate = int(params["per_replica_batch_size"]), float(params["learning_rate"])
    assert resized.endswith(f": 2 -> 1 replicas, cluster.workers 2 -> 1, global batch {params['global_batch_size']} "
                            f"kept, per-replica batch {per} -> {2 * per}, learning rate {rate:g} kept"), resized
    assert json.loads(run.data.tags["xpdist.size"])["params"]["cluster.workers"] == "1"
    replicas = xpdist.client().get_metric_history(run.info.run_id, "num_replicas")
    assert sorted((m.step, m.value) for m in replicas) == [(e, 2.0 if e <= at else 1.0) for e in range(1, 9)]
    assert at >= 1, "the checkpoint the worker node was lost after"
    assert run.data.params["num_replicas"] == "2", "the params keep the size the run was created with"
    nothing_left_and_the_worker_node_back(job, two_nodes)


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_lost_node_below_min_workers_ends_as_today(xpdist: Xpdist, two_nodes, tmp_path):
    """cluster.min_workers=2: one worker left is too few, so every task is restarted as without
    the key, and the lost worker finds no node with room before cluster.start_timeout_s: FAILED."""
    job = tmp_path / "job"
    proc, out = run_losing_the_worker_node(two_nodes, xpdist, job, "cluster.min_workers=2")
    assert proc.returncode != 0, out
    assert "restarting every task (1/1)" in out and "going on with" not in out, out
    run = only_run(xpdist)
    assert run.info.status == "FAILED" and "xpdist.resized" not in run.data.tags
    nothing_left_and_the_worker_node_back(job, two_nodes)


@pytest.mark.ray
@pytest.mark.netns
@pytest.mark.slow
def test_two_nodes_lost_node_fails_the_run_in_one_line(xpdist: Xpdist, two_nodes, tmp_path):
    """The worker node's Ray (raylet, its actor, the task with it) SIGKILLed mid-training.

    Last of the module: the worker node is gone after it. About 70 s here (the first epoch
    comes back after two TensorFlow imports; the loss is noticed in about 6 s).
    """
    job = tmp_path / "job"
    proc = start_on_head(two_nodes, xpdist, job)
    lost = time.monotonic()
    os.killpg(two_nodes.worker_node.pid, signal.SIGKILL)
    out = finish(proc, timeout=240)
    noticed_s = time.monotonic() - lost
    assert proc.returncode != 0, out
    errors = [line for line in out.splitlines() if line.strip().startswith("error:")]
    assert len(errors) == 1 and "its Ray actor or node was lost" in errors[0], out
    run = only_run(xpdist)
    assert run.info.status == "FAILED"
    assert noticed_s < 120, f"the lost node was noticed after {noticed_s:.0f} s"
    print(f"lost node: the driver ended {noticed_s:.1f} s after the kill: {errors[0]}")  # seen with -s
    assert_nothing_left(job, two_nodes.address, netns=two_nodes.head, dirs=False)
    remove_dead_nodes_dirs(job)
