"""tracking.system_metrics: CPU, memory and GPU figures recorded as MLflow's system metrics.

MLflow's own SystemMetricsMonitor samples the machine from the process that holds the run,
which is the driver here, while training happens in task processes. Two kinds of series:

- the machine, with MLflow's own monitors and key names (`system/cpu_utilization_percentage`,
  `system/system_memory_usage_megabytes`, `system/gpu_0_utilization_percentage`, ...), as the
  UI's system metrics view expects: on a GPU machine these are what a user compares;
- each task process of a multi-process cluster on this machine (`system/worker-0/...`), its
  CPU and resident memory measured with psutil on the pids its engine reports
  (Engine.task_pids), because every task shares the machine and the machine's figures cannot
  tell them apart.

GPU figures need NVIDIA's management library (nvidia-ml-py) and a GPU; without either they
are left out, which is not an error.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Callable, Dict, List


class SystemMetrics(threading.Thread):
    """Samples every `interval_s` seconds until stop(); each sample is one log_batch call.

    Args:
        uri: the tracking URI.
        run_id: the run the samples go to.
        task_pids: the job's live task processes by task name, asked at each sample (a
            restarted cluster has new ones); empty for one task process.
        interval_s: seconds between two samples.
    """

    def __init__(self, uri: str, run_id: str, task_pids: Callable[[], Dict[str, int]], interval_s: float):
        super().__init__(name="xpdist-system-metrics", daemon=True)
        self._uri, self._run_id, self._task_pids, self._interval = uri, run_id, task_pids, float(interval_s)
        self._stopped = threading.Event()
        self._warned = False
        self._procs: Dict[int, object] = {}  # psutil.Process by pid: cpu_percent needs the previous call's

    def stop(self) -> None:
        """Takes a last sample, so even a run shorter than one interval has two."""
        self._stopped.set()
        self.join(timeout=30)

    def run(self) -> None:
        from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

        monitors: List[object] = [CPUMonitor()]
        with contextlib.suppress(ImportError, RuntimeError):  # no nvidia-ml-py, or no GPU / driver
            from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

            monitors.append(GPUMonitor())
        import psutil

        psutil.cpu_percent()  # the first call only sets the reference point
        step = 0
        while True:
            stopping = self._stopped.wait(self._interval)
            try:
                self._log(step, {**self._machine(monitors), **self._tasks()})
            except Exception as err:  # a sample lost (store busy, task gone) must not end training
                if not self._warned:
                    print(f"xpdist: a system metrics sample was not logged ({type(err).__name__}: {err})",
                          file=sys.stderr, flush=True)
                    self._warned = True
            step += 1
            if stopping:
                return

    @staticmethod
    def _machine(monitors) -> Dict[str, float]:
        figures: Dict[str, float] = {}
        for monitor in monitors:
            monitor.collect_metrics()
            figures.update(monitor.aggregate_metrics())
            monitor.clear_metrics()
        return figures

    def _tasks(self) -> Dict[str, float]:
        import psutil

        pids = self._task_pids()  # none for one task process: the machine's figures are its own
        figures: Dict[str, float] = {}
        for task, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                proc = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
                if proc.status() == psutil.STATUS_ZOMBIE:  # ended, not yet reaped: no figures, not zeros
                    continue
                name = task.replace(":", "-")
                figures[f"{name}/cpu_utilization_percentage"] = proc.cpu_percent()
                figures[f"{name}/memory_usage_megabytes"] = proc.memory_info().rss / 1e6
        return figures

    def _log(self, step: int, figures: Dict[str, float]) -> None:
        from mlflow.entities import Metric

        from xpdist.tracking.store import client, retry

        now = int(time.time() * 1000)
        metrics = [Metric(f"system/{key}", float(value), now, step) for key, value in figures.items()]
        if metrics:
            retry(client(self._uri).log_batch, self._run_id, metrics=metrics)
