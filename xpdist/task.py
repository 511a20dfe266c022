"""The task process: `python -m xpdist.task <job dir>`.

It sets the environment TensorFlow reads at import (log level, Keras flavour), configures
logical devices, builds the strategy and trains. The chief writes result.json into the job
directory; the Hydra process reads it and closes the MLflow run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from omegaconf import OmegaConf

from xpdist.plan import Plan


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def prepare_environment(cfg, plan: Plan) -> None:
    """What TensorFlow reads once, at import: set before `import tensorflow`."""
    if not cfg.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if plan.keras == "legacy" else "0"


def is_chief(cluster: str = "tf_config") -> bool:
    """The chief (or, without TF_CONFIG, the only task) logs to MLflow and writes outputs.

    Under cluster=slurm the chief is SLURM_PROCID 0 (SlurmClusterResolver puts it first).
    """
    if cluster == "slurm":
        return os.environ.get("SLURM_PROCID", "0") == "0"
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return True
    spec = json.loads(raw)
    task = spec.get("task", {})
    kind, index = task.get("type"), task.get("index", 0)
    if "chief" in spec.get("cluster", {}):
        return kind == "chief"
    return kind == "worker" and index == 0


def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_dir = Path(argv[0]).resolve()
    job = json.loads((job_dir / "job.json").read_text())
    cfg = OmegaConf.load(job_dir / "config.yaml")
    plan = Plan(**job["plan"])
    chief = is_chief(cfg.cluster.name)
    prepare_environment(cfg, plan)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    result_path = job_dir / "result.json"

    def write(status: str, **extra) -> None:
        if chief:
            result_path.write_text(json.dumps({"status": status, **extra}, indent=2))

    try:
        from xpdist import runner

        metrics = runner.run(cfg, plan, job_dir, job["tracking_uri"], job.get("run_id"), chief)
    except KeyboardInterrupt:
        write("KILLED", error="interrupted")
        return 130
    except Exception as err:  # every failure becomes a one-line account in the run
        line = _one_line(err)
        (job_dir / "task_error.txt").write_text("".join(traceback.format_exception(err)))
        write("FAILED", error=line)
        if cfg.verbose:
            traceback.print_exc()
        print(f"xpdist task: {line}", file=sys.stderr, flush=True)
        return 1
    from xpdist.train.common import process_started_at

    write("FINISHED", metrics=metrics, started_at=process_started_at())
    return 0


def exit_now(code: int) -> None:
    """Ends the process without the interpreter's teardown.

    Everything the task owes is written by now (result.json, MLflow, checkpoints); unwinding
    TensorFlow's runtime and module graph at exit took seconds here, which the user waits for.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
