"""Regenerates docs/equivalence.md: where the shipped models train alike under each strategy,
trainer, engine and precision, as `python -m xpdist verify` finds it (xpdist/verify/).

    python scripts/equivalence.py                  # every cell a CPU runs (15 minutes or less on 2 cores)
    python scripts/equivalence.py --only "cnn|"    # the cells whose key contains the text, merged in
    python scripts/equivalence.py --gpu            # the GPU-only cells too (scripts/gpu_check.sh runs it)
    python scripts/equivalence.py --missing        # the cells without a verdict yet (a stopped run, continued)
    python scripts/equivalence.py --render         # the page again from docs/figures/equivalence.json

Each cell is a verification: the cell's configuration for verify's 5 steps against a one-device
reference. References are shared: the cells whose reference would be the same training (same
model, data, trainer, precision, Keras and global batch) compare with one reference run, trained
once. The results are kept in docs/figures/equivalence.json, from which the page is rendered, so
that a partial run (--only) updates its cells and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "equivalence.md"
RESULTS = REPO / "docs" / "figures" / "equivalence.json"
STEPS = 5


@dataclass(frozen=True)
class Row:
    label: str
    words: List[str]
    # Why the cell is not run on a CPU (None: it is).
    not_run: Optional[str] = None
    # Run for these models in float32 only (None: every cell): a local Ray starts with each run
    # (about 40 s), which the page's 15 minutes cannot afford for every cell.
    only: Optional[tuple] = None


MIRRORED = ["strategy=mirrored", "devices.logical_cpus=2"]
MWMS = ["strategy=multi_worker_mirrored", "cluster.workers=2"]
ROWS = [
    Row("default", ["strategy=default"]),
    Row("one_device", ["strategy=one_device"]),
    Row("mirrored, cross_ops=auto", MIRRORED + ["cross_ops=auto"]),
    Row("mirrored, cross_ops=hierarchical", MIRRORED + ["cross_ops=hierarchical"]),
    Row("mirrored, cross_ops=reduction_to_one_device", MIRRORED + ["cross_ops=reduction_to_one_device"]),
    Row("mirrored, cross_ops=nccl", MIRRORED + ["cross_ops=nccl"], not_run="gpu"),
    Row("central_storage", ["strategy=central_storage", "devices.logical_cpus=2"]),
    Row("multi_worker_mirrored, communication=auto, cluster=localhost", MWMS + ["cluster=localhost"]),
    Row("multi_worker_mirrored, communication=ring, cluster=localhost", MWMS + ["cluster=localhost", "communication=ring"]),
    Row("multi_worker_mirrored, communication=nccl, cluster=localhost", MWMS + ["cluster=localhost", "communication=nccl"],
        not_run="gpu"),
    Row("multi_worker_mirrored, communication=auto, cluster=ray", MWMS + ["cluster=ray", "cluster.address=local"],
        only=("linear",)),
    Row("parameter_server, cluster=localhost", ["strategy=parameter_server", "cluster=localhost", "cluster.ps=1"]),
    Row("tpu", ["strategy=tpu"], not_run="tpu"),
]
# (trainer, precision) columns; a model lists the precisions it is verified in.
TRAINERS = ["fit", "ctl"]
MODELS: Dict[str, dict] = {
    "linear": dict(words=[], precisions=["float32", "mixed_bfloat16", "mixed_float16"],
                   about="the shipped `model=linear` on `dataset=synthetic_regression`"),
    "cnn": dict(words=["model=cnn", "model.filters=[8]", "dataset=synthetic_images", "dataset.image_shape=[16,16,3]",
                       "dataset.num_examples=256", "dataset.per_replica_batch_size=8"], precisions=["float32"],
                about="the shipped `model=cnn` (one block of 8 filters) on 16x16 synthetic images"),
    "batchnorm": dict(words=["model=custom", "model._target_=tests.integration.verify_models.batchnorm",
                             "dataset=digits", "dataset.per_replica_batch_size=16"], precisions=["float32"],
                      about="Dense, BatchNormalization, Dense on `dataset=digits`: state outside the trainable "
                            "weights (the moving statistics), and batch statistics that are each replica's own "
                            "(Keras' default, `synchronized=False`)"),
}
NOT_RUN = {"gpu": "not run (GPU)", "limited": "not run (Ray: linear, float32 only)", "tpu": "not run (TPU)"}


def cell_key(model: str, row: Row, trainer: str, precision: str) -> str:
    return f"{model}|{row.label}|{trainer}|{precision}"


def cells() -> List[tuple]:
    """Every (key, model, row, trainer, precision) of the page, in its order."""
    return [(cell_key(m, row, t, p), m, row, t, p) for m, spec in MODELS.items() for row in ROWS
            for t in TRAINERS for p in spec["precisions"]]


@dataclass
class Runner:
    """Runs cells in this process through verify's own steps; references trained once each."""

    workdir: Path
    uri: str
    references: Dict[tuple, Path] = field(default_factory=dict)

    def run(self, model: str, row: Row, trainer: str, precision: str) -> dict:
        from xpdist.core.errors import ConfigError
        from xpdist.verify import command, compare, session

        words = [*MODELS[model]["words"], *row.words, f"trainer={trainer}", f"trainer.precision={precision}",
                 f"tracking.uri={self.uri}", "tracking.experiment=equivalence"]
        try:
            checked = command.check(words, STEPS, self.workdir)
        except ConfigError as err:  # its first sentence: key=value: why
            return {"verdict": "refused", "why": str(err).split(". ")[0]}
        folder = Path(tempfile.mkdtemp(prefix="cell-", dir=self.workdir))
        key = tuple(checked.ref_words)
        if key not in self.references:
            ref = folder / "reference"
            done = session.train(checked.ref_cfg, checked.ref_words, "reference", ref / "job",
                                 command.environment(ref / "record"), self.workdir, self.uri, None)
            if not done.ok:
                return {"verdict": "failed", "why": f"reference: {done.error}"}
            self.references[key] = ref / "record"
        ref_record = self.references[key]
        done = session.train(checked.cfg, checked.run_words, "run", folder / "run" / "job",
                             command.environment(folder / "run" / "record", command.initial_weights(ref_record)),
                             self.workdir, self.uri, None)
        if not done.ok:
            return {"verdict": "failed", "why": session.cause(folder / "run" / "job") or done.error}
        verdict = compare.judge(ref_record, folder / "run" / "record", precision, STEPS)
        worst = verdict.worst(1)
        return {"verdict": verdict.verdict, "largest": verdict.largest_abs, "step": verdict.first_step,
                "update_step": verdict.first_update_step, "reported_loss_step": verdict.reported_loss_step,
                "worst": worst[0].name if worst else None, "worst_rel": worst[0].max_rel if worst else None,
                "notes": list(checked.notes.values())}


def short(result: dict) -> str:
    """A cell's text."""
    verdict = result["verdict"]
    if verdict == "equal":
        text = f"equal, {result['largest']:.1g}"
        if result.get("reported_loss_step"):
            text += " (reported loss differs)"
    elif verdict == "differs":
        at = result.get("step") or result.get("update_step")
        text = f"**differs** from step {at}: {result['worst']} by {result['worst_rel']:.1g}"
    elif verdict == "nonfinite":
        text = f"**non-finite** from step {result.get('step')}"
    elif verdict in NOT_RUN:
        text = NOT_RUN[verdict]
    else:  # refused or failed: the error's first clause, without the job's paths or the key=value
        why = result.get("why", "").split(" (traceback")[0].split(". ")[0].split(", ")[0]
        why = why.split(": ", 1)[-1] if verdict == "refused" else why
        text = f"{verdict}: {why}".replace("|", "/")
    return text + (" [tf-keras]" if any("tf-keras" in n for n in result.get("notes", [])) else "")


def render(results: Dict[str, dict]) -> str:
    from xpdist.core.plan import tf_version
    from xpdist.verify.compare import STEP_TOLERANCE

    lines = ["# Equivalence: where a distributed run trains the same model as one device", "",
             "<!-- Generated by `python scripts/equivalence.py`; edit the script, not this page. -->", "",
             f"Written by `python scripts/equivalence.py` (TensorFlow {tf_version()}). Each cell is "
             f"`python -m xpdist verify` ([docs/verify.md](verify.md)): the configuration for {STEPS} steps "
             "against a one-device reference from the same initial weights and batches, compared step by step "
             "(loss, weight-update norm) and at the end variable by variable, within "
             + ", ".join(f"{t:.0e} per step for {p}" for p, t in STEP_TOLERANCE.items())
             + f" (times {STEPS} steps). A cell shows the verdict and the largest difference found; a "
             "**differs** names the variable that differs most and its difference relative to its largest value.", "",
             "`[tf-keras]`: `keras=auto` trained `trainer=fit` with tf-keras, xpdist's workaround for Keras 3's "
             "Model.fit under multi_worker_mirrored (keras-team/keras#20585, tensorflow/tensorflow#72388) and "
             "central_storage (wrong metrics); the reference used tf-keras too. `(reported loss differs)`: every "
             "update and variable agree, the loss reported per step does not (tf-keras' batch logs under "
             "multi_worker_mirrored report the workers' sum). `not run (GPU)`: nccl has no CPU kernel; "
             "scripts/gpu_check.sh runs these cells on a GPU (`python scripts/equivalence.py --gpu`). `not run "
             "(Ray: ...)`: a private Ray starts for each run (about 40 s), so the Ray row holds the linear model in "
             "float32. `not run (TPU)`: no TPU here, and verify refuses strategy=tpu (its replica count is known only "
             "once connected). parameter_server is refused: asynchronous updates depend on timing (docs/verify.md). "
             "A `failed` cell is a training that fails under that strategy, with its error.", ""]
    for model, spec in MODELS.items():
        columns = [(t, p) for t in TRAINERS for p in spec["precisions"]]
        lines += [f"## {model}", "", f"{spec['about'][0].upper()}{spec['about'][1:]}.", "",
                  "| strategy | " + " | ".join(f"{t}, {p}" for t, p in columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for row in ROWS:
            texts = [short(results.get(cell_key(model, row, t, p), {"verdict": "pending", "why": "not run yet"}))
                     for t, p in columns]
            lines.append(f"| {row.label} | " + " | ".join(texts) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="run only the cells whose key (model|strategy|trainer|precision) "
                                                   "contains this text; the others keep their results")
    parser.add_argument("--missing", action="store_true", help="run only the cells the results file has no "
                                                               "verdict for (an interrupted run, continued)")
    parser.add_argument("--gpu", action="store_true", help="run the GPU-only cells too")
    parser.add_argument("--render", action="store_true", help="render the page from the results file, run nothing")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    results: Dict[str, dict] = json.loads(args.results.read_text()) if args.results.exists() else {}
    if not args.render:
        run_cells(results, args.only, args.gpu, args.results, args.missing)
    args.page.write_text(render(results))
    return 0


def run_cells(results: Dict[str, dict], only: str, gpu: bool, results_file: Path, missing: bool = False) -> None:
    from xpdist.driver.processes import standby

    # The batchnorm model's module (tests/integration/verify_models.py), for the tasks.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    started = time.monotonic()
    results_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xpdist-equivalence-") as tmp:
        runner = Runner(Path(tmp), f"sqlite:///{tmp}/mlflow.db")
        standby.start([])  # the tasks are forked from it, as a sweep's jobs are (xpdist/verify/cli.py)
        standby.serve_sweep()
        try:
            for key, model, row, trainer, precision in cells():
                if only not in key or (missing and key in results):
                    continue
                if row.not_run and not (gpu and row.not_run == "gpu"):
                    results[key] = {"verdict": row.not_run}
                    continue
                if row.only is not None and (model not in row.only or precision != "float32"):
                    results[key] = {"verdict": "limited"}
                    continue
                begun = time.monotonic()
                try:
                    results[key] = runner.run(model, row, trainer, precision)
                except Exception as err:  # a cell's own failure (not a training's) is its verdict; the rest go on
                    results[key] = {"verdict": "failed", "why": f"{type(err).__name__}: {err}"}
                print(f"{key}: {short(results[key])} ({time.monotonic() - begun:.0f} s, "
                      f"{time.monotonic() - started:.0f} s in all)", flush=True)
                results_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        finally:
            standby.discard()
            results_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")  # the cells not run, too


if __name__ == "__main__":
    sys.exit(main())
