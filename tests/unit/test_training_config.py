"""The training pieces (loss, trainer.metrics, optimizer, schedule, callbacks) as configs:
they compose, are refused before TensorFlow in one line naming the key, and are logged as params.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from tests.helpers import compose
from tests.unit.test_cli import assert_rejected
from tests.unit.unit_helpers import plain
from xpdist.core import schema
from xpdist.core.errors import ConfigError
from xpdist.core.schema.training import CALLBACKS
from xpdist.driver.checks import preflight
from xpdist.tracking.params import run_params

# The user program of issue 23: a binary classifier with one logit, from a package outside xpdist.
BINARY = ["dataset=custom", "dataset._target_=tests.userpkg.data.binary", "dataset.num_examples=256",
          "dataset.num_validation_examples=64", "dataset.per_replica_batch_size=32", "model=mlp",
          "model.hidden_units=[8]"]
ISSUE = ["loss=binary_crossentropy", "loss.from_logits=true", "trainer.metrics=[auc]", "optimizer=adamw",
         "schedule=cosine", "schedule.warmup_epochs=1", "callbacks=[early_stopping]"]


def reject(tmp_path: Path, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        preflight.check(plain(*overrides), tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{err.value.key}=")
    return err.value


def test_the_issue_overrides_compose_and_pass_preflight_as_written(tmp_path):
    cfg = plain(*BINARY, *ISSUE, "trainer.epochs=3")
    assert cfg.loss == {"name": "binary_crossentropy", "from_logits": True, "label_smoothing": 0.0}
    assert list(cfg.trainer.metrics) == ["auc"] and cfg.optimizer.name == "adamw"
    assert cfg.schedule.name == "cosine" and cfg.schedule.warmup_epochs == 1.0
    assert list(cfg.callbacks) == ["early_stopping"] and cfg.callbacks.early_stopping.monitor == "val_loss"
    plan = preflight.check(cfg, tmp_path)
    assert plan.steps_per_epoch == 8


def test_defaults_keep_todays_training():
    cfg = compose()
    assert (cfg.loss.name, cfg.schedule.name, cfg.optimizer.name) == ("auto", "constant", "sgd")
    assert list(cfg.trainer.metrics) == [] and OmegaConf.to_container(cfg.callbacks) == {}


def test_several_callbacks_at_once_each_with_its_own_keys():
    cfg = compose(["callbacks=[early_stopping,terminate_on_nan,reduce_lr_on_plateau]",
                   "callbacks.early_stopping.patience=3", "callbacks.reduce_lr_on_plateau.factor=0.5"])
    assert set(cfg.callbacks) == {"early_stopping", "terminate_on_nan", "reduce_lr_on_plateau"}
    assert cfg.callbacks.early_stopping.patience == 3 and cfg.callbacks.reduce_lr_on_plateau.factor == 0.5
    assert OmegaConf.get_type(cfg.callbacks.early_stopping) is CALLBACKS["early_stopping"]
    schema.check_keys(plain("callbacks=[early_stopping,terminate_on_nan,custom]"))


@pytest.mark.parametrize("override, needle", [
    ("schedule.warmup_epochs=1", "schedule.warmup_epochs"),  # schedule=constant has no warmup
    ("loss.from_logits=true", "loss.from_logits"),  # loss=auto has no key of a Keras loss
    ("optimizer.beta_1=0.8", "optimizer.beta_1"),  # sgd has no moments
    ("callbacks.early_stopping.patience=2", "callbacks.early_stopping.patience"),  # not chosen
])
def test_a_key_that_cannot_apply_does_not_compose(override, needle):
    with pytest.raises(ConfigCompositionException, match=needle.replace(".", r"\.")):
        compose([override])


@pytest.mark.parametrize("override", ["loss=bce", "schedule=onecycle", "optimizer=adamax", "callbacks=[early_stop]"])
def test_unknown_options_are_refused(override):
    with pytest.raises(MissingConfigException):
        compose([override])


@pytest.mark.parametrize("overrides, key, says", [
    (["optimizer=lamb", "keras=legacy"], "optimizer", "tf-keras, which this run uses, has no lamb"),
    (["optimizer.gradient_accumulation_steps=2", "keras=legacy"], "optimizer.gradient_accumulation_steps", "tf-keras"),
    (["optimizer.gradient_accumulation_steps=0"], "optimizer.gradient_accumulation_steps", "1 or more"),
    (["optimizer.gradient_accumulation_steps=2", "strategy=mirrored", "devices.logical_cpus=2"],
     "optimizer.gradient_accumulation_steps", "keras-team/keras#20582"),
    (["optimizer.gradient_accumulation_steps=2", "strategy=central_storage", "devices.logical_cpus=2", "trainer=ctl"],
     "optimizer.gradient_accumulation_steps", "keras-team/keras#20582"),
    (["optimizer.global_clipnorm=1", "optimizer.clipnorm=1"], "optimizer.clipnorm", "one clipping key"),
    (["schedule=cosine", "schedule.warmup_epochs=2"], "schedule.warmup_epochs", "whole training"),
    (["schedule=cosine", "schedule.decay_epochs=5"], "schedule.decay_epochs", "longer than training"),
    (["schedule=polynomial", "schedule.warmup_epochs=1", "schedule.decay_epochs=1.5"], "schedule.decay_epochs",
     "longer than training"),
    (["schedule=piecewise", "schedule.boundaries=[3]"], "schedule.boundaries", "inside training"),
    (["schedule=piecewise", "schedule.factors=[1]"], "schedule.factors", "one factor more"),
    (["loss=custom", "loss._target_=no_such_pkg.Loss"], "loss._target_", "no module 'no_such_pkg'"),
    (["optimizer=custom", "optimizer._target_=no_such_pkg.Opt"], "optimizer._target_", "no module 'no_such_pkg'"),
    (["callbacks=[custom]", "callbacks.custom._target_=Nope"], "callbacks.custom._target_", "not a dotted path"),
    (["trainer.metrics=[{from_logits: true}]"], "trainer.metrics", "has a _target_"),
    (["trainer.metrics=[{_target_: no_such_pkg.M}]"], "trainer.metrics._target_", "no module 'no_such_pkg'"),
    (["callbacks=[early_stopping]"], "callbacks.early_stopping.monitor", "no validation data"),
    (["callbacks=[reduce_lr_on_plateau]", "callbacks.reduce_lr_on_plateau.monitor=loss", "schedule=cosine"],
     "callbacks", "ReduceLROnPlateau cannot change"),
    (["callbacks=[early_stopping]", "callbacks.early_stopping.monitor=loss", "callbacks.early_stopping.mode=up"],
     "callbacks.early_stopping.mode", "auto, min or max"),
    (["trainer.profile_steps=[3]"], "trainer.profile_steps", "it takes two step numbers"),
    # value rules declared on the options' fields (xpdist/core/rules.py)
    (["loss=huber", "loss.delta=-1"], "loss.delta", "must be above 0"),
    (["schedule=exponential", "schedule.decay_rate=0"], "schedule.decay_rate", "must be above 0"),
    (["schedule=polynomial", "schedule.power=-2"], "schedule.power", "must be above 0"),
    (["loss=binary_crossentropy", "loss.label_smoothing=1.5"], "loss.label_smoothing", "between 0 and 1"),
    (["schedule=cosine", "schedule.alpha=-0.5"], "schedule.alpha", "between 0 and 1"),
    (["schedule=cosine", "schedule.warmup_start=-0.1"], "schedule.warmup_start", "0 or more"),
    (["schedule=exponential", "schedule.decay_epochs=0"], "schedule.decay_epochs", "must be above 0"),
    (["schedule=polynomial", "schedule.end_learning_rate=-1"], "schedule.end_learning_rate", "0 or more"),
    (["schedule=piecewise", "schedule.factors=[1,-0.1]"], "schedule.factors", "every factor must be above 0"),
    (["schedule=cosine", "schedule.warmup_epochs=-1"], "schedule.warmup_epochs", "must be 0 or more"),
    (["optimizer=adamw", "optimizer.beta_1=1"], "optimizer.beta_1", "below 1"),
    (["optimizer=lion", "optimizer.beta_2=-0.1"], "optimizer.beta_2", "below 1"),
    (["optimizer=rmsprop", "optimizer.rho=1.5"], "optimizer.rho", "below 1"),
    (["optimizer.momentum=2"], "optimizer.momentum", "between 0 and 1"),
    (["optimizer=adamw", "optimizer.epsilon=-1e-7"], "optimizer.epsilon", "0 or more"),
    (["optimizer=adagrad", "optimizer.initial_accumulator_value=-1"], "optimizer.initial_accumulator_value",
     "0 or more"),
    (["optimizer=adamw", "optimizer.weight_decay=-0.1"], "optimizer.weight_decay", "0 or more"),
    (["optimizer.clipnorm=-1"], "optimizer.clipnorm", "0 or more"),
    (["optimizer.lr_scaling=linear", "optimizer.reference_batch_size=0"], "optimizer.reference_batch_size",
     "1 or more"),
    (["optimizer=adam", "optimizer.learning_rate=0"], "optimizer.learning_rate", "must be above 0"),
    (["callbacks=[early_stopping]", "callbacks.early_stopping.monitor=loss", "callbacks.early_stopping.patience=-1"],
     "callbacks.early_stopping.patience", "0 or more"),
    (["callbacks=[reduce_lr_on_plateau]", "callbacks.reduce_lr_on_plateau.monitor=loss",
      "callbacks.reduce_lr_on_plateau.factor=1"], "callbacks.reduce_lr_on_plateau.factor", "below 1"),
    (["callbacks=[reduce_lr_on_plateau]", "callbacks.reduce_lr_on_plateau.monitor=loss",
      "callbacks.reduce_lr_on_plateau.min_lr=-1"], "callbacks.reduce_lr_on_plateau.min_lr", "0 or more"),
    (["trainer.profile_steps=[5,2]"], "trainer.profile_steps", "the run has steps 0 to"),
    (["trainer.epochs=1", "trainer.profile_steps=[0,100000]"], "trainer.profile_steps", "the run has steps 0 to"),
    (["strategy=parameter_server", "cluster=localhost", "cluster.ps=1", "trainer=ctl", "trainer.profile_steps=[1,2]"],
     "trainer.profile_steps", "the chief only dispatches steps"),
])
def test_preflight_refuses_in_one_line_naming_the_key(tmp_path, overrides, key, says):
    err = reject(tmp_path, *overrides)
    assert err.key == key and says in str(err)


def test_keras_targets_are_left_to_the_task_and_others_must_import(tmp_path):
    preflight.check(plain("loss=custom", "loss._target_=keras.losses.Huber", "optimizer=custom",
                          "trainer.metrics=[auc,{_target_: keras.metrics.Recall}]", "callbacks=[custom]",
                          "callbacks.custom._target_=tests.userpkg.data.blobs"), tmp_path)


@pytest.mark.new_store
@pytest.mark.parametrize("overrides, key, says", [
    (["schedule=cosine", "schedule.warmup_epochs=5"], "schedule.warmup_epochs", "whole training"),
    (["schedule.warmup_epochs=1"], "schedule.warmup_epochs", "schedule=constant has no key"),
    (["loss=custom", "loss._target_=no_such_pkg.Loss"], "loss._target_", "no module"),
    (["callbacks=[early_stoping]"], "callbacks", "Did you mean early_stopping?"),
    (["callbacks.early_stopping.patience=3"], "callbacks.early_stopping.patience", "callbacks=[early_stopping]"),
    (["loss=huber", "loss.delta=-1"], "loss.delta", "must be above 0"),
    (["schedule=exponential", "schedule.decay_rate=0"], "schedule.decay_rate", "must be above 0"),
    (["schedule=polynomial", "schedule.power=-2"], "schedule.power", "must be above 0"),
])
def test_the_cli_says_it_in_one_line_with_exit_2_and_no_store(xpdist, overrides, key, says):
    line = assert_rejected(xpdist, xpdist.run(*overrides, timeout=120, fork="check"), key)
    assert says in line


def test_every_new_key_is_a_param(tmp_path):
    cfg = plain(*BINARY, *ISSUE, "trainer.epochs=3", "optimizer.global_clipnorm=1",
                "callbacks=[early_stopping,terminate_on_nan]")
    params = run_params(OmegaConf.to_container(cfg, enum_to_str=True), preflight.check(cfg, tmp_path))
    assert params["loss.name"] == "binary_crossentropy" and params["loss.from_logits"] == "True"
    assert params["trainer.metrics"] == "['auc']"
    assert params["schedule.name"] == "cosine" and params["schedule.warmup_epochs"] == "1.0"
    assert params["optimizer.global_clipnorm"] == "1.0" and params["optimizer.weight_decay"] == "0.004"
    assert params["callbacks"] == "early_stopping,terminate_on_nan"
    assert params["callbacks.early_stopping.patience"] == "0" and params["callbacks.terminate_on_nan"] == "on"
    assert run_params(OmegaConf.to_container(plain(), enum_to_str=True),
                      preflight.check(plain(), tmp_path))["callbacks"] == "none"


def test_the_task_tables_name_exactly_the_schema_options():
    """One table per piece in the task, each naming the schema's options (no TensorFlow imported)."""
    from xpdist.task import models
    from xpdist.task.train import callbacks, losses, schedules

    assert set(losses.LOSSES) == set(schema.OPTIONS["loss"])
    assert set(schedules.SCHEDULES) == set(schema.OPTIONS["schedule"])
    assert set(models.OPTIMIZERS) == set(schema.OPTIONS["optimizer"])
    assert set(callbacks.CALLBACKS) == set(schema.MULTI_GROUPS["callbacks"])


def test_the_large_batch_recipe_composes_and_passes_preflight(tmp_path):
    cfg = plain("recipe=large_batch", "trainer.epochs=6")
    assert cfg.optimizer.lr_scaling == "linear" and cfg.schedule.warmup_epochs > 0
    preflight.check(cfg, tmp_path)


def test_a_value_rule_stays_where_an_option_changes_its_fields_default():
    """A subclass that changes a default declares the field again: it must keep the base's rule."""
    from xpdist.core import rules

    classes = [cls for options in (*schema.OPTIONS.values(), *schema.MULTI_GROUPS.values()) for cls in options.values()]
    for cls in classes:
        for field in dataclasses.fields(cls):
            ruled = [base for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)
                     and any(f.name == field.name and rules.of(f) for f in dataclasses.fields(base))]
            assert not ruled or rules.of(field), f"{cls.__name__}.{field.name} lost the rule of {ruled[0].__name__}"


def test_each_rule_is_worded_in_the_configuration_reference():
    from tests.helpers import REPO

    page = (REPO / "docs" / "configuration.md").read_text()
    assert "| `loss.delta` | float | `1.0` | Where the loss turns from quadratic to linear (keras.losses.Huber's delta). " \
           "Must be above 0. |" in page
    assert "Must be above 0. |" in page.split("### schedule=polynomial", 1)[1].split("###", 1)[0]
