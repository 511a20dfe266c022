"""hydra/launcher=local_parallel: a sweep's jobs, n_jobs at a time, each in a process forked from
the sweep's own.

A job's driver records its run and waits on its task process; what it needs first is what the
sweep's process has already imported (Hydra, xpdist, MLflow) and composed. Hydra's joblib
launcher, which this replaces, ran each job in a loky worker that started Python and imported
all of it again: 4 small jobs on 2 cores took 28.0 CPU-seconds that way against 21.3 run one
after another (docs/performance.md). A forked job starts with all of it, in a process of
its own (nothing of one job's driver reaches the next, as in a fresh process), and gets a
standby task (driver/processes/standby.py) as each job of a sequential sweep does.

A standby's tasks are its driver's children, so one standby cannot serve jobs in other processes:
each job starts its own. Started, each would import TensorFlow again (about 3 CPU-seconds here:
4 jobs of the linear model took 28.9 CPU-seconds against 19.2 in a sequential sweep). So this
process imports TensorFlow first, the standby's way (_tensorflow_for_jobs), and each job, forked
with it imported, forks its standby from itself with nothing left to import. Nothing runs on
TensorFlow here; the driver's rule (it never imports TensorFlow) stands for every command but
this one, whose jobs need it imported somewhere anyway.

What a forked job must not share with the sweep's process, and how it does not:
- MLflow's database connections: SQLAlchemy's pool guard for forks (store.fork_safe_connections).
- The heartbeat thread: paused while the job forks, and made anew in the job (tracking/heartbeat.py).
- The sweep's parent run: the job leaves its closing to the sweep (sweep.leave_to_sweep).
- Signals: each job runs in a process group of its own, so that a terminal's Ctrl-C reaches the
  sweep's process alone, which passes it on to every running job once (a second signal would
  cut a job's closing short), waits for them, then kills what is left.
A job whose process ends without its result (killed, out of memory) is a FAILED job in one line,
and the sweep goes on to its table, as a lost job under hydra/launcher=ray.

No thread of this process may run MLflow's or Python's locks across the fork: the jobs are
forked from the main thread, with the heartbeat paused, and nothing else runs then.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from omegaconf import DictConfig, open_dict

from xpdist.core.errors import ConfigError
from xpdist.core.protocol.outcome import JobResult, Status
from xpdist.driver.jobs import job
from xpdist.driver.processes import process, standby

log = logging.getLogger(__name__)

N_JOBS_KEY = "hydra.launcher.n_jobs"
# Seconds between two looks for a signal while the jobs run.
POLL_S = 0.5


def jobs_at_once(n_jobs: Any) -> int:
    """hydra.launcher.n_jobs as joblib read it: N jobs at once, or -1 one per CPU core, -2 all
    cores but one, and so on.

    Raises:
        ConfigError: for 0 or what is not a whole number.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise ConfigError(N_JOBS_KEY, n_jobs, "jobs at once must be a whole number other than 0",
                          "Use N for N jobs at once, or -1 for one per CPU core.")
    return n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) + 1 + n_jobs)


def preflight(config: DictConfig) -> None:
    """Checked before the sweep's parent run exists: bad input is one line, exit 2."""
    jobs_at_once(config.hydra.launcher.n_jobs)


class _Running:
    """A job forked and not yet collected."""

    def __init__(self, idx: int, overrides: Sequence[str], proc, conn):
        self.idx, self.overrides, self.proc, self.conn = idx, list(overrides), proc, conn
        self.result = None


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[Any]:
    """Runs the jobs, at most n_jobs at a time, and returns their JobReturns in order."""
    from hydra.core.utils import configure_log, filter_overrides, setup_globals

    from xpdist.tracking import heartbeat, store

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    at_once = jobs_at_once(launcher.n_jobs)
    log.info(f"Parallel launcher: {len(job_overrides)} jobs, {at_once} at a time")
    store.fork_safe_connections()
    _tensorflow_for_jobs(launcher.config)
    context = multiprocessing.get_context("fork")
    waiting = list(enumerate(job_overrides, initial_job_idx))
    running: List[_Running] = []
    done: Dict[int, Any] = {}
    with process.signals_deferred() as received:
        while (waiting or running) and not received:
            while waiting and len(running) < at_once and not received:
                idx, overrides = waiting.pop(0)
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                ours, theirs = context.Pipe(duplex=False)
                proc = context.Process(target=_job, args=(launcher, idx, overrides, theirs), daemon=False,
                                       name=f"xpdist-job-{idx}")
                with heartbeat.paused():
                    proc.start()
                theirs.close()
                running.append(_Running(idx, overrides, proc, ours))
            ready = multiprocessing.connection.wait([r.conn for r in running] + [r.proc.sentinel for r in running],
                                                    timeout=POLL_S)
            for r in list(running):
                if r.conn in ready or r.proc.sentinel in ready:
                    r.result = _receive(r)
                    if r.result is not None or not r.proc.is_alive():
                        r.proc.join()
                        done[r.idx] = r.result if r.result is not None else _lost(r)
                        r.conn.close()
                        running.remove(r)
        if received:
            _stop(running, received[0])
            raise process.Interrupted(received[0])
    return [done[idx] for idx in sorted(done)]


def _tensorflow_for_jobs(config: DictConfig) -> None:
    """Imports TensorFlow and the task's modules here, once for every job (see the module
    docstring), where the jobs' tasks are forked from a standby: not under XPDIST_STANDBY=0,
    `verbose` or an engine whose tasks run elsewhere."""
    from xpdist.driver import engines

    try:
        keeps = engines.of(config).keeps_standby
    except ConfigError:  # each job says so in its own line
        return
    if os.environ.get(standby.ENABLE_ENV, "1") == "0" or config.verbose or not keeps:
        return
    # The driver's one import of the task package (pyproject.toml's contracts name it).
    from xpdist.task import preimport

    try:
        preimport.import_for_forks()
    except Exception as err:  # noqa: BLE001  (each job's task imports it again and reports its failure)
        log.warning(f"Parallel launcher: TensorFlow could not be imported once for the jobs ({type(err).__name__}: "
                    f"{err}); each job imports its own")


def _receive(r: _Running):
    """The job's JobReturn, if it has sent it."""
    try:
        return r.conn.recv() if r.conn.poll() else None
    except (EOFError, OSError):
        return None


def _lost(r: _Running):
    """A job whose process ended without its result: FAILED, in one line; the sweep goes on and
    closes its run, left open, FAILED (SweepCallback.on_multirun_end)."""
    from hydra.core.utils import JobReturn, JobStatus

    code = r.proc.exitcode
    how = f"by {signal.Signals(-code).name}" if code is not None and code < 0 else f"with exit code {code}"
    result = JobResult(status=Status.FAILED, overrides=r.overrides,
                       error=f"its process ended {how} before the job's end")
    print(f"xpdist: job {' '.join(r.overrides)}: {result.error}", file=sys.stderr, flush=True)
    return JobReturn(overrides=r.overrides, status=JobStatus.COMPLETED, _return_value=result)


def _stop(running: List[_Running], signum: int) -> None:
    """Passes the signal on to every running job once, so that each stops its tasks and closes
    its run KILLED, as a Ctrl-C does to a job of a sequential sweep; what has not ended within
    twice process.GRACE_S (its tasks' grace, then its own closing) is killed."""
    for r in running:
        if r.proc.is_alive():
            os.kill(r.proc.pid, signum)
    deadline = time.monotonic() + 2 * process.GRACE_S
    for r in running:
        r.proc.join(max(0.0, deadline - time.monotonic()))
        if r.proc.is_alive():
            try:
                os.killpg(r.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # forked a moment ago: not yet in a group of its own
                os.kill(r.proc.pid, signal.SIGKILL)
            r.proc.join()


def _job(launcher, idx: int, overrides: Sequence[str], conn) -> None:
    """In the forked process: runs one job as Hydra's joblib launcher did (its execute_job), sends
    back its JobReturn, and exits without the interpreter's teardown, as `python -m xpdist` does
    (main._exit_now): exit code 0 once the result is sent, 130 when the job was interrupted."""
    from xpdist.driver.sweeps import sweep
    from xpdist.tracking import heartbeat

    code = 1
    try:
        os.setpgid(0, 0)  # the sweep's process passes a Ctrl-C on (see the module docstring)
        heartbeat.forked()
        sweep.leave_to_sweep()
        standby.start_for_job()
        conn.send(_run(launcher, idx, overrides))
        code = 0
    except process.Interrupted:
        code = 130
    except SystemExit as err:  # main's sys.exit(130) after an interrupted job closed its run
        code = err.code if isinstance(err.code, int) else 1
    finally:
        standby.discard()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(launcher, idx: int, overrides: Sequence[str]):
    """The job's JobReturn, made to pickle: a job's own exception may not, its text does."""
    import pickle

    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn, JobStatus, run_job

    config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
    with open_dict(config):
        config.hydra.job.id = f"{config.hydra.job.name}_{idx}"
        config.hydra.job.num = idx
    HydraConfig.instance().set_config(config)
    ret = run_job(hydra_context=launcher.hydra_context, config=config, task_function=launcher.task_function,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    try:
        pickle.dumps(ret)
    except Exception:  # noqa: BLE001
        error = ret._return_value
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED,
                        _return_value=RuntimeError(f"{type(error).__name__}: {error}"))
    return ret
