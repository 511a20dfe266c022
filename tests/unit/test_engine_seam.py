"""The engine seam: every `cluster` option is one engine module, one YAML and one schema entry, and
the rest of xpdist asks the engine instead of comparing the option's name.

A toy engine registered here, and nowhere else, runs real processes through job.run's launch
path: preflight, the run's params and tags, the system metrics and the outcome all come
through the interface.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import pytest
from omegaconf import OmegaConf

from tests.unit.unit_helpers import CONF, plain
from xpdist.core import options, schema
from xpdist.core.clusters import ClusterBase
from xpdist.core.errors import ConfigError
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.protocol.jobdir import JobDir
from xpdist.driver import engines
from xpdist.driver.checks import preflight
from xpdist.driver.jobs import job
from xpdist.driver.processes import process
from xpdist.driver.processes.outcome import Outcome, outcome_from

REPO = Path(__file__).resolve().parents[2]


def test_every_engine_has_its_yaml_and_schema_entry_and_every_option_an_engine():
    registered = set(engines.ENGINES)
    yamls = {path.stem for path in (CONF / "cluster").glob("*.yaml")}
    assert registered == yamls == set(schema.OPTIONS["cluster"])
    for name in registered:
        assert engines.get(name).name == name
        assert issubclass(engines.get(name), engines.Engine)


def test_an_unknown_engine_names_the_known_ones():
    with pytest.raises(KeyError) as err:
        engines.get("localhots")
    assert "Known: local, localhost, ray, slurm, tf_config." in str(err.value)
    assert "Did you mean cluster=localhost?" in str(err.value)


def test_no_module_outside_the_engines_names_an_engine():
    """Preflight, plan, check, sweeps, job, tracking and the task ask the engine or the ClusterEnv."""
    seam = REPO / "xpdist" / "driver" / "engines"
    names = sorted(engines.ENGINES)
    offenders = []
    for path in (REPO / "xpdist").rglob("*.py"):
        if seam in path.parents or path.name == "schema.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(REPO)}: {name}" for name in names
                      if f'== "{name}"' in text or f'!= "{name}"' in text or f'("{name}",' in text]
        offenders += [f"{path.relative_to(REPO)}: {cls}" for cls in ("SlurmLauncher", "BasicLauncher")
                      if f'"{cls}"' in text]
    assert offenders == []


def test_the_task_learns_its_place_from_the_options_schema_entry():
    assert ClusterEnv.from_environ("local", {"TF_CONFIG": "{}", "SLURM_PROCID": "1"}) == ClusterEnv("local")
    slurm = ClusterEnv.from_environ("slurm", {"SLURM_PROCID": "1", "SLURM_NTASKS": "3"})
    assert (slurm.task_name, slurm.num_workers, slurm.srun_started, slurm.is_chief) == ("worker:1", 3, True, False)
    here = ClusterEnv.from_environ("localhost", {})
    assert here.in_cluster and not here.srun_started and here.is_chief


def test_ctrl_c_stops_the_tasks_with_sigint_and_always_closes(tmp_path):
    calls: List[str] = []

    class Interrupted(engines.Engine):
        def start(self, env):
            calls.append("start")

        def follow(self):
            raise process.Interrupted(signal.SIGINT)

        def stop(self, first=signal.SIGTERM):
            calls.append(f"stop {signal.Signals(first).name}")

        def close(self):
            calls.append("close")

    job_dir = JobDir(tmp_path)
    ended = job_dir.scratch / f"{socket.gethostname()}-{_ended_pid()}"  # a task killed outright left it
    ended.mkdir(parents=True)
    with pytest.raises(process.Interrupted):
        engines.launch(Interrupted(None, None, job_dir), {})
    assert calls == ["start", "stop SIGINT", "close"]
    assert not job_dir.scratch.exists(), "the folders of the tasks that ended are removed"


def test_a_task_folder_still_in_use_or_of_another_host_is_kept(tmp_path):
    job_dir = JobDir(tmp_path)
    running = job_dir.scratch / f"{socket.gethostname()}-{os.getpid()}"
    elsewhere = job_dir.scratch / f"another-host-{_ended_pid()}"  # a shared job directory's
    ended = job_dir.scratch / f"{socket.gethostname()}-{_ended_pid()}"
    for folder in (running, elsewhere, ended):
        folder.mkdir(parents=True)
    job_dir.remove_ended_scratch()
    assert sorted(job_dir.scratch.iterdir()) == sorted([running, elsewhere])


def _ended_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_hydra_launcher_that_schedules_sweep_jobs_is_an_engines_word():
    assert engines.schedules({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"})
    assert not engines.schedules({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"})


# ---- a toy engine, known to the registry and the schema only --------------------------------------

@dataclass
class ToyCluster(ClusterBase):
    name: str = "toy"
    # Refused by the toy's preflight when above 1.
    helpers: int = 1


# The chief: waits for the run, as a task does, and a moment more (system metrics sample the
# helper meanwhile), then reports FINISHED.
CHIEF = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from xpdist.core.protocol.jobdir import JobDir, TaskResult
    job = JobDir(Path(sys.argv[1]))
    while not job.run_ready.exists():
        time.sleep(0.05)
    time.sleep(1.0)
    TaskResult(status="FINISHED").write(job)
""")


class Toy(engines.Engine):
    """A chief that finishes and a helper that serves until it is stopped, both real processes."""

    name = "toy"
    multi_process = False  # its processes are no TensorFlow cluster: any one-process strategy runs
    started: List[subprocess.Popen] = []

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        super().preflight(cfg, needs)
        if cfg.cluster.helpers > 1:
            raise ConfigError("cluster.helpers", cfg.cluster.helpers, "the toy has one helper", "Use 1.")

    def start(self, env: Dict[str, str]) -> None:
        self.chief = process.start([sys.executable, "-c", CHIEF, str(self.job.root)], env)
        self.helper = process.start([sys.executable, "-c", "import time; time.sleep(60)"], env)
        Toy.started = [self.chief, self.helper]

    def follow(self) -> Outcome:
        return outcome_from(self.job, self.chief.wait())

    def stop(self, first: int = signal.SIGTERM) -> None:
        process.stop([self.chief, self.helper], first=first)

    def close(self) -> None:
        process.stop([self.chief, self.helper], grace_s=1.0)

    def task_pids(self) -> Dict[str, int]:
        return {"toy:0": self.chief.pid, "toy:1": self.helper.pid} if Toy.started else {}


@pytest.fixture
def toy():
    options.register_engine("toy", ToyCluster, engine=Toy)
    schema.register_configs()
    yield
    options.unregister("cluster", "toy")
    Toy.started = []


def toy_config(tmp_path, *overrides: str):
    cfg = plain(f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "tracking.system_metrics_interval_s=0.3",
                "cluster=toy", *overrides)  # composed from its schema, no YAML
    assert OmegaConf.to_container(cfg.cluster) == {"name": "toy", "_target_": None, "helpers": 1}
    return cfg


def test_a_toy_engine_is_checked_by_its_own_preflight(tmp_path, toy):
    cfg = toy_config(tmp_path)
    cfg.cluster.helpers = 2
    with pytest.raises(ConfigError, match=r"^cluster.helpers=2: the toy has one helper"):
        preflight.check(cfg, tmp_path)
    assert preflight.check(toy_config(tmp_path), tmp_path).cluster == "toy"


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
def test_a_toy_engine_runs_a_job_through_job_run(tmp_path, toy):
    from mlflow.tracking import MlflowClient

    ctx = job.JobContext(launch_dir=tmp_path, job_dir=tmp_path / "job", overrides=["cluster=toy"])
    result = job.run(toy_config(tmp_path), ctx)

    assert (result.status, result.error) == ("FINISHED", None)
    assert [proc.poll() is not None for proc in Toy.started] == [True, True]  # close left no task behind
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["cluster"] == "toy"
    assert "system/toy-1/memory_usage_megabytes" in run.data.metrics  # asked through Engine.task_pids


# ---- a subclass of an engine, named by cluster._target_ -----------------------------------

class ObservedLocalhost(engines.get("localhost")):
    """A user's engine: localhost's, that a test can tell apart."""


def test_cluster_target_names_a_subclass_that_runs_in_the_options_place(tmp_path):
    cfg = plain("strategy=multi_worker_mirrored", "cluster=localhost", f"cluster._target_={__name__}.ObservedLocalhost")
    assert engines.of(cfg) is ObservedLocalhost
    assert engines.of(plain("strategy=multi_worker_mirrored", "cluster=localhost")) is engines.get("localhost")
    preflight.check(cfg, tmp_path)  # the option's checks, inherited
    with pytest.raises(ConfigError) as err:
        preflight.check(plain("strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=0",
                              f"cluster._target_={__name__}.ObservedLocalhost"), tmp_path)
    assert err.value.key == "cluster.workers"


@pytest.mark.parametrize("cluster, target, says", [
    ("localhost", "no_such_package.Engine", "it cannot be imported"),
    ("slurm", f"{__name__}.ObservedLocalhost", "it is not a subclass of the engine of cluster=slurm"),
    ("localhost", f"{__name__}.test_cluster_target_names_a_subclass_that_runs_in_the_options_place",
     "cannot be imported"),  # a function, not a class
])
def test_a_cluster_target_that_is_no_subclass_of_the_options_engine_is_one_line(tmp_path, cluster, target, says):
    cfg = plain("strategy=multi_worker_mirrored", f"cluster={cluster}", f"cluster._target_={target}")
    with pytest.raises(ConfigError) as err:
        preflight.check(cfg, tmp_path)
    assert err.value.key == "cluster._target_" and says in str(err.value) and "\n" not in str(err.value), str(err.value)
