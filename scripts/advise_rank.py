"""Does the advisor's order predict full training? Runs `python -m xpdist advise`, then every
candidate it finished as a full run (5 epochs, 3 repetitions, interleaved), and prints both
tables and the Spearman rank correlation between the probes' and the full runs' medians, and
how well the full runs' repetitions agree with each other (the most a probe can show).

    python scripts/advise_rank.py --budget 120 -- model=cnn dataset=synthetic_images
    python scripts/advise_rank.py --budget 180 -- model=keras_app model.architecture=MobileNetV2 \
        dataset=synthetic_images dataset.num_examples=512

Every run goes to ./mlflow.db (experiment xpdist for the advisor, advise-rank for the full runs).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xpdist import api  # noqa: E402  (the checkout's own package)


def ranks(values: Sequence[float]) -> List[float]:
    """1 for the largest; ties share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's correlation of the ranks (Spearman's rho, ties included)."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else float("nan")


def self_agreement(runs: Sequence[Sequence[float]]) -> List[float]:
    """How well the full runs order the candidates among themselves: for each repetition, the
    Spearman correlation of its rates with the median of the other repetitions' (runs[c][r] is
    candidate c's rate in repetition r). A short probe is one more such measurement, so these
    bound what its correlation with the full runs can show."""
    reps = len(runs[0])
    return [spearman([c[r] for c in runs], [statistics.median(c[:r] + c[r + 1:]) for c in runs])
            for r in range(reps)] if reps > 1 else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=120)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--advise", nargs="*", default=[],
                        help="advisor keys (default: the advisor's own, logical_cpus=[2,4] on a CPU)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    done = subprocess.run([sys.executable, "-m", "xpdist", "advise", f"budget_s={args.budget}", *args.advise,
                           *args.overrides], capture_output=True, text=True)
    print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    found = re.search(r"table and chart: (\S+)", done.stdout)
    if done.returncode != 0 or not found:
        return 1
    with open(Path(found.group(1)) / "advice.csv") as handle:
        probes = [r for r in csv.DictReader(handle) if r["status"] == "FINISHED"]
    full: Dict[str, List[float]] = {r["label"]: [] for r in probes}
    for rep in range(args.repeats):  # interleaved: a slow spell of the machine hits every candidate alike
        for row in probes:
            # the candidate's own batch replaces the advisor's starting one
            base = [w for w in args.overrides if not w.startswith("dataset.per_replica_batch_size=")]
            words = [*base, *row["overrides"].split(), f"trainer.epochs={args.epochs}",
                     "trainer.progress=false", "tracking.log_model=false", "tracking.experiment=advise-rank",
                     f"tracking.run_name=full-{row['label']}-{rep}"]
            result = api.run(words, quiet=True)
            full[row["label"]].append(result.metrics["steady_examples_per_sec"])
            print(f"rep {rep} {row['label']}: {full[row['label']][-1]:,.0f} examples/s", flush=True)
    probe_rates = [float(r["examples_per_sec"]) for r in probes]
    medians = [statistics.median(full[r["label"]]) for r in probes]
    print("\n| candidate | probe examples/s | probe rank | full-run median examples/s (runs) | full rank |")
    print("| --- | --- | --- | --- | --- |")
    for row, rate, pr, med, fr in zip(probes, probe_rates, ranks(probe_rates), medians, ranks(medians)):
        runs = ", ".join(f"{v:,.0f}" for v in full[row["label"]])
        print(f"| {row['label']} | {rate:,.0f} | {pr:g} | {med:,.0f} ({runs}) | {fr:g} |")
    print(f"\nSpearman rank correlation (probe vs full-run medians, {len(probes)} candidates): "
          f"{spearman(probe_rates, medians):.2f}")
    agreement = self_agreement([list(full[r["label"]]) for r in probes])
    if agreement:
        print("Full runs against each other (each repetition against the others' median): "
              + ", ".join(f"{a:.2f}" for a in agreement))
    return 0


if __name__ == "__main__":
    sys.exit(main())
