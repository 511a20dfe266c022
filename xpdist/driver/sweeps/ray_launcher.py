"""hydra/launcher=ray: a sweep's jobs as Ray tasks on a Ray cluster.

Built on hydra-ray-launcher, the Hydra project's Ray launcher plugin: the launcher class
(hydra_plugins/xpdist_ray) is its RayLauncher, whose launch is this module's. Each job's config,
composed here, goes to a Ray task that runs the job with Hydra's own run_job (the plugin's).
There the job's driver records its run and starts its task process beside it on that node or,
with cluster=ray, its actors in a placement group of their own. What xpdist adds to the plugin:

- hydra.launcher.ray.init.address means what cluster.address means (auto: the cluster this
  machine belongs to; local: a private one-node Ray for the sweep, gone with this process;
  host:port of the head), checked with the rest before the sweep's parent run exists.
- The sweep's parent run reaches each job in its Ray task's environment (SWEEP_ENV), not
  through sweep.json: the node that runs a job need not see the sweep directory. The sweep
  directory is made absolute here, so a job's directory has the same path on whichever node.
- A job that is itself a cluster=ray training asks Ray for no CPU: its driver only waits on its
  actors, which reserve their own bundles (one CPU held by the waiting driver would keep a
  two-worker training from ever being placed on a two-CPU cluster). It gets RAY_ADDRESS, so
  its own cluster.address=auto finds the cluster it runs on.
- Ctrl-C or SIGTERM cancels every job's Ray task: a KeyboardInterrupt in the job, which stops
  its tasks and closes its run KILLED as a Ctrl-C would. What has not ended within
  process.GRACE_S is force-cancelled (its worker killed).
- Each job runs in a worker process of its own (the default ray.remote option max_calls=1):
  no state of one job's driver reaches the next.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.outcome import JobResult, Status, one_line
from xpdist.driver import engines
from xpdist.driver.engines import ray as ray_engine
from xpdist.driver.jobs import job
from xpdist.driver.processes import process

log = logging.getLogger(__name__)

ADDRESS_KEY = "hydra.launcher.ray.init.address"
# What the ray extra installs that this launcher imports.
EXTRA_MODULES = ("hydra_plugins.hydra_ray_launcher", "ray")
# Seconds between two looks for a Ctrl-C while the jobs run.
POLL_S = 0.5
# sweep.json's content, for a job whose node does not see the sweep directory (driver/sweeps/sweep.py's join).
SWEEP_ENV = "XPDIST_SWEEP"


def launches(hydra_launcher) -> bool:
    """Whether hydra.launcher is this launcher (told without importing its plugin)."""
    return hydra_launcher.get("_target_") == ray_engine.SWEEP_LAUNCHER


def preflight(config: DictConfig) -> None:
    """The checks before the sweep's parent run exists: the ray extra installed, the address
    valid, and the cluster reached (this process joins it here, or starts the private one).

    Raises:
        ConfigError: naming the key at fault.
    """
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError("hydra/launcher", "ray", f"{' and '.join(missing)} not installed in this Python",
                          "Install the extra: pip install 'xpdist[ray]'.")
    init = OmegaConf.to_container(config.hydra.launcher.ray.init, resolve=True)
    ray_engine.check_address(ADDRESS_KEY, init.get("address", "auto"))
    _connect(init)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
           sweep_info: Optional[Dict[str, Any]]) -> List[Any]:
    """Runs the jobs as Ray tasks and returns their JobReturns; sweep_info is sweep.json's content.

    The plugin's own launch (hydra_ray_launcher/_core.py) is rewritten here around its job
    submission for what the module docstring lists. _launcher_util is the plugin's internal
    module: its launch_job_on_ray runs Hydra's run_job in a Ray task.
    """
    _connect(OmegaConf.to_container(launcher.ray_cfg.init, resolve=True))  # done already by preflight
    import ray
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals
    from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    remote = OmegaConf.to_container(launcher.ray_cfg.remote, resolve=True)
    env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    if sweep_info:
        env[SWEEP_ENV] = json.dumps(sweep_info)
    log.info(f"Ray Launcher is launching {len(job_overrides)} jobs, sweep output dir: {sweep_dir}")
    refs: List[Any] = []
    # Ctrl-C and SIGTERM are noted while Ray's calls run, and acted on between them: an
    # exception raised by a signal handler inside Ray's compiled wait becomes a SystemError.
    with process.signals_deferred() as received:
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            if received:
                break
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
            with open_dict(job_cfg):
                job_cfg.hydra.sweep.dir = str(sweep_dir)
                job_cfg.hydra.job.id = f"job_id_for_{idx}"  # as the plugin names it: no scheduler's id here
                job_cfg.hydra.job.num = idx
            options = OmegaConf.create(job_options(remote, job_cfg, env))
            refs.append(launch_job_on_ray(launcher.hydra_context, options, job_cfg, launcher.task_function,
                                          Singleton.get_state()))
        pending = list(refs)
        while pending and not received:
            _ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        if received:
            _cancel(refs)
            raise process.Interrupted(received[0])
    return [_returned(ref, overrides) for ref, overrides in zip(refs, job_overrides)]


def _returned(ref, overrides: Sequence[str]):
    """A job's JobReturn; a job whose Ray task died (its worker or node lost) is a FAILED job in
    one line, and the sweep goes on to its table (its run, left open, is closed FAILED there)."""
    import ray
    from hydra.core.utils import JobReturn, JobStatus

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:
        result = JobResult(status=Status.FAILED, overrides=list(overrides),
                           error=f"its Ray task was lost: {one_line(err)}")
        print(f"xpdist: job {' '.join(overrides)}: {result.error}", file=sys.stderr, flush=True)
        return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=result)


def job_options(remote: Dict[str, Any], job_cfg: DictConfig, env: Dict[str, str]) -> Dict[str, Any]:
    """ray.remote's options for one job's task: hydra.launcher.ray.remote, the job's environment
    added to its runtime_env, and no CPU for a job whose tasks are Ray actors of their own."""
    options = copy.deepcopy(remote)
    if issubclass(engines.of(job_cfg), ray_engine.Ray):
        options["num_cpus"] = 0
    runtime_env = options.setdefault("runtime_env", {}) or {}
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env}
    options["runtime_env"] = runtime_env
    return options


def _connect(init: Dict[str, Any]) -> None:
    """This process joins the cluster of init's address (or starts a private one), once a sweep."""
    address = init.get("address", "auto")
    ray_engine.send_token_to(address)
    import ray

    if ray.is_initialized():  # Optuna launches a batch at a time: the cluster joined for the first
        return
    try:
        ray.init(**init)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(ADDRESS_KEY, address, f"Ray could not be reached ({one_line(err)})",
                          "Check `ray status` on that machine.") from None
    # The cluster the jobs run on, for the checks of each job before the sweep (a cluster=ray
    # job's cluster.address=auto means it, as in its Ray task), as in every job's environment.
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address


def _cancel(refs: List[Any]) -> None:
    """Every job's task cancelled: a KeyboardInterrupt in a running job (its Ctrl-C path closes
    its run and stops its tasks), force-cancelled after process.GRACE_S; jobs not started yet
    never start."""
    import ray

    for ref in refs:
        ray.cancel(ref)
    _done, left = ray.wait(refs, num_returns=len(refs), timeout=process.GRACE_S) if refs else ([], [])
    for ref in left:
        ray.cancel(ref, force=True)
