"""The task process: `python -m xpdist.task <job dir>`.

It reads the job spec the driver wrote, sets the environment TensorFlow reads at import (log
level, Keras flavour), then trains (xpdist/task/runner.py). The chief writes its TaskResult
into the job directory; the driver reads it and closes the MLflow run.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from omegaconf import OmegaConf

from xpdist.core.clusterenv import ClusterEnv
from xpdist.core.protocol.jobdir import (EXIT_DISK_FULL, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_RETRYABLE, JobDir, JobSpec,
                                TaskResult)
from xpdist.core.plan import Plan
from xpdist.core.protocol.outcome import Status
from xpdist.task import boot, failure, runner
from xpdist.task.train.common import process_started_at


# See prepare_environment.
GRPC_KEEPALIVE = "grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000"


def prepare_environment(cfg, plan: Plan) -> None:
    """What TensorFlow reads once, at import: set before `import tensorflow`."""
    if not cfg.verbose:
        boot.quiet_tensorflow()
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if plan.keras == "legacy" else "0"
    if ClusterEnv.from_environ(cfg.cluster.name).in_cluster:
        # gRPC keepalive on TensorFlow's channels: a peer whose link is cut (no reset, packets
        # dropped) fails its calls after about 20 s instead of the kernel's TCP timeout (~15 min),
        # so a parameter_server coordinator moves that worker's steps to the others.
        os.environ.setdefault("TF_GRPC_DEFAULT_OPTIONS", GRPC_KEEPALIVE)


class _Stop:
    """SIGINT or SIGTERM came (asked), and main has caught its KeyboardInterrupt (caught)."""

    asked = threading.Event()
    caught = threading.Event()


# Seconds between two KeyboardInterrupts while the first has not reached main.
INSIST_S = 1.0


def _raise_interrupt(_signum, _frame):
    """SIGINT and SIGTERM: a KeyboardInterrupt in the main thread, again every INSIST_S until
    main catches one. TensorFlow sometimes loses it: 2 SIGTERMs in about 120 here left a fit
    running on with no signal pending (/proc/<pid>/status), and no "Exception ignored" line, until
    the driver's SIGKILL 15 s later (process.GRACE_S), so the task wrote no result. A stop that
    is lost and raised again is the known case in TensorFlow: tensorflow/tensorflow#11303."""
    if not _Stop.asked.is_set():
        _Stop.asked.set()
        threading.Thread(target=_insist, name="xpdist-stop", daemon=True).start()
    raise KeyboardInterrupt


def _insist() -> None:
    while not _Stop.caught.wait(INSIST_S):
        _thread.interrupt_main(signal.SIGINT)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM end the task through a KeyboardInterrupt that main catches."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupt)


def _stop_caught() -> None:
    """Main has the KeyboardInterrupt: no other one while the task writes its result."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _Stop.caught.set()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    boot.die_with_driver()
    boot.stoppable()
    job = JobDir(Path(argv[0]).resolve())
    spec = JobSpec.read(job)
    cfg = OmegaConf.create(spec.config)
    cluster = ClusterEnv.from_environ(cfg.cluster.name)
    prepare_environment(cfg, spec.plan)
    stop_on_signals()

    def write(status: str, error: str = None, may_retry: bool = False, stopped_at: int = None) -> None:
        if cluster.is_chief:  # on a full disk the exit code tells the driver instead
            with contextlib.suppress(OSError):
                TaskResult(status, error, process_started_at(), may_retry, stopped_at).write(job)

    try:
        stopped_at = runner.run(cfg, spec, job, cluster)
    except KeyboardInterrupt:
        _stop_caught()
        write(Status.KILLED, "interrupted")
        return EXIT_INTERRUPTED
    except runner.NoRun as err:  # the driver says why in its own one line
        write(Status.FAILED, f"stopped before training: {err}")
        return EXIT_FAILED
    except Exception as err:  # every failure becomes a one-line account in the run
        with contextlib.suppress(OSError):
            job.task_error.write_text("".join(traceback.format_exception(err)))
        line = failure.one_line(err, job.task_error, cluster.peers)
        may_retry = failure.retryable(err)
        write(Status.FAILED, line, may_retry)
        if cfg.verbose:
            traceback.print_exc()
        print(f"xpdist task: {line}", file=sys.stderr, flush=True)
        if failure.disk_full(err):
            return EXIT_DISK_FULL
        return EXIT_RETRYABLE if may_retry else EXIT_FAILED
    write(Status.FINISHED, stopped_at=stopped_at)
    return 0


def exit_now(code: int) -> None:
    """Ends the process without the interpreter's teardown.

    Everything the task owes is written by now (result.json, MLflow, checkpoints); unwinding
    TensorFlow's runtime and module graph at exit took seconds here, which the user waits for.
    The temporary files the task's libraries meant to delete at exit go with its own temporary
    directory (boot.private_tempdir).
    """
    boot.remove_private_tempdir()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

