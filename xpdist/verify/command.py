"""`python -m xpdist verify [verify.steps=N] OVERRIDES`: the user's configuration for a few steps
against a one-device reference, compared step by step and variable by variable.

    compose + preflight (as a training)  ->  verification run created in MLflow (RUNNING)
    -> reference: strategy=default, cluster=local, one replica whose batch is the run's global
       batch, same Keras, seed, data, optimizer, learning rate, schedule, loss; it saves its
       initial weights
    -> run: the user's configuration, starting from those weights
    -> compare (xpdist/verify/compare.py) -> verdict tag, tables as artifacts, run closed

Both trainings are real jobs of the driver (xpdist/driver/jobs/job.py), children of the
verification run, so every engine and strategy a training can use is verified the same way.
Both run steps_per_execution=1, one epoch of verify.steps steps, and save no model. Their
tasks record what is compared (xpdist/task/verify_recorder.py), told so by the environment
(xpdist/core/protocol/verification.py). This process never imports TensorFlow.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from xpdist.core import strategies
from xpdist.core.errors import ConfigError
from xpdist.core.protocol.verification import INITIAL_FILE, INIT_ENV, RECORD_ENV

# Steps each training runs: enough for a wrong gradient scale or a per-replica statistic to show
# in the weights, few enough that a verification costs two short trainings.
DEFAULT_STEPS = 5
# Keys the reference sets itself: a user's override of them is the run's, not the reference's.
REFERENCE_KEYS = ("strategy", "cross_ops", "communication", "cluster", "devices", "keras",
                  "dataset.per_replica_batch_size", "optimizer.learning_rate", "optimizer.lr_scaling",
                  "optimizer.reference_batch_size", "optimizer.lr_table")
# Keys both trainings set: a short training, one step per call, nothing saved.
FORCED_KEYS = ("trainer.epochs", "trainer.steps_per_epoch", "trainer.steps_per_execution", "tracking.log_model",
               "trainer.keep_checkpoints", "trainer.progress", "tracking.resume", "tracking.run_name")
# keras=auto's choice of tf-keras for trainer=fit, and the upstream reason for it.
KERAS_FALLBACK = {
    "multi_worker_mirrored": "Keras 3's Model.fit fails under MultiWorkerMirroredStrategy "
                             "(keras-team/keras#20585, tensorflow/tensorflow#72388)",
    "central_storage": "Keras 3's Model.fit logs a wrong loss and wrong metrics under CentralStorageStrategy",
}


def parse(argv: List[str]) -> Tuple[int, List[str]]:
    """verify.steps=N (verify's own key) apart from the training's overrides.

    Raises:
        ConfigError: an unknown verify key or a bad step count.
    """
    steps, overrides = DEFAULT_STEPS, []
    for word in argv:
        if not word.startswith("verify."):
            overrides.append(word)
            continue
        key, _, value = word.partition("=")
        if key != "verify.steps":
            raise ConfigError(key, word, "verify has one key of its own, verify.steps",
                              "Use verify.steps=N (steps of each training, default 5).")
        if not value.isdigit() or int(value) < 1:
            raise ConfigError("verify.steps", value, "expected a whole number of steps, 1 or more",
                              "Use e.g. verify.steps=5.")
        steps = int(value)
    return steps, overrides


def _key(word: str) -> str:
    return word.lstrip("+~").split("=", 1)[0]


def _without(words: List[str], keys: Sequence[str]) -> List[str]:
    return [w for w in words if not any(_key(w) == k or _key(w).startswith(k + ".") for k in keys)]


def forced(steps: int) -> List[str]:
    return ["trainer.epochs=1", f"trainer.steps_per_epoch={steps}", "trainer.steps_per_execution=1",
            "tracking.log_model=false", "trainer.keep_checkpoints=0", "trainer.progress=false", "tracking.resume=null"]


def compose(words: List[str], launch_dir: Path):
    """The config `python -m xpdist WORDS` composes and the plan its preflight makes of it.

    Raises:
        ConfigError: the words do not compose (one line), or preflight refuses the config.
    """
    from hydra import compose as hydra_compose, initialize_config_module

    from xpdist.core.protocol.resolved import resolve
    from xpdist.core.schema import register_configs
    from xpdist.driver.checks import config_errors, preflight

    register_configs()
    try:
        with initialize_config_module("xpdist.conf", version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=words)
    except config_errors.COMPOSE_ERRORS as err:
        raise ConfigError("overrides", " ".join(words), config_errors.one_line(err),
                          "Fix the override; `python -m xpdist --check OVERRIDES` shows the plan.") from None
    cfg = resolve(cfg)  # once, as the driver does: the one object the job reads
    return cfg, preflight.check(cfg, launch_dir)


class Checked:
    """Both trainings, composed and checked: their words, configs and plans; what xpdist changed."""

    def __init__(self, steps: int, overrides: List[str], run: tuple, reference: tuple, notes: Dict[str, str]):
        self.steps, self.overrides, self.notes = steps, overrides, notes
        self.run_words, self.cfg, self.plan = run
        self.ref_words, self.ref_cfg, self.ref_plan = reference

    @property
    def precision(self) -> str:
        return str(self.cfg.trainer.precision)


def check(overrides: List[str], steps: int, launch_dir: Path) -> Checked:
    """Composes and checks the run and its reference before anything is created.

    Raises:
        ConfigError: the configuration cannot run, or cannot be verified (parameter_server).
    """
    from xpdist.driver.checks import preflight
    from xpdist.tracking import store

    run_words = _without(overrides, FORCED_KEYS) + forced(steps)
    cfg, plan = compose(run_words, launch_dir)
    preflight.check_tracking_uri(store.resolve_uri(cfg.tracking.uri, launch_dir))
    spec = strategies.get(plan.strategy)
    if spec.needs.coordinator:
        raise ConfigError("strategy", plan.strategy, "its workers apply their updates asynchronously, each to the "
                          "weights as the parameter servers hold them at that moment, so the weights depend on "
                          "timing and no one-device run can reproduce them", "Verify the model and training under "
                          "strategy=multi_worker_mirrored (synchronous, on the same cluster), then train it under "
                          "parameter_server.")
    if spec.replicas_at_run_time:
        raise ConfigError("strategy", plan.strategy, "its replica count is known only once TensorFlow connects, "
                          "so the reference's batch cannot be planned", "Verify under strategy=mirrored or "
                          "multi_worker_mirrored with the same global batch.")
    reference = _without(run_words, REFERENCE_KEYS) + [
        "strategy=default", "cluster=local", f"keras={plan.keras}",
        f"dataset.per_replica_batch_size={plan.global_batch_size}",
        "optimizer.lr_scaling=none", f"optimizer.learning_rate={plan.learning_rate!r}"]
    ref_cfg, ref_plan = compose(reference, launch_dir)
    if (ref_plan.global_batch_size, ref_plan.steps_per_epoch) != (plan.global_batch_size, plan.steps_per_epoch):
        raise ConfigError("dataset", cfg.dataset.name, f"the one-device reference plans a global batch of "
                          f"{ref_plan.global_batch_size} and {ref_plan.steps_per_epoch} steps, the run "
                          f"{plan.global_batch_size} and {plan.steps_per_epoch}", "Use a data source whose size "
                          "does not depend on the replica count, or set trainer.steps_per_epoch.")
    return Checked(steps, overrides, (run_words, cfg, plan), (reference, ref_cfg, ref_plan),
                   notes(cfg, plan))


def notes(cfg, plan) -> Dict[str, str]:
    """What xpdist itself changes in the user's request to work around an upstream bug, as tags."""
    found = {}
    if cfg.keras == "auto" and plan.keras == "legacy" and cfg.trainer.name == "fit":
        why = KERAS_FALLBACK.get(plan.strategy, f"Keras 3's Model.fit does not train right under {plan.strategy}")
        found["xpdist.verify.fallback.keras"] = f"keras=auto trains with tf-keras: {why}"
    return found


def environment(record: Path, initial: Path = None) -> Dict[str, str]:
    """The variables that make a training's tasks record (and start from `initial`)."""
    return {RECORD_ENV: str(record), INIT_ENV: str(initial) if initial else ""}


def initial_weights(record: Path) -> Path:
    return record / INITIAL_FILE


def out_dir(launch_dir: Path) -> Path:
    folder = launch_dir / "verify" / time.strftime("%Y-%m-%d_%H-%M-%S")
    n = 1
    while folder.exists():  # two verifications in one second
        n += 1
        folder = folder.with_name(f"{folder.name.split('+')[0]}+{n}")
    folder.mkdir(parents=True)
    return folder


def set_env(values: Dict[str, str]) -> Dict[str, str]:
    """Sets variables of this process (the tasks inherit them); returns the previous values."""
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    return previous


def restore_env(previous: Dict[str, str]) -> None:
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
