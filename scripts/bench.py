"""Benchmarks xpdist against the hand-written script it replaces.

The same training (model, data, epochs, seed, strategy) runs up to four ways, each in a fresh
process, repetitions interleaved so that machine noise hits every way alike:

  xpdist         python -m xpdist <overrides>        (MLflow run, checkpoints, model artifact)
  script+mlflow  scripts/bench_baseline.py           (the guide's Model.fit, logging to MLflow)
  script+model   scripts/bench_baseline.py --log-model  (the same, and the model in MLflow's format)
  script         scripts/bench_baseline.py --no-mlflow

It reports the median and the spread (min-max) over the repetitions of whole-process wall
time, time to the first training step (from the launch of the command), the phases of training
and after training, steady-state examples/sec (median of epochs 2.., training time only)
and peak memory (largest process, from wait4's rusage, which covers the task processes
xpdist starts; and the peak sum over every live process of the run, sampled with psutil),
plus the cost of per-step metric logging (xpdist trainer.log_every_n_steps=1 against 0).
It writes <out>/bench.json and <out>/bench.md, and with --docs the page of results,
docs/benchmark.md (created from PAGE when missing): each of its tables between markers, each
table headed once by the machine, the date and the command that produced it. That page is
the one place in the docs that holds measured figures; the guides cite it.

    python scripts/bench.py                 # everything, 5 repetitions
    python scripts/bench.py --reps 5 --workloads cnn linear --epochs 5 --ways xpdist script \
        --strategies default mirrored-auto multi_worker_mirrored parameter_server --sweep --docs docs/benchmark.md
    python scripts/bench.py --reps 3 --workloads cnn --strategies one_device mirrored-auto
    python scripts/bench.py --quick         # before a change to the task, trainers or data pipeline
    python scripts/bench.py --quick --scale --docs docs/benchmark.md   # + cost at scale, sweeps; the docs' table
    python scripts/bench.py --precision --docs docs/benchmark.md  # cnn: mixed_bfloat16 and XLA against float32
    python scripts/bench.py --reps 5 --workloads cnn linear --epochs 5 --ways xpdist --strategies \
        multi_worker_mirrored multi_worker_mirrored-ray multi_worker_mirrored-ray_local \
        --docs docs/benchmark.md --docs-part ray

The last compares multi_worker_mirrored's two tasks on cluster=ray (one node) with the same on
cluster=localhost: on a Ray head the benchmark starts once and stops by its process group
(`ray start --head`: what xpdist costs on a running cluster) and on a private Ray each run starts
and stops (cluster.address=local: Ray's start-up included). Ray rows run xpdist only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone without an install
from xpdist.core.protocol.jobdir import JobDir, JobSpec, MetricFile, TaskResult, read_metrics  # noqa: E402
from xpdist.driver.processes.localhost import free_ports  # noqa: E402  (portpicker, as the launcher)

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "scripts" / "bench_baseline.py"
WAYS = ("xpdist", "script+mlflow", "script+model", "script")
# Extra xpdist way for the logging measurement: the same run with a metric logged every step.
LOGGED = "xpdist+step-log"
# Targets of issues 5 and 27, checked here rather than in timed tests.
MAX_WALL_OVERHEAD_S = 1.5  # in the median and in the maximum of the repetitions
MAX_AFTER_TRAINING_S = 0.5  # median; writing the model and artifacts included, which the script does not do
MAX_FIRST_STEP_S = 0.5
MAX_MULTI_WORKER_FIRST_STEP_S = 1.5  # strategies of several task processes
MAX_PARALLEL_SWEEP_CPU = 1.15  # the parallel sweep's CPU-seconds / the sequential sweep's
MAX_STEP_LOG_COST_PCT = 2.0
CNN_SPEEDUP = 1.2
# Issue 24: MWMS on cluster=ray against cluster=localhost, steady examples/sec.
MIN_RAY_STEADY_RATIO = 0.95
# The localhost case each Ray case is compared with.
RAY_BASELINE = "multi_worker_mirrored"


@dataclass(frozen=True)
class Workload:
    name: str
    xpdist: List[str]
    script: List[str]
    per_replica_batch: int


@dataclass(frozen=True)
class Strategy:
    name: str
    xpdist: List[str]
    script: List[str]
    workers: int = 1
    replicas: int = 1
    # parameter_server: a chief (the coordinator) and this many ps tasks beside the workers.
    ps: int = 0
    # cluster=ray: on the Ray head the benchmark starts (its address added to the overrides).
    ray_head: bool = False


def workloads(quick: bool, epochs: int | None = None, work: Path = Path("."),
              examples: int = 1024) -> Dict[str, Workload]:
    """The guide's linear example, a small CNN whose steps take milliseconds, and the same CNN
    reading TFRecord files (written by write_tfrecords) against the tf.data guide's pipeline;
    `epochs` overrides the workloads' epoch counts (the after-training phase grew with it once);
    `examples` the cnn's examples (longer epochs)."""
    linear_epochs = epochs or (2 if quick else 5)
    # 1,024 examples also in quick mode: with fewer, 12 epochs pass before tf.data's autotuner
    # sleeps long enough for a teardown that waits for it to show (the old after-training gap).
    cnn = dict(examples=examples, epochs=epochs or (2 if quick else 3))
    files = str(work / "tfrecords" / "train-*.tfrecord")
    return {
        "cnn_tfrecord": Workload(
            "cnn_tfrecord", ["model=cnn", "model.filters=[16,32]", "dataset=tfrecord", f"dataset.files=[{files}]",
                             "+dataset.features.image={dtype: float32, shape: [16, 16, 3]}",
                             "+dataset.features.label={dtype: int64, shape: []}", "dataset.num_classes=10",
                             f"trainer.epochs={cnn['epochs']}"],
            ["--model", "cnn", "--filters", "16", "32", "--dataset", "tfrecord", "--files", files, "--image-size",
             "16", "--num-examples", str(cnn["examples"]), "--epochs", str(cnn["epochs"])], 64),
        "linear": Workload("linear", ["model=linear", "dataset=synthetic_regression", f"trainer.epochs={linear_epochs}"],
                           ["--model", "linear", "--dataset", "synthetic_regression", "--epochs", str(linear_epochs)],
                           5),
        "cnn": Workload("cnn", ["model=cnn", "model.filters=[16,32]", "dataset=synthetic_images",
                                "dataset.image_shape=[16,16,3]", f"dataset.num_examples={cnn['examples']}",
                                f"trainer.epochs={cnn['epochs']}"],
                        ["--model", "cnn", "--filters", "16", "32", "--dataset", "synthetic_images", "--image-size",
                         "16", "--num-examples", str(cnn["examples"]), "--epochs", str(cnn["epochs"])], 64),
    }


def strategies() -> Dict[str, Strategy]:
    found = {"default": Strategy("default", [], ["--strategy", "default"]),
             "one_device": Strategy("one_device", ["strategy=one_device"], ["--strategy", "one_device"])}
    for ops in ("auto", "hierarchical", "reduction_to_one_device"):
        found[f"mirrored-{ops}"] = Strategy(
            f"mirrored-{ops}", ["strategy=mirrored", f"cross_ops={ops}", "devices.logical_cpus=2"],
            ["--strategy", "mirrored", "--cross-ops", ops, "--logical-cpus", "2"], replicas=2)
    found["central_storage"] = Strategy("central_storage", ["strategy=central_storage", "devices.logical_cpus=2"],
                                        ["--strategy", "central_storage", "--logical-cpus", "2"], replicas=2)
    found["multi_worker_mirrored"] = Strategy(
        "multi_worker_mirrored", ["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2"],
        ["--strategy", "multi_worker_mirrored"], workers=2, replicas=2)
    # Model.fit (tf-keras) both ways; it allows no batch-level callback, so neither way has a first-step time.
    found["parameter_server"] = Strategy(
        "parameter_server", ["strategy=parameter_server", "cluster=localhost", "cluster.workers=2", "cluster.ps=1"],
        ["--strategy", "parameter_server"], workers=2, ps=1)
    # The same two tasks as Ray actors on one node, compared with RAY_BASELINE (no script: it has no Ray).
    ray = ["strategy=multi_worker_mirrored", "cluster=ray", "cluster.workers=2"]
    found["multi_worker_mirrored-ray"] = Strategy("multi_worker_mirrored-ray", ray, [], workers=2, replicas=2,
                                                  ray_head=True)
    found["multi_worker_mirrored-ray_local"] = Strategy("multi_worker_mirrored-ray_local",
                                                        ray + ["cluster.address=local"], [], workers=2, replicas=2)
    return found


def default_strategies() -> List[str]:
    """Every strategy but the Ray ones (opt-in: they need `pip install 'xpdist[ray]'`)."""
    return [name for name, s in strategies().items() if s.script]


class RayHead:
    """`ray start --head --block` on 127.0.0.1 with a free port and a temp dir of its own, no
    dashboard, token auth on (Ray 2.60's default); stopped by its process group, never by
    `ray stop`, which would stop every Ray of this machine."""

    def __init__(self, cpus: int = 2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        self.temp = tempfile.mkdtemp(prefix="xb", dir="/tmp")  # Ray's socket paths must stay short
        # RAY_AUTH_MODE for its drivers too (docs/clusters.md); no drain of up to 30 s when the
        # head is stopped by SIGTERM (see STOP_AT_ONCE in tests/engines/test_ray.py)
        self.env = {**base_env(), "RAY_AUTH_MODE": "token", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        self.log = Path(self.temp) / "head.log"
        start = time.perf_counter()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
                 "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--include-dashboard=false",
                 f"--temp-dir={self.temp}", "--disable-usage-stats"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while "Ray runtime started" not in self.log.read_text():
            if self.proc.poll() is not None or time.perf_counter() - start > 120:
                self.stop()
                raise RuntimeError(f"the Ray head did not start: {self.log.read_text()[-1000:]}")
            time.sleep(0.2)
        self.start_s = time.perf_counter() - start

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL to what is left after 10 s."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)


@dataclass
class Measure:
    way: str
    workload: str
    strategy: str
    rep: int
    global_batch: int = 0
    # xpdist: training steps per tf.function call (batch hooks, so step logs, run once per call).
    steps_per_execution: int = 1
    ok: bool = False
    wall_s: float = float("nan")
    first_step_s: float = float("nan")
    # Whole command split in three: start-up (= first_step_s), training (first step -> last
    # epoch's end) and after-training (last epoch's end -> command's end).
    training_s: float = float("nan")
    after_training_s: float = float("nan")
    epochs: int = 0
    steady_examples_per_sec: float = float("nan")
    peak_rss_mb: float = float("nan")
    peak_total_rss_mb: float = float("nan")
    error: str = ""
    log: str = ""


class TreeSampler(threading.Thread):
    """Samples the summed RSS of some processes and all their descendants."""

    def __init__(self, pids: List[int], interval_s: float = 0.2):
        super().__init__(daemon=True)
        self.roots = [psutil.Process(pid) for pid in pids]
        self.interval_s = interval_s
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            total = 0
            for root in self.roots:
                try:
                    procs = [root] + root.children(recursive=True)
                except psutil.Error:
                    continue
                for proc in procs:
                    try:
                        total += proc.memory_info().rss
                    except psutil.Error:
                        pass
            self.peak = max(self.peak, total)
            self.done.wait(self.interval_s)


def run_processes(cmds: List[List[str]], envs: List[dict], cwd: Path, log: Path, timeout_s: float,
                  first_ends: bool = False, also_sample: List[int] = ()):
    """Starts the commands at once; returns (launched_at, wall_s, exit codes, max rss MB, peak total MB).

    With first_ends, the run ends with the first command (a parameter_server chief): the
    others (servers that never end on their own) are killed then, and their codes left out.
    also_sample: more processes whose trees count in the peak total (a Ray head, whose
    processes run the tasks), though not in the largest process (wait4 sees only children).
    """
    launched_at = time.time()
    start = time.perf_counter()
    with open(log, "w") as out:
        procs = [subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
                 for cmd, env in zip(cmds, envs)]
        sampler = TreeSampler([p.pid for p in procs] + list(also_sample))
        sampler.start()
        codes, maxrss = [], 0
        deadline = start + timeout_s
        for proc in procs[:1] if first_ends else procs:
            # wait4's rusage covers the process and every descendant it waited for (xpdist's tasks).
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    for p in procs:
                        p.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.02)
            proc.returncode = os.waitstatus_to_exitcode(status)
            codes.append(proc.returncode)
            maxrss = max(maxrss, usage.ru_maxrss)
        wall = time.perf_counter() - start
        for proc in procs[1:] if first_ends else []:
            proc.kill()
            proc.wait()
        sampler.done.set()
        sampler.join()
    return launched_at, wall, codes, maxrss / 1024.0, sampler.peak / 2 ** 20


def base_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("MLFLOW_TRACKING_URI", "TF_CONFIG", "MLFLOW_RUN_ID"):
        env.pop(name, None)
    return env


TFRECORD_WRITER = """
import sys, numpy as np, tensorflow as tf
out, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for shard in range(4):
    with tf.io.TFRecordWriter(f"{out}/train-{shard}.tfrecord") as w:
        for _ in range(n // 4):
            image = rng.random((16, 16, 3), dtype=np.float32).ravel()
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(float_list=tf.train.FloatList(value=image)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(10))]))}))
                .SerializeToString())
"""


def write_tfrecords(work: Path, examples: int) -> None:
    """The cnn_tfrecord workload's files: 4 shards of 16x16x3 random images, 10 classes."""
    (work / "tfrecords").mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", TFRECORD_WRITER, str(work / "tfrecords"), str(examples)], check=True,
                   env={**base_env(), "TF_CPP_MIN_LOG_LEVEL": "3"})


def run_xpdist(m: Measure, overrides: List[str], work: Path, timeout_s: float, head: "RayHead | None" = None) -> None:
    """One `python -m xpdist` run; with head, on that Ray head (its address added, its processes sampled)."""
    job_dir = work / "jobs" / f"{m.workload}-{m.strategy}-{m.way}-{m.rep}"
    cmd = [sys.executable, "-m", "xpdist", *overrides, f"hydra.run.dir={job_dir}"]
    if head is not None:
        cmd.append(f"cluster.address={head.address}")
    launched_at, m.wall_s, codes, m.peak_rss_mb, m.peak_total_rss_mb = run_processes(
        [cmd], [head.env if head else base_env()], work / "xpdist", Path(m.log), timeout_s,
        also_sample=[head.proc.pid] if head else [])
    job = JobDir(job_dir)
    if job.spec.exists():
        m.steps_per_execution = JobSpec.read(job).plan.steps_per_execution
    result = TaskResult.read(job)
    metrics: Dict[str, float] = {}
    for _, _, values in read_metrics(job.metrics):
        metrics.update(values)
    m.ok = codes == [0] and result is not None and result.status == "FINISHED"
    m.error = "" if m.ok else f"exit {codes}, result {result and result.status}: {result and result.error}"
    m.steady_examples_per_sec = metrics.get("steady_examples_per_sec", float("nan"))
    if "first_step_s" in metrics and result is not None and result.started_at:
        m.first_step_s = result.started_at + metrics["first_step_s"] - launched_at
    epoch_ends = [ms / 1000.0 for _, ms, values in read_metrics(job.metrics) if "examples_per_sec" in values]
    phases(m, launched_at, epoch_ends[-1] if epoch_ends else None)


def run_script(m: Measure, args: List[str], strategy: Strategy, work: Path, timeout_s: float) -> None:
    cmd = [sys.executable, str(BASELINE), *args]
    if m.way == "script":
        cmd.append("--no-mlflow")
    else:
        cmd += ["--tracking-uri", f"sqlite:///{work / 'script' / 'mlflow.db'}"]
    if m.way == "script+model":
        cmd.append("--log-model")
    envs = [base_env()]
    if strategy.workers > 1:
        counts = {"chief": 1, "worker": strategy.workers, "ps": strategy.ps} if strategy.ps else {
            "worker": strategy.workers}
        ports = iter(free_ports(sum(counts.values())))
        cluster = {kind: [f"localhost:{next(ports)}" for _ in range(n)] for kind, n in counts.items()}
        envs = []
        for kind, n in counts.items():  # the chief (or worker 0) first: the run ends with it
            for index in range(n):
                env = base_env()
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
                envs.append(env)
    launched_at, m.wall_s, codes, m.peak_rss_mb, m.peak_total_rss_mb = run_processes(
        [cmd] * len(envs), envs, work / "script", Path(m.log), timeout_s, first_ends=bool(strategy.ps))
    lines = [line for line in Path(m.log).read_text().splitlines() if line.startswith("BENCH_RESULT ")]
    result = json.loads(lines[-1].split(" ", 1)[1]) if lines else {}
    m.ok = all(c == 0 for c in codes) and bool(result)
    m.error = "" if m.ok else f"exit {codes}, no BENCH_RESULT line" if not result else f"exit {codes}"
    m.steady_examples_per_sec = result.get("steady_examples_per_sec", float("nan"))
    if result.get("first_step_at"):
        m.first_step_s = result["first_step_at"] - launched_at
    phases(m, launched_at, result.get("last_epoch_end_at"))


def phases(m: Measure, launched_at: float, last_epoch_end_at: float | None) -> None:
    """Splits the command's wall time at the first step and at the last epoch's end."""
    if last_epoch_end_at:
        m.after_training_s = launched_at + m.wall_s - last_epoch_end_at
        m.training_s = last_epoch_end_at - launched_at - m.first_step_s


def prepare_stores(work: Path) -> None:
    """Creates both MLflow stores before timing: a user's store exists after their first run."""
    from mlflow.tracking import MlflowClient

    for way in ("xpdist", "script"):
        (work / way).mkdir(parents=True, exist_ok=True)
        MlflowClient(tracking_uri=f"sqlite:///{work / way / 'mlflow.db'}").search_experiments()


def median(values: List[float]) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def spread(values: List[float]) -> tuple:
    """(min, max), NaN dropped."""
    values = [v for v in values if v == v]
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def case_name(m: Measure) -> str:
    return f"{m.workload}/{m.strategy}/{m.epochs}ep"


def summarize(measures: List[Measure]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{workload/strategy: {way: {metric: median, metric_min, metric_max, runs, failed}}}: the
    spread over the repetitions, not their median alone (the after-training phase once ranged
    from 0 to 3.6 s between runs whose median hid it)."""
    table: Dict[str, Dict[str, Dict[str, float]]] = {}
    keys = ("wall_s", "first_step_s", "training_s", "after_training_s", "steady_examples_per_sec", "peak_rss_mb",
            "peak_total_rss_mb")
    for m in measures:
        table.setdefault(case_name(m), {}).setdefault(m.way, {"runs": 0, "failed": 0})
    for case, ways in table.items():
        for way, row in ways.items():
            mine = [m for m in measures if case_name(m) == case and m.way == way]
            good = [m for m in mine if m.ok]
            row["runs"], row["failed"] = len(mine), len(mine) - len(good)
            row["global_batch"] = mine[0].global_batch
            row["steps_per_execution"] = mine[0].steps_per_execution
            for key in keys:
                values = [getattr(m, key) for m in good]
                row[key] = median(values)
                row[f"{key}_min"], row[f"{key}_max"] = spread(values)
    return table


def step_log_cost_us(n: int = 20000) -> float:
    """Microseconds the task spends per logged step, measured in process.

    What trainer.log_every_n_steps=1 adds to a step: the loss turned into a float, a
    MetricFile.add, and the step's share of the one write at the epoch's end (the MLflow
    writes happen in the Hydra process). The end-to-end A/B runs measure the same thing
    through the noise of whole training runs.
    """
    with tempfile.TemporaryDirectory() as folder:
        metrics = MetricFile(JobDir(Path(folder)).metrics)
        start = time.perf_counter()
        for step in range(n):
            metrics.add({"batch_loss": float(0.5 + step * 1e-9)}, step=step)
        metrics.flush()
        return (time.perf_counter() - start) / n * 1e6


def checks(table, log_us: float = float("nan")) -> List[dict]:
    """The issue's targets, one entry per case and target, with the figure."""
    out = []
    for case, ways in table.items():
        x, script, scripted = ways.get("xpdist"), ways.get("script"), ways.get("script+mlflow")
        if not x or not script:
            continue
        best = max(script["steady_examples_per_sec"], (scripted or script)["steady_examples_per_sec"])
        ratio = x["steady_examples_per_sec"] / best
        out.append(dict(case=case, target="steady examples/sec >= hand-written script's",
                        figure=f"{ratio:.2f}x", met=ratio >= 1.0))
        after = x["after_training_s"] - script["after_training_s"]
        out.append(dict(case=case, target=f"after training <= script's + {MAX_AFTER_TRAINING_S} s (medians)",
                        figure=f"{after:+.2f} s", met=after <= MAX_AFTER_TRAINING_S))
        if x["first_step_s"] == x["first_step_s"]:  # parameter_server's Model.fit times no step
            most = MAX_MULTI_WORKER_FIRST_STEP_S if strategies()[case.split("/")[1]].workers > 1 else MAX_FIRST_STEP_S
            start = x["first_step_s"] - script["first_step_s"]
            out.append(dict(case=case, target=f"first step <= script's + {most} s (medians)",
                            figure=f"{start:+.2f} s", met=start <= most))
        for stat, key in (("medians", "wall_s"), ("maxima", "wall_s_max")):
            extra = x[key] - script[key]
            out.append(dict(case=case, target=f"wall time <= script without MLflow + {MAX_WALL_OVERHEAD_S} s ({stat})",
                            figure=f"{extra:+.2f} s", met=extra <= MAX_WALL_OVERHEAD_S))
        modelled = ways.get("script+model")
        if modelled:  # the same ending's work in both: a figure, no target
            for what, key in (("after training", "after_training_s"), ("wall time", "wall_s")):
                out.append(dict(case=case, target=f"{what} against the script that logs its model too (medians)",
                                figure=f"{x[key] - modelled[key]:+.2f} s", met=None))
        if case.startswith("cnn/") and scripted:
            speedup = x["steady_examples_per_sec"] / scripted["steady_examples_per_sec"]
            out.append(dict(case=case, target=f"cnn: defaults >= {CNN_SPEEDUP}x the guide-style script",
                            figure=f"{speedup:.2f}x", met=speedup >= CNN_SPEEDUP))
        logged = ways.get(LOGGED)
        if logged:
            cost = (x["steady_examples_per_sec"] / logged["steady_examples_per_sec"] - 1.0) * 100
            out.append(dict(case=case, target=f"per-step logging < {MAX_STEP_LOG_COST_PCT}% of step time (A/B runs)",
                            figure=f"{cost:+.1f}%", met=cost < MAX_STEP_LOG_COST_PCT))
            step_us = x["global_batch"] / x["steady_examples_per_sec"] * 1e6
            per_step_us = log_us / logged["steps_per_execution"]  # one log per tf.function call
            share = per_step_us / step_us * 100
            out.append(dict(case=case, target=f"per-step logging < {MAX_STEP_LOG_COST_PCT}% of step time (in process)",
                            figure=f"{share:.3f}% ({per_step_us:.1f} us of {step_us / 1000:.2f} ms)",
                            met=share < MAX_STEP_LOG_COST_PCT))
    return out + ray_checks(table)


def ray_checks(table) -> List[dict]:
    """Each cluster=ray case against the same case on cluster=localhost (RAY_BASELINE), xpdist
    both: the steady rate's target, and the start-up, after-training and wall differences
    (medians), reported without a target (met None)."""
    out = []
    for case, ways in table.items():
        workload, strategy, epochs = case.split("/")
        base = table.get(f"{workload}/{RAY_BASELINE}/{epochs}", {}).get("xpdist")
        ray, found = ways.get("xpdist"), strategies().get(strategy)
        if not base or not ray or not found or "cluster=ray" not in found.xpdist:
            continue
        ratio = ray["steady_examples_per_sec"] / base["steady_examples_per_sec"]
        out.append(dict(case=case, target=f"steady examples/sec >= {MIN_RAY_STEADY_RATIO}x cluster=localhost's",
                        figure=f"{ratio:.2f}x", met=ratio >= MIN_RAY_STEADY_RATIO))
        for what, key in (("start-up", "first_step_s"), ("after training", "after_training_s"),
                          ("wall time", "wall_s")):
            out.append(dict(case=case, target=f"{what} against cluster=localhost (medians)",
                            figure=f"{ray[key] - base[key]:+.2f} s", met=None))
    return out


def fmt(value: float, digits: int = 1) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"


def cell(row, key: str, digits: int = 1) -> str:
    """Median, then min-max over the repetitions."""
    low, high = row.get(f"{key}_min", float("nan")), row.get(f"{key}_max", float("nan"))
    if low != low or low == high:
        return fmt(row[key], digits)
    return f"{fmt(row[key], digits)} ({fmt(low, digits)}-{fmt(high, digits)})"


def markdown(table, targets: List[dict], meta: dict) -> str:
    lines = [f"Median (min-max) of {meta['reps']} interleaved repetition(s), each a fresh process, the ways "
             f"in a rotating order. Machine: {meta['machine']}. Written: {meta.get('written', 'not recorded')}. "
             f"Command: `{meta['command']}`", "",
             "| workload / strategy / epochs | way | wall s | start-up s | training s | after training s | steady ex/s "
             "| peak RSS MB (largest / all) | runs (failed) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for case, ways in table.items():
        for way in (*WAYS, LOGGED):
            if way in ways:
                r = ways[way]
                lines.append(f"| {case} | {way} | {cell(r, 'wall_s')} | {cell(r, 'first_step_s')} | "
                             f"{cell(r, 'training_s')} | {cell(r, 'after_training_s', 2)} | "
                             f"{cell(r, 'steady_examples_per_sec', 0)} | {fmt(r['peak_rss_mb'], 0)} / "
                             f"{fmt(r['peak_total_rss_mb'], 0)} | {r['runs']} ({r['failed']}) |")
    lines += ["", "| workload / strategy | target | figure | met |", "|---|---|---:|:---:|"]
    met = {True: "yes", False: "NO", None: "-"}  # None: a figure reported, no target
    lines += [f"| {t['case']} | {t['target']} | {t['figure']} | {met[t['met']]} |" for t in targets]
    if meta.get("ray_head_start_s"):
        lines += ["", f"The Ray head of the `-ray` rows (`ray start --head`, 2 CPUs, started once by the benchmark) "
                      f"took {meta['ray_head_start_s']:.1f} s to start, counted in no row; `-ray_local` rows start "
                      f"and stop a private Ray in every run (cluster.address=local)."]
    if meta.get("scale"):
        curve = ", ".join(f"{n} runs {s:.1f} s" for n, s in meta["scale"]["report"].items())
        summary = ", ".join(f"{n} jobs {s:.1f} s" for n, s in meta["scale"]["sweep_summary"].items())
        lines += ["", f"xpdist-report (whole command): {curve}. Sweep summary: {summary}."]
    if meta.get("sweep_overhead"):
        o = meta["sweep_overhead"]
        lines += [f"Sweep of {o['jobs']} jobs: {o['sweep_ratio']:.2f}x the single runs' sum (target 1.05x); "
                  f"parallel launcher {o['parallel_ratio']:.2f}x the sum / {o['cores']} cores (target 1.15x), "
                  f"{o['parallel_to_bound']:.2f}x the single runs' floor here ({o['parallel_bound_s']:.1f} s: their "
                  f"{o['singles_cpu_s']:.1f} CPU-s / {o['cores']} cores, or whole rounds of one run; a sweep's jobs "
                  f"share imports that each single run pays). "
                  f"CPU-seconds: parallel {o['parallel_cpu_s']:.1f}, sequential {o['sweep_cpu_s']:.1f}, "
                  f"{o['parallel_cpu_s'] / o['sweep_cpu_s']:.2f}x (target {MAX_PARALLEL_SWEEP_CPU}x)."]
    return "\n".join(lines) + "\n"


# --precision: xpdist's cnn under each setting, as ratios to the first (float32, XLA off).
PRECISION_VARIANTS = {
    "float32": ["trainer.precision=float32", "trainer.jit_compile=false"],
    "mixed_bfloat16": ["trainer.precision=mixed_bfloat16", "trainer.jit_compile=false"],
    "xla": ["trainer.precision=float32", "trainer.jit_compile=true"],
    "mixed_bfloat16+xla": ["trainer.precision=mixed_bfloat16", "trainer.jit_compile=true"],
}


def precision_bench(args, work: Path, strategy: List[str]) -> str:
    """Steady examples/sec of the cnn per precision and XLA setting, interleaved; ratios to float32."""
    cnn = workloads(args.quick)["cnn"]
    measures: List[Measure] = []
    names = list(PRECISION_VARIANTS)
    for rep in range(args.reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            m = Measure("xpdist", "cnn", name, rep, cnn.per_replica_batch)
            m.log = str(args.out / "logs" / f"precision-{name.replace('=', '-').replace('+', '_')}-{rep}.log")
            run_xpdist(m, cnn.xpdist + strategy + PRECISION_VARIANTS[name] + ["tracking.log_model=false"],
                       work, args.timeout)
            print(f"bench: cnn {name} #{rep}: steady {fmt(m.steady_examples_per_sec, 0)} ex/s"
                  + ("" if m.ok else f" FAILED ({m.error}; log {m.log})"), flush=True)
            measures.append(m)
    base = median([m.steady_examples_per_sec for m in measures if m.strategy == names[0] and m.ok])
    lines = [f"cnn ({' '.join(strategy) or 'strategy=default'}), medians of {args.reps} interleaved "
             f"repetition(s). Machine: {machine()}. Written: {now()}. "
             f"Command: `{' '.join(['python', 'scripts/bench.py', *args.argv])}`", "",
             "| setting | steady ex/s | ratio to float32, XLA off | runs (failed) |", "|---|---:|---:|---:|"]
    for name in names:
        mine = [m for m in measures if m.strategy == name]
        rate = median([m.steady_examples_per_sec for m in mine if m.ok])
        failed = sum(not m.ok for m in mine)
        lines.append(f"| {name} | {fmt(rate, 0)} | {fmt(rate / base, 2)}x | {len(mine)} ({failed}) |")
    text = "\n".join(lines) + "\n"
    (args.out / "precision.md").write_text(text)
    (args.out / "precision.json").write_text(json.dumps([asdict(m) for m in measures], indent=2))
    return text


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark xpdist against a hand-written tf.distribute script.")
    p.add_argument("--reps", type=int, default=5, help="repetitions of every way and case (default 5)")
    p.add_argument("--workloads", nargs="+", choices=("linear", "cnn", "cnn_tfrecord"), default=["linear", "cnn"],
                   help="cnn_tfrecord: the cnn reading TFRecord files (dataset=tfrecord vs a tf.data script)")
    p.add_argument("--strategies", nargs="+", choices=list(strategies()), default=default_strategies(),
                   help="default: all but the Ray ones (multi_worker_mirrored-ray: on a Ray head the benchmark "
                        "starts; -ray_local: cluster.address=local), compared with multi_worker_mirrored")
    p.add_argument("--log-cost-cases", nargs="*", default=["cnn/one_device", "linear/one_device"],
                   help="cases also run with trainer.log_every_n_steps=1 (per-step logging cost)")
    p.add_argument("--out", type=Path, default=REPO / "bench-results", help="folder for bench.json and bench.md")
    p.add_argument("--epochs", type=int, nargs="+", default=[2, 6, 12],
                   help="epoch counts every case runs with (the after-training phase once grew with them)")
    p.add_argument("--examples", type=int, default=1024,
                   help="examples of the cnn workloads (default 1,024); more for longer epochs")
    p.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    p.add_argument("--docs", type=Path, default=None, help="also write the table into this page, between "
                   "the bench markers (docs/benchmark.md; created when missing)")
    p.add_argument("--docs-part", default="", choices=PARTS, help="which markers of --docs: none for the main "
                   "table, `ray` for the Ray table's (<!-- bench ray: begin ... -->); --precision writes `precision`")
    p.add_argument("--quick", action="store_true", help="before a change to the task, trainers or data pipeline: "
                   "cnn, one_device and mirrored, 2 and 24 epochs, xpdist against the script, 1 repetition")
    p.add_argument("--scale", action="store_true", help="also time xpdist-report on 10..1,000 runs, the sweep "
                   "summary of 200 jobs and a 3-job sweep against 3 runs (scripts/bench_scale.py)")
    p.add_argument("--sweep", action="store_true", help="also time a sweep of small jobs against the same "
                   "single runs, sequential and with the parallel launcher: wall and CPU-seconds (part of --scale)")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed first run of each way")
    p.add_argument("--precision", action="store_true",
                   help="only the cnn under each trainer.precision / trainer.jit_compile setting, as ratios")
    p.add_argument("--precision-strategy", nargs="*", default=[],
                   help="overrides of the --precision runs' strategy (default: strategy=default)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before one run is killed")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:  # its own choices, for what the flags were not given
        given = set(a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv))
        quick = {"--reps": ("reps", 1), "--workloads": ("workloads", ["cnn"]), "--epochs": ("epochs", [2, 24]),
                 "--strategies": ("strategies", ["one_device", "mirrored-auto"]),
                 "--ways": ("ways", ["xpdist", "script"]), "--log-cost-cases": ("log_cost_cases", [])}
        for flag, (name, value) in quick.items():
            if flag not in given:
                setattr(args, name, value)
        args.no_warmup = True
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="xpdist-bench-"))
    strats = strategies()
    if "cnn_tfrecord" in args.workloads:
        write_tfrecords(work, args.examples)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    prepare_stores(work)
    if args.precision:
        text = precision_bench(args, work, args.precision_strategy)
        print(text)
        if args.docs:
            write_docs(args.docs, text, "precision")
        shutil.rmtree(work, ignore_errors=True)
        return 0
    cases = [(workloads(args.quick, epochs, work, args.examples)[w], strats[name], epochs)
             for epochs in args.epochs for name in args.strategies for w in args.workloads]

    head = None
    if any(strats[name].ray_head for name in args.strategies):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # the finally stops the head
        head = RayHead()
    try:
        return run_cases(args, work, cases, head)
    finally:
        if head is not None:
            head.stop()
        shutil.rmtree(work, ignore_errors=True)  # job dirs, checkpoints and stores of the runs


def run_cases(args, work: Path, cases, head: "RayHead | None") -> int:
    def one(workload: Workload, strategy: Strategy, epochs: int, way: str, rep: int) -> Measure:
        m = Measure(way, workload.name, strategy.name, rep, workload.per_replica_batch * strategy.replicas,
                    epochs=epochs)
        m.log = str(args.out / "logs" / f"{workload.name}-{strategy.name}-{epochs}-{way}-{rep}.log".replace("+", "_"))
        if way.startswith("xpdist"):
            extra = ["trainer.log_every_n_steps=1"] if way == LOGGED else []
            run_xpdist(m, workload.xpdist + strategy.xpdist + extra, work, args.timeout,
                       head if strategy.ray_head else None)
        else:
            run_script(m, workload.script + strategy.script, strategy, work, args.timeout)
        state = "ok" if m.ok else f"FAILED ({m.error}; log {m.log})"
        print(f"bench: {case_name(m)} {way} #{rep}: wall {fmt(m.wall_s)} s, first step "
              f"{fmt(m.first_step_s)} s, after training {fmt(m.after_training_s)} s, steady {fmt(m.steady_examples_per_sec, 0)} ex/s, "
              f"peak {fmt(m.peak_rss_mb, 0)} MB - {state}", flush=True)
        return m

    def ways_of(strategy: Strategy) -> List[str]:
        return [way for way in args.ways if way.startswith("xpdist") or strategy.script]  # no Ray script

    if not args.no_warmup and cases:  # page TF and MLflow into the file cache; not counted
        for way in ways_of(cases[0][1]):
            one(*cases[0], way, -1)
        first_on_head = next((case for case in cases if case[1].ray_head), None)
        if first_on_head and first_on_head is not cases[0]:  # the fresh head's first actors
            one(*first_on_head, "xpdist", -1)
    measures: List[Measure] = []
    meta = {"reps": args.reps, "quick": args.quick, "step_log_cost_us": step_log_cost_us(),
            "command": " ".join(["python", "scripts/bench.py", *args.argv])}
    if head is not None:
        meta["ray_head_start_s"] = head.start_s
    for rep in range(args.reps):
        turn = rep % len(cases)  # the cases too: Ray's rows compare cases, not ways
        for i, (workload, strategy, epochs) in enumerate(cases[turn:] + cases[:turn]):
            ways = ways_of(strategy)
            if f"{workload.name}/{strategy.name}" in args.log_cost_cases:
                ways.append(LOGGED)
            shift = (rep + i) % len(ways)  # rotate the order so no way always runs first
            for way in ways[shift:] + ways[:shift]:
                measures.append(one(workload, strategy, epochs, way, rep))
                write_results(args.out, measures, meta)  # a long run stopped early still reports
    if args.scale:
        import bench_scale  # scripts/ is on sys.path: it holds this file

        meta["scale"] = {k: v for k, v in bench_scale.measure([10, 100, 300, 1000], 200).items() if k != "work"}
        meta["sweep_overhead"] = bench_scale.sweep_overhead()
    elif args.sweep:
        import bench_scale

        meta["sweep_overhead"] = bench_scale.sweep_overhead()
    text = write_results(args.out, measures, meta)
    print(text)
    if args.docs:
        write_docs(args.docs, text, args.docs_part)
    return 0 if all(m.ok for m in measures) else 1


BEGIN, END = "<!-- bench: begin (generated by scripts/bench.py --docs) -->", "<!-- bench: end -->"
# The tables of docs/benchmark.md: the main one (""), the Ray rows, the precision ratios.
PARTS = ("", "ray", "precision")
# The page --docs creates when it is missing; its tables are written between the markers.
PAGE = """# Benchmark results

Generated by scripts/bench.py: do not edit by hand. This is the one page of the docs that holds
measured figures; each table is headed by the machine, the date and the command that produced
it, and holds for that machine only. What the columns mean and how to read them:
[performance.md](performance.md).

## xpdist against the hand-written script

{main}

## cluster=ray against cluster=localhost

{ray}

## Precision and XLA on the cnn

{precision}
"""


def page_skeleton() -> str:
    """The page --docs creates when it is missing: the headings and each table's empty markers."""
    return PAGE.format(**{part or "main": "\n".join(markers(part)) for part in PARTS})


def markers(part: str = "") -> tuple:
    """The begin and end markers of the main table (part "") or of a part (`--docs-part ray`)."""
    if not part:
        return BEGIN, END
    return (f"<!-- bench {part}: begin (generated by scripts/bench.py --docs ... --docs-part {part}) -->",
            f"<!-- bench {part}: end -->")


def write_docs(page: Path, text: str, part: str = "") -> None:
    """Replaces what lies between the markers of `page` (the main table's, or part's) with `text`."""
    begin, end = markers(part)
    content = page.read_text() if page.exists() else page_skeleton()
    head, rest = content.split(begin, 1)
    page.write_text(f"{head}{begin}\n{text}{end}{rest.split(end, 1)[1]}")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), or the platform's processor string."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "CPU model unknown"


def machine() -> str:
    """What the tables' header says of the machine: host, CPU model, CPUs, load when written."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.node()}, {cpu_model()}, {psutil.cpu_count()} CPUs, load average {load} when written"


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def write_results(out: Path, measures: List[Measure], meta: dict) -> str:
    """Writes bench.json and bench.md from the runs so far; returns the Markdown."""
    table = summarize(measures)
    targets = checks(table, meta["step_log_cost_us"])
    meta = dict(meta, runs_done=len(measures), machine=machine(), written=now())
    report = {"meta": meta, "summary": table, "targets": targets,
              "runs": [asdict(m) for m in measures]}
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    text = markdown(table, targets, meta)
    (out / "bench.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
