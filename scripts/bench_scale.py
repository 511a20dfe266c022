"""Cost as the work grows: xpdist-report and the sweep summary on stores of many runs.

The runs are made through MlflowClient (no training): each has the params, tags and 10 epochs
of metrics an xpdist run logs, spread over a few strategies, and the sweep's runs are children
of one parent run. Used by scripts/bench.py; runnable alone:

    python scripts/bench_scale.py --runs 10 100 300 1000 --sweep-jobs 200
    python scripts/bench_scale.py --relay-epochs 100     # the metric relay over a long run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = ("one_device", "mirrored", "central_storage", "multi_worker_mirrored")
EPOCHS = 10


def make_runs(uri: str, experiment: str, count: int, parent_id: str | None = None) -> List[str]:
    """`count` finished runs shaped like xpdist's, with `EPOCHS` epochs of loss, val_loss and
    examples_per_sec each; children of `parent_id` when given. Returns their ids."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    ids = []
    now = int(time.time() * 1000)
    for job in range(count):
        strategy = STRATEGIES[job % len(STRATEGIES)]
        lr = (0.01, 0.05, 0.1)[job // len(STRATEGIES) % 3]
        overrides = f"strategy={strategy} optimizer.learning_rate={lr}"
        tags = {"xpdist.job": str(job), "xpdist.overrides": overrides, "xpdist.wall_time_s": "12.5"}
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        run = client.create_run(experiment_id, run_name=f"{job}-{strategy}", tags=tags)
        replicas = 1 if strategy == "one_device" else 2
        params = {"strategy": strategy, "num_replicas": str(replicas), "global_batch_size": str(64 * replicas),
                  "optimizer.learning_rate": str(lr), "cross_ops": "auto", "communication": "auto"}
        metrics = []
        for epoch in range(EPOCHS):
            loss = 1.0 / (1 + epoch * lr * 10) + job * 1e-4
            for key, value in (("loss", loss), ("val_loss", loss * 1.1), ("examples_per_sec", 1000.0 * replicas)):
                metrics.append(Metric(key, value, now + epoch, epoch))
        metrics.append(Metric("steady_examples_per_sec", 1000.0 * replicas, now + EPOCHS, EPOCHS))
        client.log_batch(run.info.run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
        client.set_terminated(run.info.run_id, "FINISHED")
        ids.append(run.info.run_id)
    return ids


def time_report(uri: str, experiment: str, out: Path) -> float:
    """Seconds for `python -m xpdist.report --experiment` as a user runs it (a fresh process)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "xpdist.report", "--experiment", experiment, "--tracking-uri", uri,
                    "--out", str(out)], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def time_sweep_summary(uri: str, parent_id: str, sweep_dir: Path) -> float:
    """Seconds for what a sweep does at its end (xpdist.driver.sweeps.sweep's summary), in process."""
    from xpdist.driver.sweeps import sweep
    from xpdist.report import summary

    start = time.perf_counter()
    rows = summary.rows(sweep._children(uri, parent_id))
    with open(sweep_dir / "summary.txt", "w") as out:
        sweep.report(rows, uri, parent_id, sweep_dir, out=out)
    return time.perf_counter() - start


def measure(run_counts: Sequence[int], sweep_jobs: int) -> Dict[str, object]:
    """{"report": {runs: seconds}, "sweep_summary": {jobs: seconds}} on fresh SQLite stores.

    The store grows to each count in turn: runs are added, not remade.
    """
    from mlflow.tracking import MlflowClient

    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="xpdist-scale-"))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    curve: Dict[int, float] = {}
    made = 0
    for count in sorted(run_counts):
        make_runs(uri, "scale", count - made)
        made = count
        curve[count] = time_report(uri, "scale", work / f"report-{count}")
        print(f"bench: xpdist-report on {count} runs: {curve[count]:.1f} s", flush=True)
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("sweep")
    parent = client.create_run(experiment_id, run_name="sweep", tags={"xpdist.sweep": "true"})
    make_runs(uri, "sweep", sweep_jobs, parent.info.run_id)
    (work / "sweep").mkdir()
    seconds = time_sweep_summary(uri, parent.info.run_id, work / "sweep")
    print(f"bench: sweep summary of {sweep_jobs} jobs: {seconds:.1f} s", flush=True)
    return {"report": curve, "sweep_summary": {sweep_jobs: seconds}, "work": str(work)}


def _clone_env() -> Dict[str, str]:
    """This process's environment, with the clone first on PYTHONPATH: runs use its xpdist."""
    import os

    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def sweep_overhead(jobs: int = 0, timeout_s: float = 900.0) -> Dict[str, float]:
    """Seconds for N small single runs, the same N jobs as one sweep with the default launcher,
    and with hydra/launcher=local_parallel; the two ratios the issue sets targets for; and what
    bounds the parallel sweep from below on this machine.

    N defaults to twice the cores, so that the jobs fill whole rounds of the parallel launcher.
    Each command's CPU-seconds (its own and every process it waited for: the task, joblib's
    workers) come from getrusage. N jobs on C cores take at least the larger of: their
    CPU-seconds / C, and ceil(N / C) rounds of one job's wall time.
    """
    import math
    import os
    import resource
    import statistics

    cores = os.cpu_count() or 1
    values = [f"{0.01 * (i + 1):.2f}" for i in range(jobs or 2 * cores)]
    work = Path(tempfile.mkdtemp(prefix="xpdist-sweep-bench-"))
    env = _clone_env()
    base = [sys.executable, "-m", "xpdist", "model=linear", "dataset=synthetic_regression", "trainer.epochs=2",
            f"tracking.uri=sqlite:///{work / 'mlflow.db'}"]

    def timed(cmd: List[str]) -> tuple:
        """(wall seconds, CPU-seconds of the command and its children)."""
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(cmd, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout_s)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.perf_counter() - start, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime

    timed(base + ["hydra.run.dir=warmup"])  # the store exists and the files are in the page cache
    single = [timed(base + [f"optimizer.learning_rate={v}", f"hydra.run.dir=single-{v}"]) for v in values]
    singles, singles_cpu = sum(w for w, _ in single), sum(c for _, c in single)
    multirun = base[:3] + ["-m"] + base[3:]  # Hydra's argparse wants -m before the overrides
    sweep, sweep_cpu = timed(multirun + [f"optimizer.learning_rate={','.join(values)}", "hydra.sweep.dir=sweep"])
    parallel, parallel_cpu = timed(multirun + [f"optimizer.learning_rate={','.join(values)}",
                                               "hydra.sweep.dir=parallel", "hydra/launcher=local_parallel"])
    bound = max(singles_cpu / cores, math.ceil(len(values) / cores) * statistics.median(w for w, _ in single))
    return {"jobs": len(values), "cores": cores, "singles_s": singles, "singles_cpu_s": singles_cpu,
            "sweep_s": sweep, "sweep_cpu_s": sweep_cpu, "parallel_s": parallel, "parallel_cpu_s": parallel_cpu,
            "sweep_ratio": sweep / singles, "parallel_ratio": parallel / (singles / cores),
            "parallel_bound_s": bound, "parallel_to_bound": parallel / bound}


def relay_cost(epochs: int = 100) -> Dict[str, object]:
    """What the metric relay costs as a run grows, two ways.

    In process: the task's metric file grows by one epoch (the figures a fit run writes), then
    the relay (xpdist.tracking.relay.MetricRelay, which the driver runs once a second) logs
    what is new into a real SQLite run; each call is timed. A relay that re-read or re-sent the
    whole file would grow with the epoch. End to end: `python -m xpdist` for `epochs` epochs of
    the linear model, its epoch_time_s over the first and the last ten epochs (the relay runs
    in the driver, beside the task, for the whole run).
    """
    import statistics

    from mlflow.tracking import MlflowClient

    sys.path.insert(0, str(REPO))
    from xpdist.core.protocol.jobdir import MetricFile
    from xpdist.tracking.relay import MetricRelay

    work = Path(tempfile.mkdtemp(prefix="xpdist-relay-bench-"))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("relay"))
    metrics = MetricFile(work / "metrics.jsonl")
    relay = MetricRelay(uri, run.info.run_id, work / "metrics.jsonl")
    calls = []
    for epoch in range(1, epochs + 1):
        metrics.add({"loss": 1.0 / epoch, "mae": 0.5 / epoch, "epoch_time_s": 0.1, "examples_per_sec": 1000.0,
                     "val_loss": 1.1 / epoch, "val_mae": 0.6 / epoch}, step=epoch)
        metrics.flush()
        start = time.perf_counter()
        relay.relay()
        calls.append(time.perf_counter() - start)
    logged = len(client.get_metric_history(run.info.run_id, "loss"))

    env = _clone_env()
    subprocess.run([sys.executable, "-m", "xpdist", "model=linear", "dataset=synthetic_regression",
                    f"trainer.epochs={epochs}", "trainer.progress=false", f"tracking.uri={uri}",
                    "tracking.experiment=relay-run", f"hydra.run.dir={work / 'run'}"],
                   cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    (ran,) = client.search_runs([client.get_experiment_by_name("relay-run").experiment_id])
    times = [m.value for m in sorted(client.get_metric_history(ran.info.run_id, "epoch_time_s"), key=lambda m: m.step)]
    ms = [1000 * c for c in calls]
    return {"epochs": epochs, "relayed_epochs": logged,
            "relay_ms_first10": statistics.median(ms[:10]), "relay_ms_last10": statistics.median(ms[-10:]),
            "relay_ms_max": max(ms),
            "epoch_ms_2_to_11": 1000 * statistics.median(times[1:11]),
            "epoch_ms_last10": 1000 * statistics.median(times[-10:])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[10, 100, 300, 1000])
    parser.add_argument("--sweep-jobs", type=int, default=200)
    parser.add_argument("--sweep-overhead", action="store_true", help="time a sweep of twice as many jobs as cores "
                        "against as many single runs, both launchers, instead")
    parser.add_argument("--relay-epochs", type=int, default=0, help="time the metric relay over a run this long "
                        "instead")
    args = parser.parse_args()
    if args.relay_epochs:
        print(relay_cost(args.relay_epochs))
    else:
        print(sweep_overhead() if args.sweep_overhead else measure(args.runs, args.sweep_jobs))
