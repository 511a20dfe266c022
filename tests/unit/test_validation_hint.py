"""A refusal for want of validation data names the key that gives the run's own data source
validation data: dataset.num_validation_examples for dataset=custom, validation_files for
tfrecord, validation_split where the source splits its data (xpdist/core/data_sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.unit_helpers import plain
from xpdist.core import data_sources
from xpdist.core.errors import ConfigError
from xpdist.driver.checks import preflight

CUSTOM = ["dataset=custom", "dataset._target_=tests.userpkg.data.binary", "dataset.num_examples=256",
          "dataset.per_replica_batch_size=32", "model=mlp", "model.hidden_units=[8]"]


def refusal(tmp_path: Path, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        preflight.check(plain(*overrides), tmp_path)
    return err.value


@pytest.mark.parametrize("overrides, hint", [
    ([], "Set dataset.validation_split (e.g. 0.2)"),
    (["dataset=digits", "dataset.validation_split=0", "model=mlp"], "Set dataset.validation_split (e.g. 0.2)"),
    (CUSTOM, "Set dataset.num_validation_examples (e.g. 128)"),
])
def test_early_stopping_without_validation_names_the_key_of_the_data_source_in_use(tmp_path, overrides, hint):
    err = refusal(tmp_path, *overrides, "callbacks=[early_stopping]")
    assert err.key == "callbacks.early_stopping.monitor"
    assert str(err).endswith(f"{hint}, or callbacks.early_stopping.monitor=loss.")
    if "dataset=custom" in overrides:
        assert "validation_split" not in str(err)  # a key dataset=custom ignores


def test_the_suggested_key_gives_the_run_validation_and_then_it_passes(tmp_path):
    preflight.check(plain(*CUSTOM, "dataset.num_validation_examples=128", "callbacks=[early_stopping]"), tmp_path)
    preflight.check(plain("dataset.validation_split=0.2", "callbacks=[early_stopping]"), tmp_path)


def test_each_source_names_a_key_of_its_own_schema_that_it_reads():
    """The key a source suggests is one its config has, and not validation_split where it ignores it."""
    for name in data_sources.DATA_SOURCES:
        spec = data_sources.get(name)
        cfg = plain(f"dataset={name}")
        assert spec.validation_key in cfg.dataset, name
        if "validation_split" not in spec.honours and name != "plugin":
            assert spec.validation_key != "validation_split", name
        assert spec.validation_hint() == f"Set dataset.{spec.validation_key} (e.g. {spec.validation_example})"
    tfrecord = data_sources.get("tfrecord")
    assert tfrecord.validation_key == "validation_files"
    assert not tfrecord.has_validation(plain("dataset=tfrecord"))


def test_too_little_validation_names_the_sources_own_key(tmp_path):
    """dataset=custom's validation is num_validation_examples: too few for one global batch is that key's
    fault, not validation_split's (which it ignores), and the training count names no split."""
    err = refusal(tmp_path, *CUSTOM, "dataset.num_validation_examples=8")
    assert err.key == "dataset.num_validation_examples" and "validation_split" not in str(err)
    assert str(err).endswith("Give more validation examples (dataset.num_validation_examples), lower the batch "
                             "size, or give none.")
    err = refusal(tmp_path, "dataset.num_examples=100", "dataset.validation_split=0.05",
                  "dataset.per_replica_batch_size=10")
    assert err.key == "dataset.validation_split" and "Raise the split" in str(err)
