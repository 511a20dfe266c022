"""Bad input, everywhere: every group and key, each refused in one line naming the key.

The line is what the driver prints (xpdist: error: ...): Hydra's compose errors as the CLI turns
them into one line (driver/checks/config_errors.py), else preflight's ConfigError. tests/unit/test_cli.py
runs the CLI itself on a sample of these (exit 2, no run, no output folder, no traceback).
"""

from __future__ import annotations

import numpy as np
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.unit.unit_helpers import plain
from xpdist.core.errors import ConfigError
from xpdist.driver.checks import config_errors, preflight

TF_CONFIG_PS = '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}'


def refusal(tmp_path, *overrides: str):
    """The one line the driver would print for these overrides, or None if they can run."""
    try:
        cfg = plain(*overrides)
    except Exception as err:  # Hydra's compose errors
        return config_errors.one_line(err)
    try:
        preflight.check(cfg, tmp_path)
        preflight.check_tracking_uri(cfg.tracking.uri or f"sqlite:///{tmp_path / 'mlflow.db'}")
    except ConfigError as err:
        return str(err)
    return None


def _npz(tmp_path, name: str, **arrays) -> str:
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


# (overrides, the key the line must name). Files are made by the test (see _files).
CASES = [
    # group options that do not exist, and options of one group given to another
    (["strategy=mirrord"], "strategy"),
    (["model=resnet"], "model"),
    (["dataset=imagenet"], "dataset"),
    (["optimizer=adadelta"], "optimizer"),
    (["trainer=keras"], "trainer"),
    (["cluster=kubernetes"], "cluster"),
    (["cross_ops=ring"], "cross_ops"),  # a communication option given to cross_ops
    (["communication=hierarchical"], "communication"),  # a cross_ops option given to communication
    # keys that belong to another option, and misspelled keys
    (["model.filters=[8]"], "model.filters"),  # linear has no filters
    (["model=mlp", "model.filters=[8]"], "model.filters"),
    (["dataset=digits", "dataset.num_examples=50"], "dataset.num_examples"),
    (["trainer.epoch=3"], "trainer.epoch"),
    (["+trainer.epoch=3"], "trainer.epoch"),
    (["+unknown.key=1"], "unknown"),
    # wrong types
    (["trainer.epochs=two"], "trainer.epochs"),
    (["optimizer.learning_rate=fast"], "optimizer.learning_rate"),
    (["devices.logical_cpus=[2]"], "devices.logical_cpus"),
    (["seed=1.5"], "seed"),
    (["optimizer.lr_scaling=cubic"], "optimizer.lr_scaling"),
    (["keras=keras4"], "keras"),
    # zero, negative and out-of-range values
    (["trainer.epochs=0"], "trainer.epochs"),
    (["trainer.epochs=-3"], "trainer.epochs"),
    (["dataset.per_replica_batch_size=0"], "dataset.per_replica_batch_size"),
    (["optimizer.learning_rate=0"], "optimizer.learning_rate"),
    (["optimizer.learning_rate=-0.1"], "optimizer.learning_rate"),
    (["dataset.validation_split=1.0"], "dataset.validation_split"),
    (["dataset.validation_split=-0.2"], "dataset.validation_split"),
    (["devices.logical_cpus=0"], "devices.logical_cpus"),
    (["trainer.steps_per_epoch=0"], "trainer.steps_per_epoch"),
    (["trainer.steps_per_execution=0"], "trainer.steps_per_execution"),
    (["trainer.keep_checkpoints=-1"], "trainer.keep_checkpoints"),
    (["trainer.log_every_n_steps=-1"], "trainer.log_every_n_steps"),
    (["dataset.per_replica_batch_size=1000"], "dataset.per_replica_batch_size"),  # larger than the data
    (["strategy=mirrored", "devices.logical_cpus=2", "strategy.devices=[/cpu:5]"], "strategy.devices"),
    (["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=0"], "cluster.workers"),
    (["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.max_restarts=-1"], "cluster.max_restarts"),
    (["strategy=parameter_server", "cluster=localhost", "cluster.ps=0"], "cluster.ps"),
    (["tracking.system_metrics_interval_s=0"], "tracking.system_metrics_interval_s"),
    (["strategy=mirrored", "cross_ops=hierarchical", "cross_ops.num_packs=-1"], "cross_ops.num_packs"),
    (["strategy=mirrored", "cross_ops=reduction_to_one_device", "cross_ops.reduce_to_device=/cpu:3"],
     "cross_ops.reduce_to_device"),
    (["strategy=multi_worker_mirrored", "cluster=localhost", "communication.timeout_seconds=0"],
     "communication.timeout_seconds"),
    (["loss=huber", "loss.delta=-1"], "loss.delta"),
    (["schedule=exponential", "schedule.decay_rate=0"], "schedule.decay_rate"),
    (["schedule=polynomial", "schedule.power=-2"], "schedule.power"),
    (["model.l2=-0.1"], "model.l2"),
    (["model=mlp", "model.dropout=1"], "model.dropout"),
    # names MLflow refuses (it would, after the training)
    (["tracking.register_model=bad/name:x"], "tracking.register_model"),
    (["tracking.register_model=m", "tracking.model_alias=v1 bad"], "tracking.model_alias"),
    (["tracking.register_model=m", "tracking.model_alias=v2"], "tracking.model_alias"),  # a version's name
    (["tracking.experiment="], "tracking.experiment"),
    # combinations that cannot work
    (["cross_ops=hierarchical"], "cross_ops"),  # without strategy=mirrored
    (["communication=ring"], "communication"),  # without multi_worker_mirrored
    (["strategy=parameter_server"], "cluster"),  # no cluster to hold a ps
    (["strategy=mirrored", "cluster=localhost"], "cluster"),  # a one-process strategy on a cluster
    (["cross_ops=nccl", "strategy=mirrored"], "cross_ops"),  # no GPU here
    (["model=cnn"], "model"),  # a conv net on feature vectors
    (["strategy=tpu"], "strategy.tpu"),  # no TPU attached
    (["keras=keras3", "strategy=multi_worker_mirrored", "cluster=localhost"], "keras"),
    (["optimizer.lr_scaling=table"], "optimizer.lr_table"),  # no rate for the global batch
    (["tracking.model_alias=champion"], "tracking.model_alias"),  # no registered model
    (["tracking.register_model=m", "tracking.model_alias=latest"], "tracking.model_alias"),  # reserved by MLflow
    (["tracking.register_model=m", "tracking.log_model=false"], "tracking.register_model"),
    (["strategy=mirrored", "devices.logical_cpus=2", "trainer.jit_compile=true"], "trainer.jit_compile"),
    # tracking URIs
    (["tracking.uri=file:///tmp/runs"], "tracking.uri"),
    (["tracking.uri=/tmp/runs"], "tracking.uri"),
    (["tracking.uri=ftp://example.invalid/x"], "tracking.uri"),
    (["tracking.uri=http://127.0.0.1:9"], "tracking.uri"),  # nothing listens on the discard port
    # user functions and files
    (["model=custom", "model._target_=no_such_package.build"], "model._target_"),
    (["dataset=custom", "dataset._target_=no_such_package.make"], "dataset._target_"),
    (["dataset=npz", "dataset.path=missing.npz"], "dataset.path"),
    (["dataset=npz", "dataset.path=NPZ_EMPTY"], "dataset.path"),
    (["dataset=npz", "dataset.path=NPZ_NO_X"], "dataset.path"),
    (["dataset=npz", "dataset.path=NPZ_CORRUPT"], "dataset.path"),
    (["dataset=npz", "dataset.path=NPZ_LENGTHS"], "dataset.path"),
    (["dataset=tfrecord"], "dataset.features"),
    (["dataset=tfrecord", "dataset.files=[TFR_NONE]", "+dataset.features.x={dtype: float32, shape: [2]}",
      "+dataset.features.label={dtype: int64, shape: []}", "dataset.num_classes=2"], "dataset.files"),
    (["dataset=image_folder", "dataset.path=EMPTY_DIR"], "dataset.path"),
]


def _files(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "images").mkdir()
    return {"NPZ_EMPTY": str(tmp_path / "empty.npz"), "NPZ_CORRUPT": str(tmp_path / "corrupt.npz"),
            "NPZ_NO_X": _npz(tmp_path, "no_x.npz", y=np.zeros(10)),
            "NPZ_LENGTHS": _npz(tmp_path, "lengths.npz", x=np.zeros((10, 2)), y=np.zeros(9)), "TFR_NONE": str(tmp_path / "none-*.tfrecord"),
            "EMPTY_DIR": str(tmp_path / "images")}


def test_there_are_at_least_forty_cases_and_every_group_is_covered():
    keys = {key.split(".")[0] for _, key in CASES}
    assert len(CASES) >= 40
    assert {"strategy", "cross_ops", "communication", "cluster", "model", "dataset", "optimizer", "trainer",
            "devices", "tracking", "keras", "seed"} <= keys


@pytest.mark.parametrize("overrides, key", CASES, ids=[" ".join(o) for o, _ in CASES])
def test_a_bad_input_is_one_line_naming_its_key(tmp_path, overrides, key):
    for placeholder, path in _files(tmp_path).items():
        overrides = [o.replace(placeholder, path) for o in overrides]
    line = refusal(tmp_path, *overrides)
    assert line is not None, f"{overrides} was accepted"
    assert "\n" not in line and "Traceback" not in line, line
    assert key in line, line


def test_a_malformed_tf_config_is_one_line(tmp_path, monkeypatch):
    for raw in ("{not json", '{"cluster": {}}', TF_CONFIG_PS.replace('"index": 0', '"index": 7')):
        monkeypatch.setenv("TF_CONFIG", raw)
        line = refusal(tmp_path, "strategy=multi_worker_mirrored", "cluster=tf_config")
        assert line and "\n" not in line and line.startswith("TF_CONFIG="), line


# Keys a user sets often, with their type: the property below throws values of every kind at them.
TYPED_KEYS = {
    "trainer.epochs": int, "dataset.per_replica_batch_size": int, "devices.logical_cpus": int, "seed": int,
    "trainer.keep_checkpoints": int, "trainer.log_every_n_steps": int, "trainer.steps_per_epoch": int,
    "optimizer.learning_rate": float, "dataset.validation_split": float, "optimizer.momentum": float,
    "tracking.experiment": str, "trainer.progress": bool, "verbose": bool,
}
_VALUE = st.one_of(st.integers(-5, 50), st.floats(-2, 2, allow_nan=False), st.booleans(),
                   st.text(alphabet="abcxyz_-019.", min_size=1, max_size=6))


# Where an accepted value of these keys shows in the plan that preflight returns.
IN_THE_PLAN = {
    "dataset.per_replica_batch_size": lambda plan: plan.per_replica_batch_size,
    "trainer.steps_per_epoch": lambda plan: plan.steps_per_epoch,
    "optimizer.learning_rate": lambda plan: plan.learning_rate,  # lr_scaling=none by default
    "devices.logical_cpus": lambda plan: None,  # one replica under the default strategy, whatever the count
}


def _as_bool(typed) -> bool:
    """What OmegaConf makes of a value given to a bool key that it accepts (BooleanNode)."""
    if not isinstance(typed, str):
        return bool(typed)
    try:
        return int(typed) != 0  # "01" and "1_0" too: int() reads them
    except ValueError:
        return typed.lower() in ("true", "yes", "on", "y")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(TYPED_KEYS)), value=_VALUE)
@example(key="trainer.progress", value="01")  # found by the property: a string int() reads is a number
def test_any_value_of_any_key_runs_or_is_one_line(tmp_path, key, value):
    """Either exactly one line that names the key, or the value reaches the config (and the plan)
    as typed: an accepted value is the user's, not something silently changed or dropped."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    overrides = (f"{key}={text}",) + (() if key == "trainer.progress" else ("trainer.progress=false",))
    line = refusal(tmp_path, *overrides)
    if line is not None:
        assert "\n" not in line and "Traceback" not in line, line
        assert key in line or key.split(".")[-1] in line, line
        return
    cfg = plain(*overrides)
    plan = preflight.check(cfg, tmp_path)
    kept = OmegaConf.select(cfg, key)
    typed = OverridesParser.create().parse_override(overrides[0]).value()  # the value as Hydra reads it
    assert isinstance(kept, TYPED_KEYS[key]), (key, text, kept)
    if TYPED_KEYS[key] is str:
        assert kept == str(typed), (key, text, kept)  # `false` reads as a bool: the string is 'False'
    elif TYPED_KEYS[key] is bool:  # OmegaConf's rule: a number, or a string int() reads, is true unless 0
        expected = _as_bool(typed)
        assert kept == expected, (key, text, kept)
    else:
        assert kept == pytest.approx(float(typed)), (key, text, kept)
    shown = IN_THE_PLAN.get(key, lambda plan: None)(plan)
    assert shown is None or shown == pytest.approx(kept), (key, text, shown)


def test_an_accepted_value_is_the_one_that_runs(tmp_path):
    """The fixed-example counterpart of the property: values at the edge of what is allowed."""
    cfg = plain("dataset.validation_split=0", "trainer.keep_checkpoints=0", "strategy=mirrored",
                "devices.logical_cpus=2", "dataset.per_replica_batch_size=5", "cross_ops=hierarchical",
                "cross_ops.num_packs=0")
    plan = preflight.check(cfg, tmp_path)
    assert (plan.num_val, plan.validation_steps) == (0, 0)
    assert (plan.num_replicas, plan.global_batch_size) == (2, 10) and plan.cross_ops == "hierarchical"
    assert cfg.trainer.keep_checkpoints == 0 and cfg.cross_ops.num_packs == 0
