"""The engine seam: how a job's task processes start, are followed, stop, and end.

Each public module of this package (local.py, localhost.py, tf_config.py, slurm.py, ray.py) is
one `cluster` option and holds its `ENGINE`, an `Engine` subclass; the modules whose names start
with "_" are what those share (_restarts.py: the restart loop of localhost and ray) or hold
(_ray_actors.py, _ray_node.py: the Ray actors of ray.py). The job (driver/jobs/job.py) makes
one engine per job and hands it to `launch`, which starts the tasks with their environment,
follows them to the chief's outcome, stops them on Ctrl-C or SIGTERM, and leaves none behind. Preflight,
`--check`, the sweep (the standby task, a scheduler's jobs) and the system metrics ask the
engine's class or instance; none of them compares the cluster option's name.

Why a package of its own beside driver/processes/: processes/ is the process toolbox every
engine shares (start a task in its own process group, stop it, follow a log, read a task's
outcome, and localhost's multi-process Cluster); an engine is the policy that uses it. Each
option's keys are its dataclass in xpdist/core/clusters/ (the task reads its `place` too, and
core cannot import the driver), registered under the same name. So a new engine is one module
here, one in xpdist/core/clusters/ and `conf/cluster/<name>.yaml`. A user's own engine is
usually a subclass of one of these, named by `cluster._target_` (see `of`); one with keys of
its own registers with `xpdist.core.options.register_engine(name, config, engine)`, whose
engine class this registry imports when it is first asked for.

Example:
    engine = engines.for_job(cfg, plan, job)
    outcome = engines.launch(engine, env)
"""

from __future__ import annotations

import functools
import signal
import subprocess
from typing import ClassVar, Dict, Optional, Type

from xpdist.core import strategies
from xpdist.core.errors import ConfigError
from xpdist.core.plan import Plan
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.protocol.jobdir import JobDir
from xpdist.core.registry import Registry
from xpdist.driver.processes import process
from xpdist.driver.processes.outcome import Outcome, outcome_from


class Engine:
    """One `cluster` option: the job's task processes, from start to outcome. Subclass it, one per module.

    The base class runs one task process here, as the task of the cluster that this
    process's ClusterEnv names; an engine with more tasks overrides start, follow, stop and
    close (see localhost.py).

    Class attributes:
        name: the option's name, the same as its module's.
        multi_process: it runs a cluster of task processes (a multi-process strategy needs one).
        keeps_standby: its tasks on this machine are forked from the standby task, which
            imported TensorFlow while the driver composed the job (driver/processes/standby.py).

    Args:
        cfg: the plain composed config.
        plan: the job's plan.
        job: the job directory.
    """

    name: ClassVar[str] = ""
    multi_process: ClassVar[bool] = True
    keeps_standby: ClassVar[bool] = False

    def __init__(self, cfg, plan: Plan, job: JobDir):
        self.cfg, self.plan, self.job = cfg, plan, job
        self.proc: Optional[subprocess.Popen] = None

    # ---- before any run ------------------------------------------------------------------------

    @classmethod
    def preflight(cls, cfg, needs: strategies.ClusterNeeds) -> None:
        """This engine's checks of the config and its environment. Overrides call super() first.

        Raises:
            ConfigError: naming the key at fault.
        """
        if cls.multi_process and not needs.multi_process:
            clustered = " or ".join(strategies.names_where(lambda other: other.needs.multi_process))
            raise ConfigError("cluster", cfg.cluster.name, f"strategy={cfg.strategy.name} runs in one process",
                              f"Use cluster=local, or strategy={clustered}.")

    @classmethod
    def describe(cls, cfg, plan: Plan) -> str:
        """Where the tasks run, for --check's `tasks:` line."""
        return f"cluster={cfg.cluster.name}: this process, as the task TF_CONFIG names ({plan.num_workers} worker(s))"

    @classmethod
    def restarts_tasks(cls, cfg) -> bool:
        """Whether a task of the job may start again in the same job directory (a cluster
        restart, a requeued job, an orchestrator restarting a host): Model.fit then backs up
        every epoch (Keras' BackupAndRestore) so that the restarted task resumes where it
        stopped. True unless the engine knows better: the backup is one more checkpoint per
        epoch, read from every worker or parameter server."""
        return True

    @classmethod
    def schedules(cls, hydra_launcher) -> bool:
        """Whether this Hydra launcher (hydra.launcher) hands each sweep job to this engine's
        scheduler, which may stop that job alone (a Ctrl-C of the user reaches the sweep)."""
        return False

    # ---- the job -------------------------------------------------------------------------------

    def start(self, env: Dict[str, str]) -> None:
        """Starts the job's task process(es) with env (the driver's environment and the job's)."""
        self.proc = process.start(process.task_command(self.job.root), env)

    def follow(self) -> Outcome:
        """Waits for the tasks to end (restarting them where the engine may); returns the outcome."""
        code = process.exit_code(self.proc)
        return outcome_from(self.job, code, chief=ClusterEnv.from_environ(self.cfg.cluster.name).is_chief)

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Signals the tasks with `first`, and kills what is left after process.GRACE_S."""
        if self.proc is not None:
            process.stop([self.proc], first=first)

    def close(self) -> None:
        """After the end, however it came: no task of the job is left."""
        if self.proc is not None and self.proc.poll() is None:
            process.stop([self.proc])

    def task_pids(self) -> Dict[str, int]:
        """Each live task process on this machine by task name, for per-task system metrics;
        empty where the job is one task process (the machine's figures are its own)."""
        return {}


ENGINES: Registry[Type[Engine]] = Registry("cluster", package=__name__, attribute="ENGINE", half="engine")


def get(name: str) -> Type[Engine]:
    """The engine of cluster=name.

    Raises:
        KeyError: no such engine; the message lists the known ones and the nearest.
    """
    return ENGINES.get(name)


def of(cfg) -> Type[Engine]:
    """The engine of the config's cluster option (cfg.cluster.name), or cluster._target_, the
    user's subclass of it: a YAML in the user's --config-dir that extends an option and names
    its own engine class makes an engine of the user's package, with no file of xpdist edited.

    Raises:
        ConfigError: cluster._target_ cannot be imported or is no subclass of the option's engine.
    """
    engine = get(cfg.cluster.name)
    target = cfg.cluster.get("_target_")
    return _subclass(target, engine) if target else engine


@functools.lru_cache(maxsize=None)
def _subclass(target: str, engine: Type[Engine]) -> Type[Engine]:
    from hydra.utils import get_class

    fix = (f"Give module.Class of a subclass of {engine.__module__}.{engine.__name__}, "
           "with its package installed or on PYTHONPATH.")
    try:
        cls = get_class(target)
    except Exception as err:  # Hydra raises ImportError, ValueError or its own InstantiationException
        raise ConfigError("cluster._target_", target, f"it cannot be imported ({str(err).splitlines()[0]})", fix) from None
    if not issubclass(cls, engine):
        raise ConfigError("cluster._target_", target, f"it is not a subclass of the engine of cluster={engine.name}", fix)
    return cls


def for_job(cfg, plan: Plan, job: JobDir) -> Engine:
    """The engine that runs this job's tasks."""
    return of(cfg)(cfg, plan, job)


def schedules(hydra_launcher) -> bool:
    """Whether some engine's scheduler runs each job of this Hydra launcher apart from the sweep."""
    return any(get(name).schedules(hydra_launcher) for name in ENGINES)


def launch(engine: Engine, env: Dict[str, str]) -> Outcome:
    """Runs the job's tasks to their outcome.

    SIGINT and SIGTERM stop the tasks (SIGINT first, so a task may save) and are re-raised.

    Raises:
        process.Interrupted: after the tasks are stopped.
    """
    try:
        with process.signals_raise():
            engine.start(env)
            return engine.follow()
    except process.Interrupted:
        engine.stop(signal.SIGINT)
        raise
    finally:
        engine.close()
        engine.job.remove_ended_scratch()  # a task killed outright could not remove its own
