"""What the docs promise a newcomer: every recipe listed, commands that work outside a clone."""

from __future__ import annotations

import dataclasses
import enum
import io
import re
import shlex
import sys

import yaml
from omegaconf import OmegaConf

from tests import zygote
from tests.helpers import REPO, xpdist_env
from tests.unit.unit_helpers import plain
from xpdist.core.plan import keras_flavour
from xpdist.core.schema import OPTIONS, check_keys
from xpdist.core.data_sources import FileDataset
from xpdist.driver.jobs import requeue
from xpdist.driver.jobs.job import JobResult, print_summary
from xpdist.report import summary

RECIPES = sorted(p.relative_to(REPO / "recipes").with_suffix("").as_posix()
                 for p in (REPO / "recipes").rglob("*.yaml"))


def test_every_recipe_is_listed_in_the_docs_with_its_command():
    page = (REPO / "docs" / "recipes.md").read_text()
    listed = re.findall(r"^\| `([\w/]+)` \|", page, re.MULTILINE)
    assert sorted(listed) == RECIPES
    for name in RECIPES:
        assert f"`python -m xpdist recipe={name}`" in page


def _commands(page: str) -> list:
    """The one-line `python -m xpdist ...` commands of a page (inline code), as argument lists."""
    return [shlex.split(line)[3:] for line in re.findall(r"`(python -m xpdist [^`]+)`", page)]


def test_the_custom_model_commands_compose():
    """docs/models.md and examples/my_project set model.kwargs on the command line, without `+`."""
    pages = [REPO / "docs" / "models.md", REPO / "examples" / "my_project" / "README.md"]
    commands = [args for page in pages for args in _commands(page.read_text()) if "model=custom" in args]
    assert len(commands) >= 2 and all(any(a.startswith("model.kwargs.") for a in c) for c in commands)
    for args in commands:
        check_keys(plain(*args))


def test_the_option_file_of_data_md_composes(tmp_path):
    """The TFRecord example is an option of the dataset group, read with --config-dir."""
    page = (REPO / "docs" / "data.md").read_text()
    block = re.search(r"```yaml\n(# conf/dataset/my_data\.yaml.*?)```", page, re.S)
    assert block, "the dataset option example is missing from docs/data.md"
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "my_data.yaml").write_text(block.group(1))
    assert "python -m xpdist --config-dir conf dataset=my_data" in block.group(1)
    done = zygote.run([sys.executable, "-m", "xpdist", "--config-dir", "conf", "dataset=my_data", "--cfg", "job"],
                      tmp_path, xpdist_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    dataset = yaml.safe_load(done.stdout)["dataset"]
    assert dataset["name"] == "tfrecord" and dataset["files"] == ["data/train-*.tfrecord"]
    assert dataset["features"]["label"] == {"dtype": "int64", "shape": []}


def test_the_streamed_options_table_of_data_md_has_the_schemas_defaults():
    page = (REPO / "docs" / "data.md").read_text()
    rows = re.findall(r"^\| `dataset\.(\w+)` \| ([^|]+) \|", page, re.M)
    assert len(rows) >= 5
    base = {f.name: f.default for f in dataclasses.fields(FileDataset)}
    for key, default in rows:
        want = base[key].name if isinstance(base[key], enum.Enum) else base[key]
        assert default.strip() == str(want).lower(), (key, default, want)


def test_the_sample_sweep_table_has_the_columns_a_sweep_prints():
    """docs/sweeps.md shows the table's real headers; no page calls its throughput the last epoch's."""
    page = (REPO / "docs" / "sweeps.md").read_text()
    header = re.search(r"^ +(job  overrides .*)$", page, re.M)
    assert header, "the sample sweep table is missing from docs/sweeps.md"
    assert re.split(r" {2,}", header.group(1).strip()) == [title for _, title in summary.SWEEP_COLUMNS]
    for name in ("sweeps.md", "tracking.md", "api.md"):
        text = " ".join((REPO / "docs" / name).read_text().split())
        assert "last epoch's figure" not in text, name


def test_a_requeued_slurm_job_is_documented_as_reopening_its_run_by_tag():
    """clusters.md and lifecycle.md say what xpdist/driver/jobs/requeue.py does: no tracking.resume needed."""
    for name in ("clusters.md", "lifecycle.md"):
        text = (REPO / "docs" / name).read_text()
        assert f"`{requeue.TAG}" in text and f"`{requeue.RESTARTS_TAG}`" in text, name
    lifecycle = (REPO / "docs" / "lifecycle.md").read_text()
    assert "tracking.resume=$RUN_ID" not in lifecycle


def _final_line(text: str) -> str:
    found = re.search(r"^ *final: (.+)$", text, re.M)
    assert found, "no sample `final:` line"
    return found.group(1)


def test_the_readme_sample_final_line_is_what_a_run_prints():
    """README's and tracking.md's `final:` lines are formatted by print_summary, and tracking.md
    explains every figure in them."""
    tracking = (REPO / "docs" / "tracking.md").read_text()
    for text in ((REPO / "README.md").read_text(), tracking):
        line = _final_line(text)
        metrics = {k: float(v) for k, v in (item.split("=") for item in line.split(", "))}
        out = io.StringIO()
        print_summary(JobResult(status="FINISHED", run_id="r", run_name="n", metrics=metrics), "sqlite:///x", out=out)
        assert _final_line(out.getvalue()) == line
        assert {"loss", "examples_per_sec", "steady_examples_per_sec", "first_step_s", "epoch_time_s"} <= set(metrics)
        section = tracking.split("## Where output goes", 1)[1].split("\n## ", 1)[0]
        for key in metrics:
            assert f"`{key}`" in section, f"docs/tracking.md's 'Where output goes' does not explain {key}"


def test_the_readme_links_each_page_once_and_the_example_project():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    rows = re.findall(r"^\| \[([^\]]+)\]\(", readme.split("## Where to read on", 1)[1], re.M)
    assert len(rows) == len(set(rows)), rows
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    assert not [p for p in pages if p not in rows], "a page of docs/ is missing from README's list"
    for page in ("README.md", "docs/models.md", "docs/data.md"):
        assert "examples/my_project/README.md)" in (REPO / page).read_text(), page


def test_the_pages_name_every_strategy_whose_model_fit_runs_on_tf_keras():
    """keras=auto picks tf-keras for Model.fit under some strategies; models.md and tracking.md list them all."""
    strategies = [name for name in OPTIONS["strategy"]
                  if keras_flavour(OmegaConf.create({"keras": "auto", "trainer": {"name": "fit"},
                                                      "strategy": {"name": name}})) == "legacy"]
    assert "central_storage" in strategies
    for name in ("models.md", "tracking.md"):
        text = " ".join((REPO / "docs" / name).read_text().split())
        sentence = re.search(r"`keras=auto` picks [^)]*", text)
        assert sentence, name
        assert all(f"`{s}`" in sentence.group(0) for s in strategies), (name, sentence.group(0))


def test_recipes_are_listed_on_one_page():
    """recipes.md is the one list of recipes (and the one rule for writing them); other pages link to it."""
    for page in sorted((REPO / "docs").glob("*.md")):
        if page.name == "recipes.md":
            continue
        tables = re.findall(r"^\| `?(\w+)`? \|.*`python -m xpdist recipe=\1`", page.read_text(), re.M)
        assert not tables, f"{page.name} lists recipes of its own: {tables}; link to recipes.md"
        assert "Writing a recipe" not in page.read_text(), page.name
