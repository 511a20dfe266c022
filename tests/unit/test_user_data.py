"""Data the user brings: files and functions are checked and counted before TensorFlow starts."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.unit.unit_helpers import plain
from tests.datafiles import FEATURES, write_image_folder
from xpdist.core import data_sources
from xpdist.core.errors import ConfigError
from xpdist.driver.checks import preflight


def reject(tmp_path: Path, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        preflight.check(plain(*overrides), tmp_path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{err.value.key}=")
    return err.value


def fake_tfrecord(path: Path, payloads) -> None:
    """Records framed as TFRecord (the CRCs are not checked by the count, so zeros do)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for payload in payloads:
            f.write(struct.pack("<Q", len(payload)) + b"\0" * 4 + payload + b"\0" * 4)


def tfrecord(*overrides):
    return ("dataset=tfrecord", "dataset.files=[data/*.tfrecord]", "dataset.num_classes=2", *FEATURES, *overrides)


def test_tfrecord_is_counted_without_tensorflow(tmp_path):
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x" * 10] * 70)
    fake_tfrecord(tmp_path / "data" / "b.tfrecord", [b"y" * 3] * 30)
    plan = preflight.check(plain(*tfrecord()), tmp_path)
    assert (plan.num_train, plan.num_val, plan.steps_per_epoch) == (100, 0, 100 // 32)


def test_glob_matching_no_file_is_rejected(tmp_path):
    err = reject(tmp_path, *tfrecord())
    assert err.key == "dataset.files" and err.received == "data/*.tfrecord" and "no file matches" in str(err)


def test_truncated_tfrecord_names_the_file(tmp_path):
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x" * 10] * 5)
    with open(tmp_path / "data" / "a.tfrecord", "ab") as f:
        f.write(struct.pack("<Q", 1000) + b"\0" * 4 + b"short")
    err = reject(tmp_path, *tfrecord())
    assert err.key == "dataset.files" and "a.tfrecord" in str(err)


def test_label_must_be_a_feature(tmp_path):
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x"] * 100)
    err = reject(tmp_path, *tfrecord("dataset.label=y"))
    assert err.key == "dataset.label"


def test_validation_split_does_not_apply_to_tfrecord(tmp_path):
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x"] * 100)
    err = reject(tmp_path, *tfrecord("dataset.validation_split=0.2"))
    assert err.key == "dataset.validation_split" and "dataset.validation_files" in str(err)


def test_image_folder_is_counted_and_split_as_keras_splits(tmp_path):
    write_image_folder(tmp_path / "images", per_class=25)
    plan = preflight.check(plain("dataset=image_folder", "dataset.path=images", "dataset.per_replica_batch_size=4"),
                           tmp_path)
    assert (plan.num_train, plan.num_val) == (40, 10)


def test_folder_without_class_subfolder_is_rejected(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"\x89PNG")
    err = reject(tmp_path, "dataset=image_folder", "dataset.path=images")
    assert err.key == "dataset.path" and "no class subfolder" in str(err)


def test_non_image_file_is_named(tmp_path):
    write_image_folder(tmp_path / "images")
    (tmp_path / "images" / "cat" / "notes.jpg").write_text("not an image")
    err = reject(tmp_path, "dataset=image_folder", "dataset.path=images")
    assert err.key == "dataset.path" and "notes.jpg" in str(err)


def test_custom_target_must_be_importable(tmp_path):
    err = reject(tmp_path, "dataset=custom", "dataset._target_=no_such_pkg.data.make")
    assert err.key == "dataset._target_" and "no_such_pkg" in str(err)


def test_custom_of_unknown_size_needs_steps_per_epoch(tmp_path):
    err = reject(tmp_path, "dataset=custom", "dataset.num_examples=null")
    assert err.key == "trainer.steps_per_epoch"
    plan = preflight.check(plain("dataset=custom", "dataset.num_examples=null", "trainer.steps_per_epoch=7"), tmp_path)
    assert plan.steps_per_epoch == 7


def test_dataset_description_changes_with_the_files(tmp_path):
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x"] * 100)
    cfg = plain(*tfrecord())
    plan = preflight.check(cfg, tmp_path)
    (first,) = data_sources.describe(cfg, plan, tmp_path)
    assert (first["context"], first["source"]) == ("training", "data/*.tfrecord")
    fake_tfrecord(tmp_path / "data" / "a.tfrecord", [b"x"] * 101)
    (second,) = data_sources.describe(cfg, preflight.check(cfg, tmp_path), tmp_path)
    assert second["digest"] != first["digest"]
