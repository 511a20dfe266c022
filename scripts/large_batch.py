"""The shape of Goyal et al. 2017 ("Accurate, Large Minibatch SGD") at small scale, on digits.

Trains the cnn on scikit-learn's digits with SGD (momentum 0.9) and a step decay, at a small
global batch (32, the baseline) and at 8x that batch (256) with the learning rate scaled
linearly (x8), without and with a gradual warmup; three seeds each, the same number of epochs
for all. Prints the median final validation accuracy of each as a Markdown table; with --docs
it rewrites the table between the markers of docs/training.md.

    python scripts/large_batch.py            # print the table (9 runs, 2 at a time)
    python scripts/large_batch.py --docs     # and write it into docs/training.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import xpdist  # noqa: E402  (the checkout's own package)

PAGE = REPO / "docs" / "training.md"
BEGIN, END = "<!-- large_batch.py: begin -->", "<!-- large_batch.py: end -->"
SEEDS = (1, 2, 3)
EPOCHS = 12
# The learning rate tuned for a batch of 32, the decay at 3/4 of training (the paper's steps).
COMMON = ["model=cnn", "dataset=digits", "dataset.validation_split=0.2", "optimizer=sgd", "optimizer.momentum=0.9",
          "optimizer.learning_rate=0.02", "optimizer.lr_scaling=linear", "optimizer.reference_batch_size=32",
          "schedule=piecewise", f"schedule.boundaries=[{EPOCHS * 3 // 4}]", "schedule.factors=[1,0.1]",
          f"trainer.epochs={EPOCHS}", "trainer.progress=false", "tracking.log_model=false",
          "tracking.system_metrics=false"]
CASES = {
    "baseline: batch 32": ["dataset.per_replica_batch_size=32"],
    "batch 256, linear scaling, no warmup": ["dataset.per_replica_batch_size=256"],
    "batch 256, linear scaling, 2-epoch warmup": ["dataset.per_replica_batch_size=256", "schedule.warmup_epochs=2"],
}


def train(case: str, seed: int, root: Path) -> float:
    workdir = root / f"{list(CASES).index(case)}-{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = xpdist.run([*COMMON, *CASES[case], f"seed={seed}"], cwd=workdir, quiet=True)
    except xpdist.RunFailed as failed:  # a diverged run is a result too
        return failed.result.metrics.get("val_accuracy", float("nan"))
    return result.metrics["val_accuracy"]


def table(results) -> str:
    rows = ["| configuration | learning rate | val_accuracy, median of 3 seeds | the 3 seeds |", "|---|---|---|---|"]
    for case, values in results.items():
        rate = "0.02" if "32" in case else "0.16"
        shown = ", ".join(f"{v:.3f}" for v in values)
        rows.append(f"| {case} | {rate} | {statistics.median(values):.3f} | {shown} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", action="store_true", help="write the table into docs/training.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xpdist-large-batch-") as tmp:
        jobs = [(case, seed) for case in CASES for seed in SEEDS]
        with ThreadPoolExecutor(max_workers=2) as pool:
            values = list(pool.map(lambda job: train(*job, Path(tmp)), jobs))
    results = {case: [v for (c, _), v in zip(jobs, values) if c == case] for case in CASES}
    text = table(results)
    print(text)
    if args.docs:
        write_docs(text)
        print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


def write_docs(text: str) -> None:
    """Puts the table between the markers of docs/training.md, leaving the rest of the page."""
    head, rest = PAGE.read_text().split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
