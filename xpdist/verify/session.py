"""One verification's life: its MLflow run, the two trainings as its children, the verdict.

The verification run is created RUNNING before the trainings and always closed: FINISHED with
its verdict, FAILED when a training failed (its error on the run), KILLED on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Dict, Optional

from xpdist.verify import command, compare, report
from xpdist.verify.command import Checked

# The verdict tag: equal, differs, nonfinite, or failed (a training did not finish).
VERDICT_TAG = "xpdist.verify"


def run(checked: Checked, launch_dir: Path) -> int:
    """Runs both trainings and compares them; returns the exit code (0 equal, 1 otherwise, 130 interrupted)."""
    from xpdist.driver.processes import process
    from xpdist.tracking import store
    from xpdist.tracking.params import run_params

    plan, cfg = checked.plan, checked.cfg
    uri = store.resolve_uri(cfg.tracking.uri, launch_dir)
    folder = command.out_dir(launch_dir)
    _describe(checked)
    tags = {VERDICT_TAG: "running", "mlflow.source.name": "python -m xpdist verify",
            "xpdist.overrides": " ".join(checked.overrides) or "(none)", "strategy": plan.strategy,
            "cluster": plan.cluster, "xpdist.verify.dir": str(folder.resolve()), **checked.notes}
    params = run_params(command_config(checked), plan, {"verify.steps": checked.steps})
    run_id = store.create_run(uri, cfg.tracking.experiment, f"verify-{plan.run_name}", params, tags)
    status, error, code = "KILLED", "interrupted", 130
    try:
        with process.signals_raise():
            status, error, code = _verify(checked, launch_dir, folder, uri, run_id)
    except process.Interrupted as err:
        error = f"interrupted by {err}"
        print(f"xpdist: verify: {error}; runs closed as KILLED", file=sys.stderr)
    except Exception as err:  # an error of verify's own: the run ends FAILED, never RUNNING
        status, error, code = "FAILED", f"{type(err).__name__}: {err}", 1
        print(f"xpdist: verify: failed: {error}", file=sys.stderr)
    finally:
        with process.signals_deferred():
            if status != "FINISHED":
                store.set_tags(uri, run_id, {VERDICT_TAG: "interrupted" if status == "KILLED" else "failed"})
            store.terminate(uri, run_id, status, error)
    print(f"  verification run: {run_id}   tracking uri: {uri}\n  tables: {folder}", flush=True)
    return code


def command_config(checked: Checked) -> Dict:
    from xpdist.core.protocol.resolved import as_data

    return as_data(checked.cfg)


def _describe(checked: Checked) -> None:
    plan, ref = checked.plan, checked.ref_plan
    flavour = "tf-keras" if plan.keras == "legacy" else "Keras 3"
    print(f"xpdist: verify: run {plan.strategy} on cluster={plan.cluster}, {plan.num_replicas} replica(s), "
          f"global batch {plan.global_batch_size}, trainer={checked.cfg.trainer.name} ({flavour}), "
          f"precision {checked.precision}\n  against a reference on one device (strategy={ref.strategy}, "
          f"batch {ref.global_batch_size}, learning rate {ref.learning_rate:g}), same seed, data order, optimizer, "
          f"schedule and initial weights; {checked.steps} steps each, steps_per_execution=1", flush=True)
    for note in checked.notes.values():
        print(f"  note: {note}", flush=True)


def _verify(checked: Checked, launch_dir: Path, folder: Path, uri: str, run_id: str):
    """(status, error, exit code) of the verification run."""
    from xpdist.tracking import store

    ref_record, run_record = folder / "reference" / "record", folder / "run" / "record"
    result = train(checked.ref_cfg, checked.ref_words, "reference", folder / "reference",
                    command.environment(ref_record), launch_dir, uri, run_id)
    if result.ok:
        result = train(checked.cfg, checked.run_words, "run", folder / "run",
                        command.environment(run_record, command.initial_weights(ref_record)), launch_dir, uri, run_id)
    if not result.ok:
        why = cause(folder / result.role) or result.error
        print(f"xpdist: verify: the {result.role} training ended {result.status}: {why}", file=sys.stderr)
        store.set_tags(uri, run_id, {VERDICT_TAG: "failed"})
        return "FAILED", f"the {result.role} training ended {result.status}: {why}", 1
    verdict = compare.judge(ref_record, run_record, checked.precision, checked.steps)
    paths = report.write(verdict, checked.precision, folder)
    store.log_artifacts(uri, run_id, paths, "verify")
    tags = {VERDICT_TAG: verdict.verdict, "xpdist.verify.tolerance": f"{verdict.tol:.3g}",
            "xpdist.verify.compared": "loss, weight-update norm, final variables"}
    if verdict.first_step:
        tags["xpdist.verify.first_step"] = str(verdict.first_step)
    if verdict.reported_loss_step:
        tags["xpdist.verify.reported_loss_differs_at"] = str(verdict.reported_loss_step)
    worst = verdict.worst(1)
    if worst:
        tags["xpdist.verify.worst_variable"] = worst[0].name
    store.set_tags(uri, run_id, tags)
    metrics = {"verify_largest_abs_diff": verdict.largest_abs,
               "verify_variables_differing": float(sum(not v.equal for v in verdict.variables))}
    _log_metrics(uri, run_id, metrics)
    print(report.text(verdict, checked.precision), flush=True)
    return "FINISHED", None, verdict.exit_code


def train(cfg, words, role: str, job_dir: Path, env: Dict[str, str], launch_dir: Path, uri: str, parent: str):
    """One training as the driver runs it, a child run of the verification; its JobResult, with
    its role (also a tag of its run, an interrupted one's included).

    Raises:
        process.Interrupted: after the driver closed the training's run KILLED.
    """
    from xpdist.driver import engines
    from xpdist.driver.jobs import job
    from xpdist.driver.processes import process, standby

    job_dir.mkdir(parents=True)
    standby.keep_if(engines.of(cfg).keeps_standby and not cfg.verbose)  # as the driver decides it
    previous = command.set_env(env)
    try:
        result = job.run(cfg, job.JobContext(launch_dir=launch_dir, job_dir=job_dir, overrides=list(words),
                                             parent_run_id=parent, tracking_uri=uri))
    except process.Interrupted as err:
        with process.signals_deferred():
            _tag_role(uri, getattr(getattr(err, "result", None), "run_id", None), role)
        raise
    finally:
        command.restore_env(previous)
    result.role = role
    _tag_role(uri, result.run_id, role)
    print(f"xpdist: verify: {role} training {result.status} in {result.wall_time_s:.1f} s"
          + (f" (run {result.run_id})" if result.run_id else ""), flush=True)
    return result


def _tag_role(uri: str, run_id: Optional[str], role: str) -> None:
    from xpdist.tracking import store

    if run_id:
        store.set_tags(uri, run_id, {"xpdist.verify.role": role})


def _log_metrics(uri: str, run_id: str, metrics: Dict[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    from xpdist.tracking import store

    now = int(time.time() * 1000)
    store.client(uri).log_batch(run_id, metrics=[Metric(k, v if math.isfinite(v) else 0.0, now, 0)
                                                 for k, v in metrics.items()])


def cause(job_dir: Path) -> Optional[str]:
    """The cause of a failed training, from its task's traceback (JobDir.task_error): the line
    Keras puts after "Exception encountered when calling LAYER.call().", else the last line that
    names an error. The job's one-line error is often TensorFlow's "in user code:", no cause."""
    from xpdist.core.protocol.jobdir import JobDir

    path = JobDir(job_dir).task_error
    if not path.exists():
        return None
    text = re.sub(r"\x1b\[[0-9;]*m", "", path.read_text(errors="replace"))
    # Keras' "Exception encountered when calling LAYER.call()." puts the cause on a line of its own.
    causes = re.findall(r"Exception encountered when calling \S+\s*\n\s*\n?\s*([^\n]+)", text)
    if causes:
        return causes[-1].strip()
    lines = [line.strip() for line in text.splitlines() if "Error: " in line]
    return lines[-1] if lines else None
