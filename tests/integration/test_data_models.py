"""Real data, every model kind, both trainers, with validation and per-step logging."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import LOG_MODEL
from tests.integration.harness import describe, run_many, store_template

pytestmark = pytest.mark.slow

EPOCHS = 2
RUNS = {name: [*overrides, LOG_MODEL] for name, overrides in {
    # The default strategy, a conv net on the bundled digits, and loss every 2 steps as well.
    "digits-cnn-fit": ["dataset=digits", "model=cnn", "model.filters=[4,8]", "trainer.steps_per_epoch=4",
                       "trainer.log_every_n_steps=2"],
    "digits-mlp-ctl": ["strategy=central_storage", "devices.logical_cpus=2", "dataset=digits", "model=mlp",
                       "model.hidden_units=[16]", "dataset.per_replica_batch_size=16", "trainer=ctl",
                       "trainer.steps_per_epoch=4"],
    # A file of arrays next to where the command runs, and a model from a dotted path.
    "npz-custom-fit": ["dataset=npz", "dataset.path=data/arrays.npz", "dataset.validation_split=0.2",
                       "dataset.per_replica_batch_size=16", "model=custom", "+model.kwargs.units=8"],
}.items()}


def write_npz(name, workdir):
    if name.startswith("npz"):
        rng = np.random.default_rng(0)
        x = rng.standard_normal((200, 5)).astype("float32")
        y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")  # 3 classes
        (workdir / "data").mkdir()
        np.savez(workdir / "data" / "arrays.npz", x=x, y=y)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("data_models")
    return run_many(root, store_template(root / "template"), RUNS, setup=write_npz)


@pytest.mark.parametrize("name", RUNS)
def test_finished_with_train_and_validation_metrics(runs, name):
    done = runs[name]
    assert done.proc.returncode == 0 and done.run.info.status == "FINISHED", describe(done)
    for metric in ("loss", "accuracy", "val_loss", "val_accuracy", "epoch_time_s", "examples_per_sec"):
        history = done.history(metric)
        assert [step for step, _ in history] == list(range(1, EPOCHS + 1)), (metric, history)
    for _, accuracy in done.history("val_accuracy"):
        assert 0 <= accuracy <= 1
    assert "model/model.keras" in done.artifacts()


def test_digits_cnn_params_and_step_logging(runs):
    done = runs["digits-cnn-fit"]
    params = done.run.data.params
    assert (params["strategy"], params["model"], params["dataset"], params["trainer"]) == \
        ("default", "cnn", "digits", "fit")
    assert (params["devices"], params["num_replicas"], params["global_batch_size"]) == ("none", "1", "32")
    # 4 steps per epoch, logged every 2 steps, buffered and written at each epoch's end.
    assert [step for step, _ in done.history("batch_loss")] == [2, 4, 6, 8]
    # Conv kernels of 4 and 8 filters, then Dense(10).
    assert [w.shape for w in done.weights()][-2:] == [(8, 10), (10,)]


def test_digits_mlp_ctl_params(runs):
    params = runs["digits-mlp-ctl"].run.data.params
    assert (params["strategy"], params["model"], params["trainer"], params["num_replicas"],
            params["global_batch_size"], params["per_replica_batch_size"]) == \
        ("central_storage", "mlp", "ctl", "2", "32", "16")


def test_npz_custom_model(runs):
    done = runs["npz-custom-fit"]
    params = done.run.data.params
    assert (params["dataset"], params["model"], params["dataset.path"]) == ("npz", "custom", "data/arrays.npz")
    assert params["model._target_"] == "xpdist.task.models.example_custom_model" and params["model.kwargs.units"] == "8"
    assert not any(k.startswith(("model.filters", "model.hidden_units", "model.l2")) for k in params)
    # example_custom_model(units=8) on 5 features and 3 classes read from the file.
    assert [w.shape for w in done.weights()] == [(5, 8), (8,), (8, 3), (3,)]
