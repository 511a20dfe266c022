"""The data source seam: every `dataset` option is one driver module, one task module, one YAML and
one schema entry; the plan, preflight and the recorded inputs ask the source's spec; and every
shared input option a source offers changes what its pipeline does.

A toy source registered here, and nowhere else, is counted by the plan, checked by its
preflight and recorded: the proof that no other module needs an edit (docs/contributing.md, "Adding a data source").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.unit.unit_helpers import CONF, plain
from xpdist.core import data_sources, options, plan as planning, schema
from xpdist.core.data_sources import InMemoryDataset
from xpdist.core.errors import ConfigError
from xpdist.driver.checks import data as data_checks, preflight

REPO = Path(__file__).resolve().parents[2]
DATASETS = schema.OPTIONS["dataset"]  # read from the sources' own modules


def test_every_source_has_its_driver_module_task_module_yaml_and_schema_entry():
    from xpdist.task import data_sources as task_sources

    driver = set(data_sources.DATA_SOURCES)
    task = set(task_sources.SOURCES)
    yamls = {path.stem for path in (CONF / "dataset").glob("*.yaml")}
    assert driver == task == yamls == set(DATASETS) == set(schema.OPTIONS["dataset"])
    for name in driver:
        assert data_sources.get(name).name == name
        assert callable(task_sources.SOURCES.get(name).load), name


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_source_offers_exactly_the_shared_options_it_honours(name):
    """validation_split is on every source (a recipe may set it for any); the others are offered
    only where honoured, so `dataset=digits dataset.cache=memory` no longer composes."""
    offered = {f.name for f in dataclasses.fields(DATASETS[name])} & set(data_sources.SHARED_OPTIONS)
    assert offered - {"validation_split"} == set(data_sources.get(name).honours) - {"validation_split"}


def test_no_module_outside_the_seam_names_a_source():
    """No if-chain on a source's name: only its own modules, the schema and its tests name it."""
    allowed = set()
    for path in (REPO / "xpdist").rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        if "/data_sources/" in rel or rel in allowed:
            continue
        text = path.read_text()
        for name in ("tfrecord", "image_folder", "synthetic_images", "\"digits\"", "\"npz\"", "\"mnist\""):
            assert f'== "{name.strip(chr(34))}"' not in text and f"in ({name}" not in text, (rel, name)


def test_a_key_a_source_ignores_does_not_compose():
    with pytest.raises(Exception, match="cache"):
        plain("dataset=digits", "dataset.cache=memory")
    with pytest.raises(Exception, match="auto_shard_policy"):
        plain("dataset=custom", "dataset.auto_shard_policy=data")


def test_a_shared_option_offered_is_checked_by_preflight(tmp_path):
    for overrides, key in ((["dataset=digits", "dataset.prefetch=-2"], "dataset.prefetch"),
                           (["dataset=digits", "dataset.shuffle_buffer=-1"], "dataset.shuffle_buffer"),
                           (["dataset=custom", "dataset.prefetch=-5"], "dataset.prefetch")):
        with pytest.raises(ConfigError) as err:
            preflight.check(plain(*overrides), tmp_path)
        assert err.value.key == key


def test_validation_split_changes_the_plan_where_honoured_and_is_refused_elsewhere(tmp_path):
    assert preflight.check(plain("dataset=digits", "dataset.validation_split=0.5"), tmp_path).num_val == 898
    with pytest.raises(ConfigError) as err:
        preflight.check(plain("dataset=custom", "dataset.validation_split=0.5"), tmp_path)
    assert err.value.key == "dataset.validation_split" and "num_validation_examples" in str(err.value)


@dataclasses.dataclass
class ToyDataset(InMemoryDataset):
    name: str = "toy"
    per_replica_batch_size: int = 8


class Toy(data_sources.InMemorySpec):
    """A toy in-memory source: 40 examples, an image shape."""

    name = "toy"
    config = ToyDataset
    images = True

    def size(self, cfg, launch_dir):
        return 40

    def input_shape(self, cfg, launch_dir):
        return (4, 4, 1)


def test_a_registered_source_is_counted_by_the_plan_and_recorded(tmp_path):
    options.register_data_source("toy", Toy(), task=__name__)
    schema.register_configs()
    try:
        cfg = plain("dataset=toy", "dataset.validation_split=0.25", "model=cnn")  # composed from its schema
        assert schema.OPTIONS["dataset"]["toy"] is ToyDataset and cfg.dataset.per_replica_batch_size == 8
        schema.check_keys(cfg)
        data_checks.check_source(cfg, tmp_path)
        plan = planning.make_plan(cfg, tmp_path)
        assert (plan.num_train, plan.num_val) == (30, 10)
        (train, val) = data_sources.describe(cfg, plan, tmp_path)
        assert train["name"] == "toy-train" and val["source"] == "xpdist:toy"
    finally:
        options.unregister("dataset", "toy")


def test_the_worked_example_of_contributing_md_plans_and_loads(tmp_path):
    """docs/contributing.md's "Adding a data source" code, run as the two modules it shows."""
    import re
    import types

    from xpdist.task import data, data_sources as task_sources

    page = (REPO / "docs" / "contributing.md").read_text()
    section = page[page.index("## Adding a data source"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    driver_code, task_code = code.split("# xpdist/task/data_sources/foo.py")
    driver, task = types.ModuleType("foo_driver"), types.ModuleType("foo_task")
    exec(compile(driver_code, "contributing.md", "exec", dont_inherit=True), driver.__dict__)  # as its own module
    exec(compile(task_code, "contributing.md", "exec"), task.__dict__)
    data_sources.DATA_SOURCES.register("foo")(driver.SPEC)
    task_sources.SOURCES.register("foo")(task)
    try:
        cfg = plain("dataset=digits", "dataset.validation_split=0.25")
        cfg.dataset.name, cfg.dataset.num_examples = "foo", 64  # what its YAML and schema entry compose
        data_checks.check_source(cfg, tmp_path)
        plan = planning.make_plan(cfg, tmp_path)
        arrays = data.load(cfg, plan, tmp_path)
        assert (plan.num_train, plan.num_val) == (48, 16) == (len(arrays.x_train), len(arrays.x_val))
        assert arrays.kind == "classification" and arrays.input_shape == (4,)
    finally:
        data_sources.DATA_SOURCES.unregister("foo")
        task_sources.SOURCES.unregister("foo")
