"""Every option of every config group composes onto its own schema; typos, wrong types and
keys of another option fail at compose time with Hydra's message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from tests.helpers import REPO, compose
from tests.unit.unit_helpers import plain
from xpdist.core import docs
from xpdist.core.errors import ConfigError
from xpdist.core.schema import GROUPS, OPTIONS, check_keys

CONF = REPO / "conf"
# Folders under conf/ that are not config groups of the primary config.
NOT_GROUPS = ("recipe",)


def _options():
    """(group, option) for every YAML file under conf/, found recursively.

    A file conf/a/b/c.yaml is option `c` of group `a/b`, as Hydra names it on the command line.
    """
    found = []
    for path in sorted(CONF.rglob("*.yaml")):
        rel = path.relative_to(CONF)
        if len(rel.parts) == 1 or rel.parts[0] in NOT_GROUPS:
            continue
        found.append((rel.parent.as_posix(), rel.stem))
    return found


FILE_OPTIONS = _options()


def test_the_walk_finds_every_group_of_the_schema():
    groups = {group for group, _ in FILE_OPTIONS}
    assert set(GROUPS) <= groups


def test_every_option_of_the_schema_has_its_file_and_every_file_its_schema():
    for group in GROUPS:
        assert set(OPTIONS[group]) == {p.stem for p in (CONF / group).glob("*.yaml")}, group


@pytest.mark.parametrize("group, option", FILE_OPTIONS, ids=[f"{g}={o}" for g, o in FILE_OPTIONS])
def test_every_option_composes(group, option):
    cfg = compose([f"{group}={option}"])
    node = cfg
    for part in group.split("/"):
        node = node[part]
    if group in GROUPS:
        # The option file extends its own schema, which fixes `name` (the code dispatches on it).
        assert OmegaConf.get_type(node) is OPTIONS[group][node.name]
        check_keys(plain(f"{group}={option}"))


def test_the_primary_config_composes_with_the_documented_defaults():
    cfg = compose()
    assert [cfg[g].name for g in GROUPS] == ["default", "auto", "auto", "local", "linear", "synthetic_regression",
                                             "sgd", "fit", "auto", "constant"]
    assert cfg.seed == 42 and cfg.verbose is False and cfg.devices.logical_cpus == 1


def test_the_issue_example_composes_as_written():
    cfg = compose(["strategy=mirrored", "cross_ops=hierarchical"])
    assert cfg.strategy.name == "mirrored" and cfg.cross_ops.name == "hierarchical"
    assert cfg.cross_ops.num_packs == 1


@pytest.mark.parametrize("override, needle", [
    ("trainer.epoch=3", "trainer.epoch"),  # misspelled key
    ("dataset.per_replica_batchsize=8", "dataset.per_replica_batchsize"),
    ("trainer.epochs=two", "trainer.epochs"),  # wrong type
    ("devices.logical_cpus=1.5", "devices.logical_cpus"),
    ("verbose=maybe", "verbose"),
    ("optimizer.lr_scaling=cubic", "optimizer.lr_scaling"),  # not one of the enum's names
    ("keras=keras4", "keras"),
])
def test_bad_overrides_fail_at_compose_time(override, needle):
    with pytest.raises(ConfigCompositionException, match=needle.replace(".", r"\.")):
        compose([override])


@pytest.mark.parametrize("override", ["strategy=mirrord", "cross_ops=ncll", "trainer=keras_fit", "model=resnet"])
def test_unknown_options_fail_and_list_the_known_ones(override):
    group = override.split("=")[0]
    with pytest.raises(MissingConfigException, match=f"Available options in '{group}'"):
        compose([override])


def test_a_misspelled_key_in_an_option_file_fails(tmp_path: Path):
    """Option files are merged onto the typed schema, so a typo in YAML fails as on the command line."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "trainer" / "typo.yaml").write_text("defaults:\n  - base_fit\nepoch: 3\n")
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            hydra_compose(config_name="config", overrides=["trainer=typo"])
    assert "epoch" in str(err.value.__cause__ or err.value)


def test_lr_table_can_be_given_on_the_command_line():
    cfg = compose(["optimizer.lr_scaling=table", "++optimizer.lr_table={8: 0.1, 16: 0.2}"])
    assert dict(cfg.optimizer.lr_table) == {8: 0.1, 16: 0.2}


@pytest.mark.parametrize("overrides, message", [
    (["model=linear", "model.filters=[8]"], "Key 'filters' not in 'LinearModel'"),
    (["dataset=digits", "dataset.num_examples=50"], "Key 'num_examples' not in 'DigitsDataset'"),
    (["strategy=default", "strategy.devices=[/cpu:0]"], "Key 'devices' not in 'DefaultStrategy'"),
    (["cluster=slurm", "cluster.workers=2"], "Key 'workers' not in 'SlurmCluster'"),
    (["optimizer=adam", "optimizer.momentum=0.9"], "Key 'momentum' not in 'AdamOptimizer'"),
    (["cross_ops=auto", "cross_ops.num_packs=2"], "Key 'num_packs' not in 'AutoCrossOps'"),
])
def test_a_key_of_another_option_fails_at_compose_time(overrides, message):
    with pytest.raises(ConfigCompositionException) as err:
        compose(overrides)
    assert message in str(err.value.__cause__)


def test_the_same_key_is_accepted_by_the_option_that_has_it():
    assert list(compose(["model=cnn", "model.filters=[8]"]).model.filters) == [8]
    assert compose(["dataset=synthetic_images", "dataset.num_examples=50"]).dataset.num_examples == 50


@pytest.mark.parametrize("override, key", [
    ("+trainer.epoch=3", "trainer.epoch"), ("+unknown.key=1", "unknown.key"), ("+model.filters=[8]", "model.filters"),
    ("+devices.gpus=2", "devices.gpus"), ("+tracking.experiments=x", "tracking.experiments"),
])
def test_a_key_appended_with_plus_that_the_schema_does_not_know_is_refused(override, key):
    """Hydra appends these to typed nodes too; no code would read them."""
    config = plain(override)
    with pytest.raises(ConfigError) as err:
        check_keys(config)
    assert err.value.key == key and "nothing would read it" in str(err.value)


@pytest.mark.parametrize("override, says", [
    ("+trainer.epoch=3", "trainer=fit has no key 'epoch', so nothing would read it. Did you mean trainer.epochs? "
                         "Otherwise drop it; the keys of trainer=fit are: name, epochs,"),
    ("+tracking.experiments=x", "Did you mean tracking.experiment? Otherwise drop it"),
    ("+sed=1", "the config has no key 'sed', so nothing would read it. Did you mean seed? Otherwise drop it"),
    ("+devices.gpus=2", "devices has no key 'gpus', so nothing would read it. Drop it; the keys of devices are:"),
])
def test_a_key_appended_with_plus_gets_the_nearest_key_and_the_page(override, says):
    """The schema's own check words its line as the compose errors do: the nearest key, the page by its path."""
    with pytest.raises(ConfigError) as err:
        check_keys(plain(override))
    assert says in str(err.value)
    assert str(err.value).endswith(f"(see {docs.page()}).")


def test_a_name_set_by_hand_is_refused():
    with pytest.raises(ConfigError, match=r"^model\.name=cnn: .*Choose the option instead: model=cnn\."):
        check_keys(plain("model=linear", "model.name=cnn"))


def test_custom_model_kwargs_start_empty():
    """A user's own function gets only the kwargs they give (the example's defaults live in its signature)."""
    cfg = compose(["model=custom", "model._target_=my_pkg.models.build"])
    assert cfg.model._target_ == "my_pkg.models.build" and dict(cfg.model.kwargs) == {}
    cfg = plain("model=custom", "+model.kwargs.units=32")
    assert dict(cfg.model.kwargs) == {"units": 32}
    check_keys(cfg)


@pytest.mark.parametrize("overrides, node", [
    (["model=custom", "model._target_=my_models.build", "model.kwargs.units=32"], "model.kwargs"),
    (["dataset=custom", "dataset.kwargs.num_features=4"], "dataset.kwargs"),
    (["dataset=tfrecord", "dataset.features.x={dtype: float32, shape: [8]}"], "dataset.features"),
])
def test_a_users_own_mapping_takes_new_keys_without_plus(overrides, node):
    """The keys of a user's function or feature spec are theirs: docs/models.md's command composes."""
    cfg = plain(*overrides)
    new_key = overrides[-1].split("=", 1)[0].rsplit(".", 1)[-1]
    assert new_key in OmegaConf.select(cfg, node)
    check_keys(cfg)
    group = node.split(".")[0]
    with pytest.raises(ConfigCompositionException):  # the option's own keys stay closed
        compose(overrides[:-1] + [f"{group}.typo.{new_key}=1"])


# Override lists of each kind the tests compose: options chosen (one group twice), a list of
# options, options and values interleaved, keys added (+) and forced (++), a mapping, a null,
# a recipe, a group of Hydra's own with a value of the hydra node, an option deleted; and
# lists Hydra refuses, at the options (a deletion among them) or at the values.
KINDS = [
    [],
    ["trainer.epochs=3", "strategy=mirrored", "cross_ops=hierarchical", "devices.logical_cpus=2"],
    ["callbacks=[early_stopping]", "trainer.epochs=3", "callbacks=[early_stopping,terminate_on_nan]"],
    ["model=cnn", "+model.filters=[8]", "dataset=synthetic_images", "dataset.num_examples=50"],
    ["optimizer.lr_scaling=table", "++optimizer.lr_table={8: 0.1, 16: 0.2}"],
    ["dataset=custom", "dataset.num_examples=null", "trainer.steps_per_epoch=7"],
    ["dataset=tfrecord", "dataset.files=[data/*.tfrecord]", "+dataset.features.x={dtype: float32, shape: [8]}"],
    ["recipe=strategy_sweep", "trainer.epochs=1"],
    ["hydra/sweeper=optuna", "++hydra.sweeper.params.optimizer.learning_rate='interval(0.1, 0.2)'"],
    ["~schedule", "trainer.epochs=2"],
    ["~callbacks"],
    ["strategy=mirrord"],
    ["model=linear", "model.filters=[8]"],
    ["+sed=1"],
]


@pytest.mark.parametrize("overrides", KINDS, ids=[" ".join(k) or "none" for k in KINDS])
def test_the_tests_kept_compose_steps_compose_what_hydra_composes(overrides):
    """tests/helpers.compose keeps a compose's defaults list and merge per choice of options
    (_each_choice_of_groups_merged_once): the same config, hydra node and flags included, and the
    same error, as Hydra composing from scratch."""
    from hydra import compose as hydra_compose, initialize_config_dir

    def outcome(compose_once):
        try:
            cfg = compose_once()
        except Exception as err:  # noqa: BLE001  (the error is what is compared)
            return type(err).__name__, str(err), str(err.__cause__)
        flags = [(OmegaConf.is_struct(node), OmegaConf.is_readonly(node)) for node in (cfg, cfg.hydra, cfg.trainer)]
        return OmegaConf.to_yaml(cfg), flags

    compose(["strategy=mirrored"])  # the kept steps hold some other choice first

    def from_scratch():
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=True)

    assert outcome(lambda: compose(overrides)) == outcome(from_scratch)
