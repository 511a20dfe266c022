"""One experiment, driven from the Hydra process: check, record, launch, close.

    preflight (no TensorFlow) -> MLflow run created RUNNING -> job files written
    -> task process(es) train -> run closed FINISHED / FAILED / KILLED -> summary

The run is created and closed here, not in the task, so it is closed even when a task dies
by SIGKILL or runs out of memory.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig

from xpdist.core import data_sources
from xpdist.core.errors import ConfigError
from xpdist.core.plan import Plan, RESOLVED_BY_TASK, resolved_at_run_time
from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.protocol.jobdir import JobDir, JobSpec, RunReady, TaskResult
from xpdist.core.protocol.outcome import JobResult, Status, one_line
from xpdist.core.protocol.resolved import as_data
from xpdist.core.protocol.taskenv import LAUNCHED_AT_ENV
from xpdist.driver import engines
from xpdist.driver.checks import preflight
from xpdist.driver.jobs import requeue, resize, resume
from xpdist.driver.processes import process
from xpdist.tracking import heartbeat, reap, store
from xpdist.tracking.params import rejected_params, run_params
from xpdist.tracking.relay import MetricRelay
from xpdist.tracking.sysmetrics import SystemMetrics


@dataclass
class JobContext:
    """Where a job runs and records: everything Hydra knows that the job needs."""

    launch_dir: Path
    job_dir: Path
    overrides: List[str]
    parent_run_id: Optional[str] = None
    tracking_uri: Optional[str] = None
    job_num: Optional[int] = None
    # Set by a sweep whose jobs are trials of a study (hydra/sweeper=optuna): starts watching the
    # job's epochs, whose pruner may stop it; returns None when this job is no trial. A callable
    # handed down, so that the job knows nothing of the sweeps above it.
    watch_trial: Optional[Callable[[JobDir], Any]] = None


def run(cfg: DictConfig, ctx: JobContext) -> JobResult:
    """Runs one experiment end to end; never raises for a failed training.

    The steps, each its own function below: check and write the job (_prepare; a bad config
    ends here, REJECTED), start the tasks while the MLflow run is created (_run_creator, the
    _Recorder thread), follow them to their outcome and record it (_record), close the run
    (_close; or _close_interrupted, _close_failed). A task of a cluster that is not the chief
    runs its part and records nothing (_run_member).

    Args:
        cfg: the job's config, resolved (core.protocol.resolved.resolve): the one object every step reads.
        ctx: where the job runs and records.

    Raises:
        process.Interrupted: after closing the run as KILLED.
    """
    started, job_started_at = time.monotonic(), time.time()
    process.abort_tasks(False)
    result = JobResult(status=Status.REJECTED, overrides=ctx.overrides)
    uri = ctx.tracking_uri or store.resolve_uri(cfg.tracking.uri, ctx.launch_dir)
    job = JobDir(ctx.job_dir)
    try:
        prepared = _prepare(cfg, ctx, uri, job)
    except ConfigError as err:
        return _rejected(result, cfg, ctx, uri, err)
    plan = prepared.plan
    result.run_name = plan.run_name if ctx.job_num is None else f"{ctx.job_num}-{plan.run_name}"
    result.num_replicas, result.global_batch_size = plan.num_replicas, plan.global_batch_size
    if not prepared.cluster_env.is_chief:
        return _run_member(cfg, plan, job, prepared.cluster_env, result, started)

    # The task starts now and imports TensorFlow while this process creates the MLflow run;
    # it waits for the run before its first training step (JobDir.run_ready).
    engine = engines.for_job(cfg, plan, job)
    recorder = _Recorder(uri, job, _run_creator(cfg, ctx, uri, job, prepared, result.run_name),
                         cfg.tracking, relay_from_end=bool(prepared.reopened), task_pids=engine.task_pids)
    recorder.start()
    # A trial of an Optuna study (hydra/sweeper=optuna): its epochs are reported, a pruner may stop it.
    trial = ctx.watch_trial(job) if ctx.watch_trial else None
    try:
        env = process.task_env({"MLFLOW_TRACKING_URI": uri, "PYTHONUNBUFFERED": "1"})
        if ctx.job_num is not None:  # a standby task started before this job counts from the job's start
            env[LAUNCHED_AT_ENV] = repr(job_started_at)
        outcome = engines.launch(engine, env)
        if not _record(result, recorder, outcome, trial, plan):
            return result  # the run could not be created: nothing was trained
    except process.Interrupted as err:
        _close_interrupted(result, recorder, plan, err, started)
        raise
    except Exception as err:  # a launcher bug must not leave the run RUNNING
        _close_failed(result, recorder, err)
        raise
    _close(result, uri, started)
    return result


@dataclass
class _Prepared:
    """What the checks found: the plan, this process's place in the cluster, and the run it
    continues (tracking.resume, or a requeued SLURM job's), if any."""

    plan: Plan
    cluster_env: ClusterEnv
    resumed: Optional[resume.Resumed] = None
    reopened: Optional[str] = None  # the run id of a requeued SLURM job's run
    resumed_requeue: Optional[resume.Resumed] = None  # how it continues (its size, if it changed)


def _prepare(cfg: DictConfig, ctx: JobContext, uri: str, job: JobDir) -> _Prepared:
    """Checks the config, finds the run it continues, and writes the job directory.

    Raises:
        ConfigError: the config cannot run; nothing is written to the store.
    """
    plan = preflight.check(cfg, ctx.launch_dir)
    preflight.check_tracking_uri(uri)
    prepared = _Prepared(plan, ClusterEnv.from_environ(cfg.cluster.name))
    if cfg.tracking.resume:
        prepared.resumed = resume.prepare(uri, cfg.tracking.resume, cfg, plan,
                                          lambda p: _creation_params(as_data(cfg), p), job)
        prepared.plan = plan = prepared.resumed.plan  # at the run's batch sizes, if its size changed
    elif not ctx.parent_run_id:
        # A SLURM job that SLURM requeued continues its run, at the task count it came back with;
        # its tasks resume from the chief's checkpoints.
        requeued = requeue.prepare(uri, cfg, plan, lambda p: _creation_params(as_data(cfg), p), job,
                                   prepared.cluster_env.is_chief)
        if requeued is not None:
            prepared.plan = plan = requeued.plan
            if prepared.cluster_env.is_chief:
                prepared.resumed_requeue, prepared.reopened = requeued, requeued.run_id
    logged = prepared.resumed.logged_epochs if prepared.resumed else []
    write_job_files(job, JobSpec(as_data(cfg), plan, uri, str(ctx.launch_dir), list(ctx.overrides), logged,
                                 restartable=engines.of(cfg).restarts_tasks(cfg)),
                    keep_metrics=bool(prepared.reopened))
    return prepared


def _rejected(result: JobResult, cfg: DictConfig, ctx: JobContext, uri: str, err: ConfigError) -> JobResult:
    """A config that cannot run: REJECTED, or in a sweep a FAILED child run saying why."""
    result.error = str(err)
    if ctx.parent_run_id:
        result.run_id = _record_rejected(cfg, ctx, uri, str(err))
        result.status = Status.FAILED
    return result


def _run_creator(cfg: DictConfig, ctx: JobContext, uri: str, job: JobDir, prepared: _Prepared,
                 run_name: str) -> Callable[[], str]:
    """The function the _Recorder thread calls to open the job's MLflow run: a new run with
    its params, tags and inputs, or the run it continues, reopened. Inputs are described here,
    before the thread starts."""
    plan = prepared.plan
    tags = {**_tags(plan, ctx), **heartbeat.initial_tags(cfg.tracking.heartbeat_s),
            "xpdist.job_dir": str(job.root.resolve())}
    inputs = data_sources.describe(cfg, plan, ctx.launch_dir)

    def create() -> str:
        reap.announce(reap.close_stale(uri, cfg.tracking.heartbeat_timeout_s))
        if prepared.resumed:
            return resume.reopen(uri, prepared.resumed, tags)
        if prepared.reopened:
            return requeue.reopen(uri, prepared.resumed_requeue)
        run_id = store.create_run(uri, cfg.tracking.experiment, run_name, _creation_params(as_data(cfg), plan),
                                  tags, ctx.parent_run_id)
        store.log_inputs(uri, run_id, inputs)
        return run_id

    return create


def _record(result: JobResult, recorder: "_Recorder", outcome, trial, plan: Plan) -> bool:
    """Records the tasks' outcome in the run: status, metrics, what the task resolved, restarts,
    an early stop, the model and checkpoints. False when the run could not be created (the
    result then says why, REJECTED: nothing was trained)."""
    uri, job = recorder.uri, recorder.job
    try:
        result.run_id = recorder.finish()
    except Exception as err:  # nothing was trained: one line, like a bad config
        result.status = Status.REJECTED
        result.error = str(ConfigError("tracking.uri", uri, f"the MLflow run could not be created "
                                       f"({one_line(err)}); nothing was trained",
                                       "Check that the store is writable and its server healthy."))
        return False
    if trial is not None:
        outcome = trial.settle(outcome, uri, result.run_id)
    result.status, result.error = outcome.status, outcome.error
    result.metrics = recorder.final_metrics()
    _log_resolved(uri, result.run_id, job, plan, result)
    if outcome.restarts:
        store.set_tags(uri, result.run_id, {"xpdist.restarts": str(outcome.restarts)})
    if outcome.resized:  # cluster=ray went on with the workers left (cluster.min_workers)
        resize.record(uri, result.run_id, outcome.resized)
        result.num_replicas = int(outcome.resized[-1].size["params"]["num_replicas"])
    _tag_stopped_early(uri, result.run_id, job)
    _log_outputs(uri, result.run_id, job, recorder.tracking, result.ok)
    return True


def _close(result: JobResult, uri: str, started: float) -> None:
    """Ends the run with the outcome's status, its wall time tagged; a Ctrl-C waits for it."""
    result.wall_time_s = time.monotonic() - started
    with process.signals_deferred():
        heartbeat.let_go(result.run_id)
        store.set_tags(uri, result.run_id, {"xpdist.wall_time_s": f"{result.wall_time_s:.2f}"})
        store.terminate(uri, result.run_id, result.status, result.error)


def _close_interrupted(result: JobResult, recorder: "_Recorder", plan: Plan, err: process.Interrupted,
                       started: float) -> None:
    """Ctrl-C or SIGTERM: the run, if it was created, ends KILLED with what the tasks left
    (outputs, checkpoints); a second Ctrl-C must not leave it RUNNING. The result goes on
    the exception, for a sweep whose jobs a scheduler runs to report and go on."""
    uri, job = recorder.uri, recorder.job
    with process.signals_deferred():
        result.status, result.error = Status.KILLED, f"interrupted by {err}"
        if recorder.finish_quietly():
            result.run_id = recorder.run_id
            _log_outputs_quietly(uri, result.run_id, job)
            with contextlib.suppress(Exception):
                _log_resolved(uri, result.run_id, job, plan, result)
            heartbeat.let_go(result.run_id)
            store.terminate(uri, result.run_id, Status.KILLED, result.error)
    result.wall_time_s = time.monotonic() - started
    err.result = result


def _close_failed(result: JobResult, recorder: "_Recorder", err: Exception) -> None:
    """An error of xpdist's own while following the tasks: the run ends FAILED, not RUNNING."""
    result.status, result.error = Status.FAILED, f"{type(err).__name__}: {err}"
    if recorder.finish_quietly():
        heartbeat.let_go(recorder.run_id)
        store.terminate(recorder.uri, recorder.run_id, Status.FAILED, result.error)


def write_job_files(job: JobDir, spec: JobSpec, keep_metrics: bool = False) -> None:
    """Writes the job directory's spec; a directory that cannot be written is one line.

    Raises:
        ConfigError: naming hydra.run.dir, where the job directory lives.
    """
    try:
        spec.write(job, keep_metrics=keep_metrics)
    except OSError as err:
        raise ConfigError("hydra.run.dir", str(job.root), f"the job directory cannot be written ({err.strerror})",
                          "Free space there or point hydra.run.dir elsewhere.") from None


class _Recorder(threading.Thread):
    """The job's MLflow side, beside the task: creates the run, then relays the task's metrics.

    Creating the run (importing MLflow, opening the store) takes seconds; done here it
    overlaps the task's TensorFlow import instead of delaying the task's start. Its outcome
    is written to JobDir.run_ready, which the task waits for before it trains.
    """

    def __init__(self, uri: str, job: JobDir, create: Callable[[], str], tracking, relay_from_end: bool = False,
                 task_pids: Callable[[], Dict[str, int]] = dict):
        super().__init__(name="xpdist-recorder", daemon=True)
        # Where the run is recorded, for the job's steps that record in it after the tasks end.
        self.uri, self.job, self.tracking = uri, job, tracking
        self._create = create
        self._task_pids = task_pids  # the engine's, for each task's system metrics
        self._heartbeat_s = tracking.heartbeat_s
        self._relay_from_end = relay_from_end  # the lines there were relayed by an earlier start
        self.run_id: Optional[str] = None
        self.error: Optional[BaseException] = None
        self.relay: Optional[MetricRelay] = None
        self.system: Optional[SystemMetrics] = None

    def run(self) -> None:
        try:
            self.run_id = self._create()
            heartbeat.keep_alive(self.uri, self.run_id, self._heartbeat_s)
            store.log_artifacts(self.uri, self.run_id, [self.job.config, self.job.overrides])
            self.relay = MetricRelay(self.uri, self.run_id, self.job.metrics, from_end=self._relay_from_end)
            self.relay.start()
            if self.tracking is not None and self.tracking.system_metrics:
                self.system = SystemMetrics(self.uri, self.run_id, self._task_pids,
                                            self.tracking.system_metrics_interval_s)
                self.system.start()
        except BaseException as err:  # re-raised in the main thread by finish()
            self.error = err
            self._abandon(err)
            return
        try:
            RunReady(run_id=self.run_id).write(self.job)
        except OSError as err:
            self.error = err
            self._abandon(err)

    def _abandon(self, err: BaseException) -> None:
        """Creating the run failed: the run (if made) is closed, the task told to stop."""
        if self.run_id:
            heartbeat.let_go(self.run_id)
            with contextlib.suppress(Exception):
                store.terminate(self.uri, self.run_id, Status.FAILED, f"the run could not be set up: {one_line(err)}")
        with contextlib.suppress(OSError):  # a task started later reads it and stops
            RunReady(error=one_line(err)).write(self.job)
        process.abort_tasks()  # no need to wait for TensorFlow's import to stop them

    def finish(self) -> str:
        """Waits for the run, logs the last metrics; returns the run id (raises what creating it raised)."""
        self.join()
        if self.error is not None:
            raise self.error
        self.relay.stop()
        if self.system is not None:
            self.system.stop()
        return self.run_id

    def finish_quietly(self) -> bool:
        """finish() that never raises; whether the run exists and is open."""
        try:
            self.finish()
        except Exception:
            pass
        return self.run_id is not None and self.error is None

    def final_metrics(self) -> Dict[str, float]:
        """Each epoch metric's last value, and the run's summary figures."""
        latest = self.relay.latest if self.relay else {}
        return {k: v for k, v in latest.items() if not k.startswith("batch_")}


def _creation_params(config: Dict[str, Any], plan: Plan) -> Dict[str, str]:
    """The params a run is created with, from the config as plain data (as_data); those
    TensorFlow decides (strategy=tpu) come later."""
    params = run_params(config, plan)
    if resolved_at_run_time(plan):
        for key in RESOLVED_BY_TASK:
            params.pop(key, None)
    return params


def _tag_stopped_early(uri: str, run_id: str, job: JobDir) -> None:
    """xpdist.stopped_early_at_epoch: a callback (early_stopping) ended training before trainer.epochs."""
    task = TaskResult.read(job)
    if task is not None and task.stopped_early_at_epoch is not None:
        store.set_tags(uri, run_id, {"xpdist.stopped_early_at_epoch": str(task.stopped_early_at_epoch)})


def _log_resolved(uri: str, run_id: str, job: JobDir, plan: Plan, result: JobResult) -> None:
    """strategy=tpu: logs the replica count, global batch and learning rate the task reported.

    MLflow params cannot change once logged, so they are logged once known, from the task's
    resolved.json; a task that died before its strategy existed leaves them out: no guess.
    """
    if not resolved_at_run_time(plan):
        return
    resolved = job.read_resolved()
    if resolved is None:
        return
    store.log_params(uri, run_id, {key: getattr(resolved, key) for key in RESOLVED_BY_TASK})
    result.num_replicas, result.global_batch_size = resolved.num_replicas, resolved.global_batch_size


def _log_outputs(uri: str, run_id: str, job: JobDir, tracking, finished: bool = True) -> None:
    """The trained model (MLflow's format, and model.keras), registered where
    tracking.register_model says, and the checkpoints the chief task left in the job directory.

    Checkpoints are logged whatever the status: a FAILED or KILLED run resumes from them
    (tracking.resume) where its job directory is gone (another node after a requeue).
    """
    if finished:
        store.log_artifacts(uri, run_id, [job.mlflow_model, job.model], "model")
        if tracking.register_model and job.mlflow_model.is_dir():
            store.register_model(uri, run_id, "model", tracking.register_model, tracking.model_alias)
    if job.checkpoints.is_dir() and any(job.checkpoints.iterdir()):
        store.log_artifacts(uri, run_id, [job.checkpoints], "checkpoints")
    if job.profile.is_dir():  # trainer.profile_steps: a trace per task, as TensorBoard opens them
        store.log_artifacts(uri, run_id, [job.profile], "profile")


def _log_outputs_quietly(uri: str, run_id: str, job: JobDir) -> None:
    with contextlib.suppress(Exception):
        _log_outputs(uri, run_id, job, None, finished=False)


def _run_member(cfg: DictConfig, plan: Plan, job: JobDir, cluster_env: ClusterEnv, result: JobResult,
                started: float) -> JobResult:
    """A task that is not the chief (cluster=tf_config or slurm): it runs its part of the
    training in place and creates no MLflow run; the chief's driver records the one run."""
    result.run_id = None
    result.task_name = cluster_env.task_name
    outcome = engines.launch(engines.for_job(cfg, plan, job), process.task_env({"PYTHONUNBUFFERED": "1"}))
    result.status, result.error = outcome.status, outcome.error
    result.wall_time_s = time.monotonic() - started
    return result


def _tags(plan: Plan, ctx: JobContext) -> Dict[str, str]:
    tags = {"strategy": plan.strategy, "cross_ops": plan.cross_ops, "communication": plan.communication,
            "cluster": plan.cluster, "xpdist.overrides": " ".join(ctx.overrides) or "(none)",
            "mlflow.source.name": "python -m xpdist", **requeue.tags()}
    if ctx.job_num is not None:  # the job's index in its sweep, for the sweep's table
        tags["xpdist.job"] = str(ctx.job_num)
    commit = store.git_commit(ctx.launch_dir)
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["git_commit"] = commit
    return tags


def _record_rejected(cfg: DictConfig, ctx: JobContext, uri: str, error: str) -> Optional[str]:
    params = rejected_params(as_data(cfg))
    name = f"{ctx.job_num}-rejected" if ctx.job_num is not None else "rejected"
    run_id = store.create_run(uri, cfg.tracking.experiment, name, params,
                              {"xpdist.overrides": " ".join(ctx.overrides) or "(none)",
                               "xpdist.job": str(ctx.job_num)}, ctx.parent_run_id)
    store.terminate(uri, run_id, Status.FAILED, error)
    return run_id


# The run's figures a user reads first, after its loss and metrics: the steady training rate.
# The rest (the first step's time, the last epoch's, FLOPs, memory, the learning rate, the traced
# steps' shares) are in MLflow, and on the `final:` line with verbose=true.
_RATE = "steady_examples_per_sec"
_FIGURES = re.compile(r"^(?:learning_rate|mfu|.*(?:_s|_mb|_per_sec|_per_example|_fraction))$")


def final_metrics(metrics: Dict[str, float], verbose: bool = False) -> List[str]:
    """The metrics the `final:` line shows, in its order: the loss, the other training metrics,
    their validation values, then the steady examples/sec; every metric when `verbose`."""
    if verbose:
        return sorted(metrics)
    mine = [k for k in metrics if not _FIGURES.match(k)]
    order = sorted(mine, key=lambda k: (k.startswith("val_"), k.removeprefix("val_") != "loss", k))
    return order + ([_RATE] if _RATE in metrics else [])


def print_summary(result: JobResult, uri: str, experiment_id: Optional[str] = None, out=sys.stdout,
                  verbose: bool = False) -> None:
    """The closing lines of a single run: status, final metrics, run id, how to look at it.

    The `final:` line holds the loss, the metrics and the steady examples/sec (final_metrics);
    `verbose` adds every other figure the run recorded."""
    if result.run_id is None:  # a task that is not the chief: the chief reports the run
        line = (f"xpdist: task {result.task_name} {result.status} in {result.wall_time_s:.1f} s "
                "(the chief records the run)")
        print(line + (f"\n  error: {result.error}" if result.error else ""), file=out, flush=True)
        return
    lines = [f"xpdist: run {result.run_name} {result.status} in {result.wall_time_s:.1f} s"]
    if result.metrics:
        shown = ", ".join(f"{k}={result.metrics[k]:.4g}" for k in final_metrics(result.metrics, verbose))
        lines.append(f"  final: {shown}")
    if result.error:
        lines.append(f"  error: {result.error}")
    lines.append(f"  run id: {result.run_id}   tracking uri: {uri}")
    lines.append(f"  open the MLflow UI: {store.ui_command(uri)}")
    if experiment_id is not None:
        lines.append(f"  then: http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{result.run_id}")
    print("\n".join(lines), file=out, flush=True)
