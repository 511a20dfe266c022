"""`python -m xpdist advise [budget_s=N] [ADVISOR KEYS] OVERRIDES`: which strategy, which
cross-device ops, which per-replica batch, measured on this machine within a time budget.

The advisor enumerates the candidates the hardware allows (xpdist/advisor/plan.py), runs
each as a short probe (`python -m xpdist OVERRIDES <candidate> trainer.epochs=<probe_epochs>`,
and one epoch more where it traces a few steps with TensorFlow's profiler: steady examples/sec
leaves out the first epoch, which traces the step function, and the profiled one), and records
every probe as a child of one MLflow parent run. A failed or out-of-memory probe is recorded as
such and the search goes on. A probe starts only while the budget has time left, so the advisor
ends within budget_s plus one probe. It answers with a ranked table and one recommendation with the command
line to train with; the parent run holds the table (advice.md, advice.csv) and a chart
(advice.png), and the usual sweep summary, so `xpdist-report` shows it like any sweep.
This process never imports TensorFlow: probes are processes of their own.

A probe is the CLI's own run, in a process forked from this one rather than started: this
process has imported Hydra, xpdist's driver and MLflow for its parent run, which a started
`python -m xpdist` imports again (about 2.3 CPU-seconds of each probe on 2 cores, 1 s of its
wall). A forked probe is still a process of its own, with its own standby task, run and
process group, so that a probe that dies (out of memory, killed) takes nothing of this one
with it; what it must not share is handled as for hydra/launcher=local_parallel's jobs
(xpdist/driver/sweeps/parallel_launcher.py): MLflow's pooled connections, the heartbeat thread,
signal handlers. A candidate that preflight refuses is found here, by composing its config,
and recorded REJECTED without a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from xpdist.advisor import plan as advise_plan
from xpdist.advisor.plan import Candidate, Settings
from xpdist.core.errors import ConfigError
from xpdist.core.protocol.outcome import JobResult, RESULT_FILE_ENV, Status

# A probe's own error text that means it ran out of memory: TensorFlow's allocator
# (ResourceExhaustedError, "OOM when allocating"), Python's MemoryError, or the kernel's OOM
# killer (the task ended by SIGKILL).
_OOM = re.compile(r"ResourceExhausted|OOM when allocating|out of memory|MemoryError|SIGKILL|signal 9", re.I)


def cli(argv: Sequence[str]) -> int:
    """Runs the advisor; returns the exit code (2: bad input, nothing created)."""
    try:
        settings, overrides = advise_plan.parse(list(argv))
        _check(settings, overrides, Path.cwd())
    except ConfigError as err:
        print(f"xpdist: error: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by SIGTERM as by Ctrl-C: the runs are closed KILLED
    return advise(settings, overrides, Path.cwd())


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _check(settings: Settings, overrides: List[str], launch_dir: Path) -> None:
    """Composes the user's config and runs the CLI's preflight on it, before any run exists;
    notes the data set's per-replica batch and the GPUs of this machine in settings."""
    from xpdist.core.devices import gpu_count
    from xpdist.driver.checks import config_errors

    batch = [f"{advise_plan.BATCH_KEY}={settings.batch}"] if settings.batch else []
    try:
        plain, plan = _preflight(overrides + batch, launch_dir)
    except config_errors.COMPOSE_ERRORS as err:
        raise ConfigError("overrides", " ".join(overrides), config_errors.one_line(err),
                          "Fix the override; `python -m xpdist --check OVERRIDES` shows the plan.") from None
    settings.batch = int(plain.dataset.per_replica_batch_size)
    settings.num_train = plan.num_train
    settings.gpus = gpu_count()


def _preflight(words: List[str], launch_dir: Path):
    """The config `python -m xpdist WORDS` composes, as plain data, and the plan its preflight
    makes of it.

    Raises:
        config_errors.COMPOSE_ERRORS: the words do not compose.
        ConfigError: preflight refuses the config.
    """
    from hydra import compose, initialize_config_module

    from xpdist.core.protocol.resolved import resolve
    from xpdist.core.schema import register_configs
    from xpdist.driver.checks import preflight

    register_configs()  # storing the schema again replaces the same nodes
    with initialize_config_module("xpdist.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=words)
    plain = resolve(cfg)
    return plain, preflight.check(plain, launch_dir)


def advise(settings: Settings, overrides: List[str], launch_dir: Path) -> int:
    from xpdist.tracking import heartbeat, store

    uri = store.resolve_uri(advise_plan.value_of(overrides, "tracking.uri"), launch_dir)
    experiment = advise_plan.value_of(overrides, "tracking.experiment") or "xpdist"
    out_dir = launch_dir / "advise" / time.strftime("%Y-%m-%d_%H-%M-%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"advise-{time.strftime('%Y%m%d-%H%M%S')} " + " ".join(overrides)
    tags = {"xpdist.sweep": "true", "xpdist.advisor": "true", "xpdist.overrides": " ".join(overrides) or "(none)",
            "xpdist.sweep_dir": str(out_dir.resolve()), "mlflow.source.name": "python -m xpdist advise",
            "advise.budget_s": str(settings.budget_s)}
    parent = store.create_run(uri, experiment, name.strip(), settings.params(), tags)
    heartbeat.keep_alive(uri, parent, 10.0)
    print(f"xpdist: advise: parent run {parent}, budget {settings.budget_s:.0f} s", flush=True)
    started = time.monotonic()
    rows: List[Dict[str, Any]] = []
    status, error = Status.FINISHED, None
    try:
        for candidate in advise_plan.candidates(settings, rows):
            left = settings.budget_s - (time.monotonic() - started)
            if left <= 0:
                print(f"xpdist: advise: budget spent; {candidate.label} and later candidates not probed", flush=True)
                break
            row = _probe(candidate, overrides, settings, uri, launch_dir, len(rows))
            rows.append(row)
            if row.get("run_id"):
                store.set_tags(uri, row["run_id"], {"mlflow.parentRunId": parent, "xpdist.job": str(row["job"])})
            print(f"xpdist: advise: {candidate.label}: {row['status']}"
                  + (f", {row['examples_per_sec']:,.0f} examples/s" if row.get("examples_per_sec") else ""), flush=True)
            if row["interrupted"]:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        status, error = Status.KILLED, "advise interrupted"
    finally:
        ranked = advise_plan.rank(rows)
        answer = advise_plan.recommend(ranked, overrides, settings)
        _report(ranked, answer, uri, parent, out_dir, time.monotonic() - started)
        if status == Status.FINISHED and not any(r["status"] == Status.FINISHED for r in rows):
            status, error = Status.FAILED, "no candidate finished its probe"
        heartbeat.let_go(parent)
        store.terminate(uri, parent, status, error)
    return 0 if status == Status.FINISHED else (130 if status == Status.KILLED else 1)


def _probe(candidate: Candidate, overrides: List[str], settings: Settings, uri: str, launch_dir: Path,
           job: int) -> Dict[str, Any]:
    """Runs one candidate as the CLI's run in a process forked from this one; its row of the table."""
    words = [*overrides, *candidate.overrides, *advise_plan.probe_length(candidate, settings), "trainer.progress=false",
             "tracking.log_model=false", f"tracking.uri={uri}", f"tracking.run_name=advise-{candidate.label}"]
    if settings.probe_steps:
        words.append(f"trainer.steps_per_epoch={settings.probe_steps}")
    refused = _refusal(words, launch_dir)
    if refused is not None:
        return _row(candidate, job, JobResult(status=Status.REJECTED, error=refused), "", 0.0, False)
    with tempfile.TemporaryDirectory(prefix="xpdist-advise-") as tmp:
        result_file = Path(tmp) / "result.json"
        started = time.monotonic()
        proc = _ForkedRun(words, launch_dir, {RESULT_FILE_ENV: str(result_file)})
        timed_out = interrupted = False
        try:
            output = proc.communicate(timeout=settings.probe_timeout_s or settings.budget_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the driver closes the run as KILLED and stops its task
            output = proc.communicate()
            timed_out = True
        except KeyboardInterrupt:  # its run is closed KILLED, and still joins the parent
            proc.terminate()
            output = proc.communicate()
            interrupted = True
        wall = time.monotonic() - started
        written = result_file.exists()
        result = JobResult.from_json(json.loads(result_file.read_text())) if written else None
    if result is None:  # the probe's driver wrote none: its exit code says what it can
        result = JobResult(status=Status.REJECTED if proc.returncode == 2 else Status.FAILED)
    if not result.error and proc.returncode != 0:
        lines = output.strip().splitlines()
        result.error = lines[-1] if lines else f"exit code {proc.returncode}"
    if interrupted:
        result.status = Status.KILLED
    elif timed_out:
        result.status = Status.TIMEOUT
    elif not result.ok and _OOM.search(f"{result.error}\n{output}"):
        result.status = Status.OOM
    return _row(candidate, job, result, output, wall, interrupted)


def _row(candidate: Candidate, job: int, result: JobResult, output: str, wall: float,
         interrupted: bool) -> Dict[str, Any]:
    metrics = result.metrics or {}
    return {"job": job, "label": candidate.label, "overrides": candidate.overrides, "status": result.status,
            "error": None if result.ok else result.error, "run_id": result.run_id,
            "replicas": result.num_replicas or candidate.replicas,
            "per_replica_batch": candidate.per_replica_batch, "global_batch": result.global_batch_size,
            "examples_per_sec": metrics.get("steady_examples_per_sec"), "first_step_s": metrics.get("first_step_s"),
            "peak_memory_mb": metrics.get("peak_gpu_memory_mb", metrics.get("peak_memory_mb")),
            "achieved_flops_per_sec": metrics.get("achieved_flops_per_sec"), "mfu": metrics.get("mfu"), "probe_s": wall,
            "input_wait_fraction": metrics.get("input_wait_fraction"),
            "communication_fraction": metrics.get("communication_fraction"),
            "why_slow": advise_plan.why_slow(metrics), "strategy": candidate.strategy, "interrupted": interrupted}


def _refusal(words: List[str], launch_dir: Path) -> Optional[str]:
    """Why the probe's run would be refused before training (its config composed and checked
    here, as its driver would), or None. About 0.1 s, where a probe refused by its own driver
    took a process, its imports and part of a TensorFlow import."""
    from xpdist.driver.checks import config_errors

    try:
        _preflight(words, launch_dir)
    except config_errors.COMPOSE_ERRORS as err:
        return config_errors.one_line(err)
    except ConfigError as err:
        return str(err)
    return None


class _ForkedRun:
    """`python -m xpdist WORDS` in launch_dir with env added, run in a process forked from this
    one; its stdout and stderr together in one pipe. The part of subprocess.Popen's interface
    _probe uses."""

    def __init__(self, words: List[str], launch_dir: Path, env: Dict[str, str]):
        import multiprocessing

        from xpdist.driver import main  # noqa: F401  (imported once here, not in every probe)
        from xpdist.tracking import heartbeat, store

        store.fork_safe_connections()
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self._proc = multiprocessing.get_context("fork").Process(
            target=_forked_cli, args=(words, str(launch_dir), env, write_end), name="xpdist-probe", daemon=False)
        with heartbeat.paused():  # no heartbeat write holds the store's locks across the fork
            self._proc.start()
        os.close(write_end)
        self._output = os.fdopen(read_end, "rb")
        self._chunks: List[bytes] = []
        self.returncode: Optional[int] = None

    def communicate(self, timeout: Optional[float] = None) -> str:
        """Its output to the end (when every process holding the pipe has closed it) and its
        exit; raises subprocess.TimeoutExpired after `timeout` s, as Popen.communicate does."""
        import select

        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self._output.fileno()
        while not self._output.closed:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("python -m xpdist", timeout)
            if select.select([fd], [], [], left)[0]:
                data = os.read(fd, 1 << 16)
                if data:
                    self._chunks.append(data)
                else:
                    self._output.close()
        self._proc.join()
        self.returncode = self._proc.exitcode
        return b"".join(self._chunks).decode(errors="replace")

    def terminate(self) -> None:
        """SIGTERM, as to a started process: its driver closes the run KILLED and stops its task."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._proc.pid, signal.SIGTERM)


def _forked_cli(words: List[str], launch_dir: str, env: Dict[str, str], output: int) -> None:
    """In the forked process: becomes `python -m xpdist WORDS` (xpdist/__main__.py), whose
    driver ends the process itself (os._exit, after closing its run)."""
    import setproctitle

    from xpdist import plugins
    from xpdist.driver import main
    from xpdist.driver.processes import standby

    setproctitle.setproctitle(" ".join([sys.executable, "-m", "xpdist", *words]))  # what `ps` shows
    # A process group of its own: a terminal's Ctrl-C reaches the advisor alone, which passes
    # it on once as SIGTERM (a second signal could cut the probe's closing short).
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the advisor's handler; the driver sets its own
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in (1, 2):
        os.dup2(output, fd)
    os.close(output)
    os.environ.update(env)
    os.chdir(launch_dir)
    sys.argv = [sys.argv[0], *words]
    standby.start(words)  # as xpdist/__main__.py does for `python -m xpdist WORDS`
    plugins.register()
    main.cli()


def _report(ranked: List[Dict[str, Any]], answer: Optional[Dict[str, str]], uri: str, parent: str, out_dir: Path,
            elapsed: float) -> None:
    from xpdist.advisor import report as advise_report
    from xpdist.tracking import store

    paths = advise_report.write(ranked, answer, out_dir)
    store.log_artifacts(uri, parent, paths, "advice")
    metrics = {"advise_s": elapsed, "candidates_probed": float(len(ranked))}
    if answer:
        metrics["recommended_examples_per_sec"] = float(answer["examples_per_sec"])
        store.set_tags(uri, parent, {"advise.recommendation": answer["command"]})
    store.client(uri).log_batch(parent, metrics=[_metric(k, v) for k, v in metrics.items()])
    print(advise_report.text(ranked, answer), flush=True)
    print(f"  parent run: {parent}   tracking uri: {uri}\n  table and chart: {out_dir} (also artifacts "
          f"'advice/' of the parent run)", flush=True)


def _metric(key: str, value: float):
    from mlflow.entities import Metric

    return Metric(key, float(value), int(time.time() * 1000), 0)
