"""How a run or a job ended, in the words the driver, the Python API and the reports share.

    Status       every status a run, a job, a task or an advisor's probe can end with
    JobResult    what one job ended with: the driver returns it, writes it for xpdist.run(),
                 and the sweeps, the advisor and the Python API read it back
    one_line     an exception as the one line a JobResult's error or a status message shows
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

# The file a single run's outcome is written to as JSON, where the caller (xpdist.run(), the
# advisor) names one in this variable; the sweep's callback writes the sweep's.
RESULT_FILE_ENV = "XPDIST_RESULT_FILE"


class Status(enum.StrEnum):
    """A run's or a job's status.

    A str enum: each member is equal to its name as a string, so MLflow's own statuses
    (`run.info.status`), the JSON files of the job directory and a user's comparison with
    "FINISHED" all agree with it, and it prints as its name.
    """

    # MLflow's statuses of a run, which xpdist's runs end with.
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    # A config that cannot run: no MLflow run is left behind (exit code 2).
    REJECTED = "REJECTED"
    # --check: the config passed the checks; nothing ran.
    CHECKED = "CHECKED"
    # A trial of a study (hydra/sweeper=optuna) that a pruner stopped; its run is FINISHED.
    PRUNED = "PRUNED"
    # An advisor's probe that outlived its time (probe_timeout_s) or ran out of memory.
    TIMEOUT = "TIMEOUT"
    OOM = "OOM"


@dataclass
class JobResult:
    """What one job ended with: one run of `python -m xpdist`, one job of a sweep, one probe.

    The driver returns it, the sweeps summarise it, and `xpdist.run()` hands it to the user
    (as `xpdist.Result`), read back from the JSON the driver writes (RESULT_FILE_ENV).
    """

    status: Status  # FINISHED, FAILED, KILLED, REJECTED (bad input, no MLflow run) or CHECKED (--check)
    run_id: Optional[str] = None
    run_name: Optional[str] = None
    error: Optional[str] = None
    num_replicas: Optional[int] = None
    global_batch_size: Optional[int] = None
    # Each metric's last value (the `final:` line prints the loss, the metrics and the rate).
    metrics: Dict[str, float] = field(default_factory=dict)
    wall_time_s: float = 0.0
    # The words that asked for the job. Not compared: two results are equal when they say the
    # same about how the job ended, whichever words asked for it.
    overrides: List[str] = field(default_factory=list, compare=False)
    # A task that is not the chief (cluster=tf_config or slurm): its name, e.g. worker:1.
    task_name: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == Status.FINISHED

    def to_json(self) -> Dict[str, Any]:
        """The result as plain data (statuses as their names), for a JSON file."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]):
        """The result a JSON file holds; keys of another version of xpdist are left out."""
        fields = {f.name for f in dataclasses.fields(cls)}
        result = cls(**{k: v for k, v in data.items() if k in fields})
        result.status = Status(result.status)
        return result


def one_line(err: BaseException) -> str:
    """An exception's type and its first non-empty line (Ray's, MLflow's messages run to many lines)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
