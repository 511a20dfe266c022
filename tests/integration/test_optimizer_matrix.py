"""Every single-process strategy x trainer x optimizer trains one epoch to a finite loss.

Adam (like SGD with momentum) has slot variables; SGD without momentum has none. Keras 3
created them inside the custom loop's first traced step, which failed under
MirroredStrategy ("You must feed a value for placeholder tensor 'cond/else/_1/cond/
Placeholder_1'"): see xpdist.task.train.common.build_optimizer.

20 CLI runs would take minutes, mostly importing TensorFlow, so the 20 cells run in four
task processes, one per Keras flavour and logical CPU count (both are fixed once per
process: TF_USE_LEGACY_KERAS and the logical devices). Each process composes its cells'
configs, checks and plans them as the CLI does (preflight), writes their job directories
and trains them with the task's own runner (build_strategy, build_context, train), one
strategy object per kind. MLflow is not involved: test_strategies' CLI runs cover that.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = {
    "default": ["strategy=default"],
    "one_device": ["strategy=one_device"],
    "mirrored": ["strategy=mirrored", "devices.logical_cpus=2"],
    "central_storage": ["strategy=central_storage", "devices.logical_cpus=2"],
    "multi_worker_mirrored": ["strategy=multi_worker_mirrored"],  # cluster=local: one worker
}
TRAINERS = ("fit", "ctl")
OPTIMIZERS = ("sgd", "adam")
# One epoch: 4 steps of a global batch of 4 per replica, one validation step, nothing saved.
CHEAP = ["dataset=synthetic_regression", "dataset.num_examples=40", "dataset.per_replica_batch_size=4",
         "trainer.epochs=1", "trainer.progress=false", "trainer.keep_checkpoints=0", "tracking.log_model=false",
         "seed=3"]
CELLS = {(s, t, o): STRATEGIES[s] + [f"trainer={t}", f"optimizer={o}"]
         for s in STRATEGIES for t in TRAINERS for o in OPTIMIZERS}


def _name(cell: tuple) -> str:
    return "-".join(cell)


def _process_key(strategy: str, trainer: str) -> tuple:
    """(Keras flavour as keras=auto picks it, logical CPUs): what one task process fixes."""
    from omegaconf import OmegaConf

    from xpdist.core.plan import keras_flavour

    flavour = keras_flavour(OmegaConf.create({"keras": "auto", "trainer": {"name": trainer},
                                              "strategy": {"name": strategy}}))
    return flavour, 2 if "devices.logical_cpus=2" in STRATEGIES[strategy] else 1


def _run_process(root: Path, cells: List[tuple]) -> Dict[str, dict]:
    from tests.helpers import xpdist_env

    proc = subprocess.run([sys.executable, __file__, str(root), json.dumps([[_name(c), CELLS[c]] for c in cells])],
                          env=xpdist_env(), capture_output=True, text=True, timeout=300)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CELL "):
            found = json.loads(line[5:])
            results[found["name"]] = found
    for cell in cells:  # a process that crashed: every cell it had not reported failed
        results.setdefault(_name(cell), {"error": f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                                                  f"{proc.stderr[-3000:]}"})
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Dict[str, dict]:
    from tests.integration.harness import JOBS

    root = tmp_path_factory.mktemp("optimizer-matrix")
    processes: Dict[tuple, List[tuple]] = {}
    for cell in CELLS:
        processes.setdefault(_process_key(cell[0], cell[1]), []).append(cell)
    ordered = sorted(processes.values(), key=len, reverse=True)  # the longest first
    results: Dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        for found in pool.map(lambda cells: _run_process(root, cells), ordered):
            results.update(found)
    return results


@pytest.mark.parametrize("cell", CELLS, ids=_name)
def test_trains_one_epoch_to_a_finite_loss(matrix, cell):
    found = matrix[_name(cell)]
    assert "error" not in found, f"{_name(cell)}: {found['error']}"
    assert found["epochs"] == 1, found
    assert math.isfinite(found["loss"]), found


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_fit_and_ctl_report_the_same_loss(matrix, strategy, optimizer):
    """Same seed, data and global batch: the custom loop's loss is Model.fit's (to float32 sums)."""
    fit, ctl = (matrix[_name((strategy, trainer, optimizer))] for trainer in TRAINERS)
    if "error" in fit or "error" in ctl:
        pytest.skip("a cell failed: see test_trains_one_epoch_to_a_finite_loss")
    assert ctl["loss"] == pytest.approx(fit["loss"], rel=1e-4)


def _task(root: Path, cells: List[list]) -> None:
    """The task side: plans and trains each cell in this one process."""
    import traceback

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from xpdist.core.clusterenv import ClusterEnv
    from xpdist.core.jobdir import JobDir, JobSpec
    from xpdist.core.schema import register_configs
    from xpdist.driver import preflight
    from xpdist.driver.job import plain_config

    jobs = []
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for name, overrides in cells:
            plain = OmegaConf.create(plain_config(compose(config_name="config", overrides=CHEAP + overrides)))
            plan = preflight.check(plain, root)
            spec = JobSpec(OmegaConf.to_container(plain), plan, "", str(root))
            spec.write(JobDir(root / name))
            jobs.append((JobDir(root / name), plain, spec))
    assert len({(s.plan.keras, cfg.devices.logical_cpus) for _, cfg, s in jobs}) == 1, "see _process_key"

    from xpdist.task import runner
    from xpdist.task.main import prepare_environment

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
    _task(Path(sys.argv[1]), json.loads(sys.argv[2]))
