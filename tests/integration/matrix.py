"""Trains many cheap configs in a few task processes instead of one CLI run each.

A CLI run costs seconds, mostly importing TensorFlow, so the optimizer and precision matrices
run their cells several to a process: one process per Keras flavour and logical CPU count
(both are fixed once per process: TF_USE_LEGACY_KERAS and the logical devices). Each process
composes its cells' configs, checks and plans them as the CLI does (preflight), writes their
job directories and trains them with the task's own runner (build_strategy, build_context,
train), one strategy object per kind. MLflow is not involved: the CLI tests cover that.

`python tests/integration/matrix.py ROOT CELLS_JSON` is the task side.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
# One epoch: 4 steps of a global batch of 4 per replica, one validation step, nothing saved.
CHEAP = ["dataset=synthetic_regression", "dataset.num_examples=40", "dataset.per_replica_batch_size=4",
         "trainer.epochs=1", "trainer.progress=false", "trainer.keep_checkpoints=0", "tracking.log_model=false",
         "seed=3"]

Cell = Tuple[str, List[str]]  # (name, overrides on top of CHEAP)


def process_key(overrides: Sequence[str]) -> tuple:
    """(Keras flavour as keras=auto picks it, logical CPUs): what one task process fixes, read
    from a cell's strategy=, trainer= and devices.logical_cpus= overrides (no composition)."""
    from omegaconf import OmegaConf

    from xpdist.core.plan import keras_flavour

    given = dict(o.split("=", 1) for o in overrides)
    flavour = keras_flavour(OmegaConf.create({"keras": given.get("keras", "auto"),
                                              "trainer": {"name": given.get("trainer", "fit")},
                                              "strategy": {"name": given.get("strategy", "default")}}))
    return flavour, int(given.get("devices.logical_cpus", 1))


def run_grouped(root: Path, cells: Dict[str, List[str]], timeout: int = 400, most: int = 8) -> Dict[str, dict]:
    """Trains {name: overrides} in processes of one process_key each (see run), at most `most`
    cells to a process: a key with more is dealt round-robin over as few processes as that
    allows, so that no one process holds up the others while the two run side by side."""
    by_key: Dict[tuple, List[Cell]] = {}
    for name, overrides in cells.items():
        by_key.setdefault(process_key(overrides), []).append((name, overrides))
    processes = []
    for group in by_key.values():
        count = -(-len(group) // most)
        processes += [group[i::count] for i in range(count)]
    return run(root, processes, timeout=timeout)


def run(root: Path, processes: Iterable[Sequence[Cell]], timeout: int = 400) -> Dict[str, dict]:
    """Trains each group of cells in one process, JOBS processes at a time (the longest first).

    Returns {name: {"loss", "epochs"} or {"error"}}: a cell of a process that crashed gets
    the process's exit code and output as its error.
    """
    from tests.integration.harness import JOBS

    ordered = sorted((list(cells) for cells in processes), key=len, reverse=True)
    results: Dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        for found in pool.map(lambda cells: _run_process(root, cells, timeout), ordered):
            results.update(found)
    return results


def _run_process(root: Path, cells: List[Cell], timeout: int) -> Dict[str, dict]:
    from tests.helpers import xpdist_env

    proc = subprocess.run([sys.executable, __file__, str(root), json.dumps(cells)],
                          env=xpdist_env(), capture_output=True, text=True, timeout=timeout)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CELL "):
            found = json.loads(line[5:])
            results[found["name"]] = found
    for name, _ in cells:
        results.setdefault(name, {"error": f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"})
    return results


def _task(root: Path, cells: List[Cell]) -> None:
    """The task side: plans and trains each cell in this one process."""
    import traceback

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from xpdist.core.clusterenv import ClusterEnv
    from xpdist.core.protocol.jobdir import JobDir, JobSpec
    from xpdist.core.protocol.resolved import resolve
    from xpdist.core.schema import register_configs
    from xpdist.driver.checks import preflight

    jobs = []
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for name, overrides in cells:
            plain = resolve(compose(config_name="config", overrides=CHEAP + overrides))
            plan = preflight.check(plain, root)
            spec = JobSpec(OmegaConf.to_container(plain), plan, "", str(root))
            spec.write(JobDir(root / name))
            jobs.append((JobDir(root / name), plain, spec))
    fixed = {(s.plan.keras, cfg.devices.logical_cpus) for _, cfg, s in jobs}
    assert len(fixed) == 1, f"one Keras flavour and logical CPU count per process, not {fixed}"

    from xpdist.task import boot, runner
    from xpdist.task.main import prepare_environment

    boot.private_tempdir(JobDir(root).own_scratch())  # AutoGraph's files: exit_now (below) removes them

    prepare_environment(jobs[0][1], jobs[0][2].plan)
    tf = runner.start_tensorflow(jobs[0][1])
    strategies = {}
    # Not the chief: nothing is written to a metric file.
    not_chief = ClusterEnv("local", "worker", 1)
    for job, cfg, spec in jobs:
        plan = spec.plan
        found = {"name": job.root.name}
        try:
            key = (plan.strategy, tuple(plan.devices))
            if key not in strategies:
                strategies[key] = runner.build_strategy(tf, cfg, plan)
            ctx = runner.build_context(tf, cfg, spec, strategies[key], job, not_chief)
            final = runner.train(ctx)
            found.update(loss=final["loss"], epochs=len(ctx.history))
        except Exception as err:  # the other cells still run
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            cause = next((line for line in lines if "You must feed" in line), lines[0] if lines else "")
            found["error"] = f"{type(err).__name__}: {cause}\n" + "".join(traceback.format_exception(err))[-3000:]
        print("CELL " + json.dumps(found), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    _task(Path(sys.argv[1]), [(name, overrides) for name, overrides in json.loads(sys.argv[2])])
    # As the task ends: the kept iterators (keep_iterators) are never destroyed, since destroying
    # one waits on tf.data's autotuner thread, asleep up to 60 s.
    from xpdist.task.main import exit_now

    exit_now(0)
