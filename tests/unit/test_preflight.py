"""Bad input is rejected before TensorFlow starts, with one line that names the config key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import closed_port
from tests.unit.unit_helpers import plain
from xpdist.driver.checks import preflight
from xpdist.core.errors import ConfigError


def reject(tmp_path: Path, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        preflight.check(plain(*overrides), tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{err.value.key}=")
    return err.value


@pytest.mark.parametrize("strategy", ["default", "one_device", "central_storage", "multi_worker_mirrored"])
def test_cross_ops_other_than_auto_needs_mirrored(tmp_path, strategy):
    err = reject(tmp_path, f"strategy={strategy}", "cross_ops=hierarchical")
    assert err.key == "cross_ops" and err.received == "hierarchical"
    assert "strategy=mirrored" in str(err)


@pytest.mark.parametrize("trainer", ["fit", "ctl"])
def test_central_storage_refuses_mixed_float16_before_tensorflow_starts(tmp_path, trainer):
    err = reject(tmp_path, "strategy=central_storage", "devices.logical_cpus=2", "trainer.precision=mixed_float16",
                 f"trainer={trainer}")
    assert err.key == "trainer.precision" and err.received == "mixed_float16"
    assert "mixed_bfloat16" in str(err)
    preflight.check(plain("strategy=central_storage", "devices.logical_cpus=2", "trainer.precision=mixed_bfloat16"),
                    tmp_path)


def test_nccl_cross_ops_needs_gpus(tmp_path):
    err = reject(tmp_path, "strategy=mirrored", "cross_ops=nccl")
    assert err.key == "cross_ops" and "needs GPUs" in str(err)


def test_nccl_communication_needs_gpus(tmp_path):
    err = reject(tmp_path, "strategy=multi_worker_mirrored", "communication=nccl")
    assert err.key == "communication" and "needs GPUs" in str(err)


@pytest.mark.parametrize("strategy", ["default", "mirrored", "central_storage"])
def test_communication_other_than_auto_needs_multi_worker_mirrored(tmp_path, strategy):
    err = reject(tmp_path, f"strategy={strategy}", "communication=ring")
    assert err.key == "communication" and err.received == "ring"


def test_tpu_without_a_tpu_attached(tmp_path):
    if any(Path("/dev").glob("accel*")):
        pytest.skip("this machine has a TPU")
    err = reject(tmp_path, "strategy=tpu")
    assert err.key == "strategy.tpu" and "no TPU" in str(err)


def test_tpu_address_that_does_not_answer(tmp_path):
    address = f"grpc://127.0.0.1:{closed_port()}"
    err = reject(tmp_path, "strategy=tpu", f"strategy.tpu={address}")
    assert err.key == "strategy.tpu" and err.received == address


@pytest.mark.parametrize("size", [0, -4])
def test_per_replica_batch_size_below_one(tmp_path, size):
    err = reject(tmp_path, f"dataset.per_replica_batch_size={size}")
    assert err.key == "dataset.per_replica_batch_size" and err.received == size


def test_dataset_smaller_than_one_global_batch(tmp_path):
    err = reject(tmp_path, "strategy=mirrored", "devices.logical_cpus=4", "dataset.per_replica_batch_size=8",
                 "dataset.num_examples=20")
    assert err.key == "dataset.per_replica_batch_size"
    assert "8 x 4 replicas = 32" in str(err) and "20 training examples" in str(err)


def test_validation_split_smaller_than_one_global_batch(tmp_path):
    err = reject(tmp_path, "dataset.num_examples=100", "dataset.per_replica_batch_size=10",
                 "dataset.validation_split=0.05")
    assert err.key == "dataset.validation_split"


@pytest.mark.parametrize("devices", ["[/cpu:0,/cpu:2]", "[/gpu:0]", "[/xpu:0]", "[cpu0]"])
def test_device_that_does_not_exist(tmp_path, devices):
    err = reject(tmp_path, "strategy=mirrored", "devices.logical_cpus=2", f"strategy.devices={devices}")
    assert err.key == "strategy.devices"
    assert "does not exist" in str(err)


def test_devices_that_exist_pass(tmp_path):
    plan = preflight.check(plain("strategy=mirrored", "devices.logical_cpus=3", "strategy.devices=[/cpu:0,CPU:2]"),
                           tmp_path)
    assert plan.num_replicas == 2 and plan.devices == ["/cpu:0", "CPU:2"]


def test_missing_npz_file(tmp_path):
    err = reject(tmp_path, "dataset=npz", "dataset.path=nowhere/data.npz")
    assert err.key == "dataset.path" and err.received == "nowhere/data.npz"
    assert str(tmp_path / "nowhere" / "data.npz") in str(err)


def test_npz_without_a_path(tmp_path):
    assert reject(tmp_path, "dataset=npz").key == "dataset.path"


def test_npz_without_the_arrays(tmp_path):
    np.savez(tmp_path / "data.npz", features=np.zeros((10, 2)))
    err = reject(tmp_path, "dataset=npz", "dataset.path=data.npz")
    assert err.key == "dataset.path" and "'x'" in str(err)


def test_npz_size_comes_from_the_file(tmp_path):
    np.savez(tmp_path / "data.npz", x=np.zeros((40, 3), "float32"), y=np.zeros(40, "int32"))
    plan = preflight.check(plain("dataset=npz", "dataset.path=data.npz", "dataset.per_replica_batch_size=8",
                                 "dataset.validation_split=0.2"), tmp_path)
    assert (plan.num_examples, plan.num_train, plan.num_val) == (40, 32, 8)
    assert (plan.steps_per_epoch, plan.validation_steps) == (4, 1)


def test_unreachable_tracking_server():
    uri = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ConfigError) as err:
        preflight.check_tracking_server(uri)
    assert err.value.key == "tracking.uri" and err.value.received == uri
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("uri", ["sqlite:////tmp/x/mlflow.db", "postgresql+psycopg2://u@127.0.0.1:1/db",
                                 "databricks"])
def test_tracking_uris_that_are_not_servers_are_not_probed(uri):
    preflight.check_tracking_uri(uri)


@pytest.mark.parametrize("uri", ["file:///some/dir", "/some/dir", "./mlruns"])
def test_a_file_store_is_refused_with_what_to_use(uri, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError) as err:
        preflight.check_tracking_uri(uri)
    message = str(err.value)
    assert err.value.key == "tracking.uri" and err.value.received == uri and "\n" not in message
    assert "file store" in message and "sqlite:///" in message and "http://" in message


def test_a_file_store_is_accepted_with_mlflows_own_opt_in(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    preflight.check_tracking_uri("file:///some/dir")


def test_an_unknown_tracking_uri_scheme_is_refused():
    with pytest.raises(ConfigError) as err:
        preflight.check_tracking_uri("sqlit:///mlflow.db")
    assert err.value.key == "tracking.uri" and "sqlit://" in str(err.value) and "sqlite:///" in str(err.value)


@pytest.mark.parametrize("overrides, key", [
    (["model=cnn"], "model"),  # synthetic_regression: one feature per example, not an image
    (["model=cnn", "dataset.num_features=64"], "model"),
    (["devices.logical_cpus=0"], "devices.logical_cpus"),
    (["trainer.epochs=0"], "trainer.epochs"),
    (["trainer.steps_per_epoch=0"], "trainer.steps_per_epoch"),
    (["optimizer.learning_rate=-0.1"], "optimizer.learning_rate"),
    (["dataset.validation_split=1.0"], "dataset.validation_split"),
    (["trainer.log_every_n_steps=-1"], "trainer.log_every_n_steps"),
    (["strategy=parameter_server"], "cluster"),
    (["optimizer.lr_scaling=table", "++optimizer.lr_table={64: 0.1}"], "optimizer.lr_table"),
    (["strategy=multi_worker_mirrored", "keras=keras3"], "keras"),
])
def test_other_bad_values_name_their_key(tmp_path, overrides, key):
    assert reject(tmp_path, *overrides).key == key


@pytest.mark.parametrize("overrides", [
    ["model=cnn", "dataset=digits"],
    ["model=cnn", "dataset=synthetic_images", "dataset.num_examples=128"],
    ["model=mlp", "dataset=digits"],
    ["strategy=multi_worker_mirrored", "keras=keras3", "trainer=ctl"],
])
def test_configs_that_can_run_pass(tmp_path, overrides):
    preflight.check(plain(*overrides), tmp_path)


@pytest.mark.parametrize("overrides, warned", [
    (["strategy=central_storage", "devices.logical_cpus=2", "keras=keras3"], True),
    (["strategy=central_storage", "devices.logical_cpus=2"], False),  # auto: tf-keras
    (["strategy=central_storage", "devices.logical_cpus=2", "keras=keras3", "trainer=ctl"], False),
])
def test_keras3_fit_under_central_storage_warns(tmp_path, capsys, overrides, warned):
    preflight.check(plain(*overrides), tmp_path)
    err = capsys.readouterr().err
    assert ("keras=keras3: Keras 3's Model.fit logs wrong loss" in err) == warned, err


def test_cnn_on_npz_follows_the_array_shape(tmp_path):
    np.savez(tmp_path / "flat.npz", x=np.zeros((40, 3), "float32"), y=np.zeros(40, "int32"))
    np.savez(tmp_path / "images.npz", x=np.zeros((40, 8, 8), "float32"), y=np.zeros(40, "int32"))
    assert reject(tmp_path, "model=cnn", "dataset=npz", "dataset.path=flat.npz").key == "model"
    preflight.check(plain("model=cnn", "dataset=npz", "dataset.path=images.npz", "dataset.per_replica_batch_size=8"),
                    tmp_path)


def test_xla_over_several_replicas_of_one_process(tmp_path):
    err = reject(tmp_path, "strategy=mirrored", "devices.logical_cpus=2", "trainer.jit_compile=true")
    assert err.key == "trainer.jit_compile" and "keras#19005" in str(err)
    assert "\n" not in str(err)


@pytest.mark.parametrize("value", ["yes", "1"])
def test_jit_compile_other_than_auto_true_false(tmp_path, value):
    assert reject(tmp_path, f"trainer.jit_compile={value}").key == "trainer.jit_compile"


@pytest.mark.parametrize("overrides", [["trainer.jit_compile=true"], ["trainer.jit_compile=false"],
                                       ["trainer.precision=mixed_float16", "strategy=mirrored",
                                        "devices.logical_cpus=2"],
                                       ["trainer.jit_compile=true", "strategy=multi_worker_mirrored"]])
def test_precision_and_xla_accepted(tmp_path, overrides):
    plan = preflight.check(plain(*overrides), tmp_path)
    assert plan.num_replicas >= 1


def test_model_alias_needs_a_registered_model(tmp_path):
    assert reject(tmp_path, "tracking.model_alias=champion").key == "tracking.model_alias"


def test_registering_needs_a_logged_model(tmp_path):
    err = reject(tmp_path, "tracking.register_model=digits", "tracking.log_model=false")
    assert err.key == "tracking.register_model"


def test_a_negative_number_of_packs_is_refused(tmp_path):
    err = reject(tmp_path, "strategy=mirrored", "cross_ops=hierarchical", "cross_ops.num_packs=-1")
    assert err.key == "cross_ops.num_packs" and err.received == -1 and "0 for no packing" in str(err)


def test_no_packing_is_a_number_of_packs_tensorflow_takes(tmp_path):
    """TensorFlow's HierarchicalCopyAllReduce and NcclAllReduce take num_packs >= 0, 0 packing nothing."""
    cfg = plain("strategy=mirrored", "cross_ops=hierarchical", "cross_ops.num_packs=0", "devices.logical_cpus=2")
    plan = preflight.check(cfg, tmp_path)
    assert cfg.cross_ops.num_packs == 0 and plan.cross_ops == "hierarchical" and plan.num_replicas == 2


@pytest.mark.parametrize("device", ["/cpu:2", "/gpu:0", "somewhere"])
def test_reduce_to_a_device_that_does_not_exist(tmp_path, device):
    err = reject(tmp_path, "strategy=mirrored", "cross_ops=reduction_to_one_device", "devices.logical_cpus=2",
                 f"cross_ops.reduce_to_device={device}")
    assert err.key == "cross_ops.reduce_to_device" and err.received == device and "/cpu:1" in str(err)


def test_reduce_to_a_device_that_exists(tmp_path):
    cfg = plain("strategy=mirrored", "cross_ops=reduction_to_one_device", "devices.logical_cpus=2",
                "cross_ops.reduce_to_device=/cpu:1")
    assert preflight.check(cfg, tmp_path).num_replicas == 2


@pytest.mark.parametrize("timeout", [0, -5])
def test_a_collective_timeout_of_zero_or_less_is_refused(tmp_path, timeout):
    err = reject(tmp_path, "strategy=multi_worker_mirrored", "cluster=localhost", "communication=ring",
                 f"communication.timeout_seconds={timeout}")
    assert err.key == "communication.timeout_seconds" and "null to wait forever" in str(err)
