"""`python -m xpdist advise [budget_s=N] [ADVISOR KEYS] OVERRIDES`: which strategy, which
cross-device ops, which per-replica batch, measured on this machine within a time budget.

The advisor enumerates the candidates the hardware allows (xpdist/driver/advise_plan.py), runs
each as a short probe (`python -m xpdist OVERRIDES <candidate> trainer.epochs=<probe_epochs>`,
and one epoch more where it traces a few steps with TensorFlow's profiler: steady examples/sec
leaves out the first epoch, which traces the step function, and the profiled one), and records
every probe as a child of one MLflow parent run. A failed or out-of-memory probe is recorded as
such and the search goes on. A probe starts only while the budget has time left, so the advisor
ends within budget_s plus one probe. It answers with a ranked table and one recommendation with the command
line to train with; the parent run holds the table (advice.md, advice.csv) and a chart
(advice.png), and the usual sweep summary, so `xpdist-report` shows it like any sweep.
This process never imports TensorFlow: probes are processes of their own.
"""

from __future__ import annotations

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

from xpdist.api import RESULT_FILE_ENV
from xpdist.core.errors import ConfigError
from xpdist.driver import advise_plan
from xpdist.driver.advise_plan import Candidate, Settings

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
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from xpdist.core.devices import gpu_count
    from xpdist.core.schema import register_configs
    from xpdist.driver import config_errors, job, preflight

    register_configs()
    try:
        with initialize_config_module("xpdist.conf", version_base="1.3"):
            batch = [f"{advise_plan.BATCH_KEY}={settings.batch}"] if settings.batch else []
            cfg = compose(config_name="config", overrides=overrides + batch)
    except config_errors.COMPOSE_ERRORS as err:
        raise ConfigError("overrides", " ".join(overrides), config_errors.one_line(err),
                          "Fix the override; `python -m xpdist --check OVERRIDES` shows the plan.") from None
    plain = OmegaConf.create(job.plain_config(cfg))
    plan = preflight.check(plain, launch_dir)
    settings.batch = int(plain.dataset.per_replica_batch_size)
    settings.num_train = plan.num_train
    settings.gpus = gpu_count()


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
    status, error = "FINISHED", None
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
        status, error = "KILLED", "advise interrupted"
    finally:
        ranked = advise_plan.rank(rows)
        answer = advise_plan.recommend(ranked, overrides, settings)
        _report(ranked, answer, uri, parent, out_dir, time.monotonic() - started)
        if status == "FINISHED" and not any(r["status"] == "FINISHED" for r in rows):
            status, error = "FAILED", "no candidate finished its probe"
        heartbeat.let_go(parent)
        store.terminate(uri, parent, status, error)
    return 0 if status == "FINISHED" else (130 if status == "KILLED" else 1)


def _probe(candidate: Candidate, overrides: List[str], settings: Settings, uri: str, launch_dir: Path,
           job: int) -> Dict[str, Any]:
    """Runs one candidate as its own `python -m xpdist` process; its row of the table."""
    words = [*overrides, *candidate.overrides, *advise_plan.probe_length(candidate, settings), "trainer.progress=false",
             "tracking.log_model=false", f"tracking.uri={uri}", f"tracking.run_name=advise-{candidate.label}"]
    if settings.probe_steps:
        words.append(f"trainer.steps_per_epoch={settings.probe_steps}")
    with tempfile.TemporaryDirectory(prefix="xpdist-advise-") as tmp:
        result_file = Path(tmp) / "result.json"
        env = {**os.environ, RESULT_FILE_ENV: str(result_file)}
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "xpdist", *words], cwd=launch_dir, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timed_out = interrupted = False
        try:
            output, _ = proc.communicate(timeout=settings.probe_timeout_s or settings.budget_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the driver closes the run as KILLED and stops its task
            output, _ = proc.communicate()
            timed_out = True
        except KeyboardInterrupt:  # its run is closed KILLED, and still joins the parent
            proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate()
            interrupted = True
        wall = time.monotonic() - started
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
    metrics = result.get("metrics") or {}
    error = result.get("error")
    if not error and proc.returncode != 0:
        lines = output.strip().splitlines()
        error = lines[-1] if lines else f"exit code {proc.returncode}"
    status = result.get("status") or ("REJECTED" if proc.returncode == 2 else "FAILED")
    if interrupted:
        status = "KILLED"
    elif timed_out:
        status = "TIMEOUT"
    elif status != "FINISHED" and _OOM.search(f"{error}\n{output}"):
        status = "OOM"
    return {"job": job, "label": candidate.label, "overrides": candidate.overrides, "status": status,
            "error": error if status != "FINISHED" else None, "run_id": result.get("run_id"),
            "replicas": result.get("num_replicas") or candidate.replicas,
            "per_replica_batch": candidate.per_replica_batch, "global_batch": result.get("global_batch_size"),
            "examples_per_sec": metrics.get("steady_examples_per_sec"), "first_step_s": metrics.get("first_step_s"),
            "peak_memory_mb": metrics.get("peak_gpu_memory_mb", metrics.get("peak_memory_mb")),
            "achieved_flops_per_sec": metrics.get("achieved_flops_per_sec"), "mfu": metrics.get("mfu"), "probe_s": wall,
            "input_wait_fraction": metrics.get("input_wait_fraction"),
            "communication_fraction": metrics.get("communication_fraction"),
            "why_slow": advise_plan.why_slow(metrics), "strategy": candidate.strategy, "interrupted": interrupted}


def _report(ranked: List[Dict[str, Any]], answer: Optional[Dict[str, str]], uri: str, parent: str, out_dir: Path,
            elapsed: float) -> None:
    from xpdist.driver import advise_report
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
