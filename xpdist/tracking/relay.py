"""The metric relay: the task's metric file, logged into the MLflow run as it grows.

MLflow is imported where used, as in store.py, to keep the driver's start-up short.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Dict, Optional

from xpdist.core.protocol.jobdir import decode_metrics
from xpdist.tracking.store import client, retry

# MLflow's limit on metrics per log_batch call.
_BATCH_LIMIT = 1000


class MetricRelay(threading.Thread):
    """Logs the lines a task appends to its metrics file into the MLflow run, in batches.

    Runs in the driver beside the task; stop() logs whatever is left. `latest` holds each
    metric's value at its highest step: the run's final figures, as the driver prints them.
    """

    def __init__(self, uri: str, run_id: str, path: Path, interval_s: float = 1.0, from_end: bool = False):
        super().__init__(name="xpdist-metric-relay", daemon=True)
        self._client = client(uri)
        self._run_id = run_id
        self._path = Path(path)
        self._interval_s = interval_s
        # from_end: what the file holds already was relayed by an earlier driver (a requeued job).
        self._offset = self._path.stat().st_size if from_end and self._path.exists() else 0
        self._halt = threading.Event()
        self.error: Optional[BaseException] = None
        self.latest: Dict[str, float] = {}
        self._latest_step: Dict[str, int] = {}

    def run(self) -> None:
        while not self._halt.wait(self._interval_s):
            try:
                self.relay()
            except Exception as err:  # kept for stop(), which tries once more and raises
                self.error = err

    def stop(self) -> None:
        """Stops polling and relays the rest of the file."""
        self._halt.set()
        if self.is_alive():
            self.join()
        self.relay()

    def relay(self) -> None:
        from mlflow.entities import Metric

        if not self._path.exists():
            return
        with open(self._path, "rb") as lines:
            lines.seek(self._offset)
            data = lines.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        if not complete:
            return
        metrics = []
        for entry in filter(None, map(decode_metrics, complete.decode().splitlines())):
            step, timestamp, values = entry
            metrics += [Metric(k, v, timestamp, step) for k, v in values.items()]
            for key, value in values.items():
                if step >= self._latest_step.get(key, step):
                    self.latest[key], self._latest_step[key] = value, step
        for start in range(0, len(metrics), _BATCH_LIMIT):
            retry(self._client.log_batch, self._run_id, metrics=metrics[start:start + _BATCH_LIMIT])
        self._offset += len(complete)
