"""Every option of every config group composes; typos and wrong types fail at compose time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from tests.helpers import REPO, compose
from xpdist.core.schema import GROUPS

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


OPTIONS = _options()


def test_the_walk_finds_every_group_of_the_schema():
    groups = {group for group, _ in OPTIONS}
    assert set(GROUPS) <= groups


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group, option):
    cfg = compose([f"{group}={option}"])
    node = cfg
    for part in group.split("/"):
        node = node[part]
    if group in GROUPS:
        # The option file names itself: the code dispatches on `name`.
        assert node.name == option


def test_the_primary_config_composes_with_the_documented_defaults():
    cfg = compose()
    assert [cfg[g].name for g in GROUPS] == ["default", "auto", "auto", "local", "linear", "synthetic_regression",
                                             "sgd", "fit"]
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
    (conf / "trainer" / "typo.yaml").write_text("name: typo\nepoch: 3\n")
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            hydra_compose(config_name="config", overrides=["trainer=typo"])
    assert "epoch" in str(err.value.__cause__ or err.value)


def test_lr_table_can_be_given_on_the_command_line():
    cfg = compose(["optimizer.lr_scaling=table", "++optimizer.lr_table={8: 0.1, 16: 0.2}"])
    assert dict(cfg.optimizer.lr_table) == {8: 0.1, 16: 0.2}
