"""What the docs promise a newcomer: every recipe listed, commands that work outside a clone."""

from __future__ import annotations

import dataclasses
import enum
import io
import re
import shlex
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from tests import zygote
from tests.helpers import REPO, xpdist_env
from tests.unit.unit_helpers import plain
from xpdist.core.data_sources import FileDataset
from xpdist.core.plan import keras_flavour
from xpdist.core.schema import OPTIONS, check_keys
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


def test_the_commands_of_the_script_guide_compose():
    """docs/from-a-script.md's commands (the --check one and the sweep included) name real keys."""
    page = (REPO / "docs" / "from-a-script.md").read_text()
    commands = _commands(page) + [shlex.split(line)[3:] for line in re.findall(r"^(python -m xpdist .+)$", page, re.M)]
    assert len(commands) >= 3
    for args in commands:
        if "-m" in args:  # a sweep: each of its jobs
            args = [a.split(",")[0] if a.startswith("strategy=") else a for a in args if a != "-m"]
        args = [a for a in args if a != "--check"]
        assert "model=custom" in args and "dataset=custom" in args, args
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
        assert list(metrics)[0] == "loss" and list(metrics)[-1] == "steady_examples_per_sec"
        section = tracking.split("## Where output goes", 1)[1].split("\n## ", 1)[0]
        for key in metrics:
            assert f"`{key}`" in section, f"docs/tracking.md's 'Where output goes' does not explain {key}"


def test_the_final_line_shows_the_loss_the_metrics_and_the_rate_and_verbose_shows_the_rest():
    metrics = {"achieved_flops_per_sec": 1.5e5, "epoch_time_s": 0.01, "examples_per_sec": 9723.0,
               "first_step_s": 19.3, "flops_count_s": 0.33, "flops_per_example": 16.0, "learning_rate": 0.01,
               "loss": 0.0059, "mae": 0.074, "val_mae": 0.08, "val_loss": 0.007, "peak_memory_mb": 285.3,
               "steady_examples_per_sec": 9723.0, "input_wait_fraction": 0.1, "mfu": 0.2}
    result = JobResult(status="FINISHED", run_id="r", run_name="n", metrics=metrics)
    out = io.StringIO()
    print_summary(result, "sqlite:///x", out=out)
    assert _final_line(out.getvalue()) == ("loss=0.0059, mae=0.074, val_loss=0.007, val_mae=0.08, "
                                           "steady_examples_per_sec=9723")
    out = io.StringIO()
    print_summary(result, "sqlite:///x", out=out, verbose=True)
    assert [item.split("=")[0] for item in _final_line(out.getvalue()).split(", ")] == sorted(metrics)


def test_the_readme_links_each_page_once_and_the_example_project():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 100  # the front door: what it is, install, a run, the groups, where next
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


# What a user page must not hold: figures and remarks true for one machine on one evening. The
# generated pages of measurements are the exception: the benchmark's tables (scripts/bench.py
# writes them) and the equivalence matrix (docs/verify.md's command writes it), each headed by
# the machine, date and command that produced it.
GENERATED_MEASUREMENTS = "benchmark.md"
MEASURED_PAGES = (GENERATED_MEASUREMENTS, "equivalence.md")
NOTEBOOK_RULES = {
    "a date": r"\b20\d\d-[01]\d-[0-3]\d\b",
    "a clock time": r"(?<![\w.:/])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?![\w.:/])",
    "a CPU model name": r"\b(?:EPYC|Xeon|Ryzen|Threadripper|Opteron|Pentium|Celeron|Core i[3579]|Core Ultra|"
                        r"Apple M[1-4]|Graviton|Neoverse)\b",
    "the development machine": r"(?i)\b(?:this machine|this (?:2|two)-core|this CPU|this VM|"
                               r"(?:measured|ran|took|seen|verified|installs?|installed) here|"
                               r"\d[\d.,]* ?(?:s|ms|min|minutes?|MB|GB|%|x) here)\b",
    "a first-person remark": r"(?<![\w/'.-])(?:I|I'm|I've|my|My|we|We|our|Our|us)(?![\w/'-])",
}


# Where "this machine" means the machine the command runs on, as xpdist's own output and the
# generated configuration reference say it: not a remark about the machine the docs were written on.
USERS_MACHINE = ("one task process on this machine", "this machine belongs to", "the cluster this machine")


def notebook_remarks(text: str) -> list:
    """Each line of `text` that breaks a rule of NOTEBOOK_RULES, as (rule, line number, line)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for rule, pattern in NOTEBOOK_RULES.items():
            plain_line = line
            for phrase in USERS_MACHINE:
                plain_line = re.sub(re.escape(phrase), "", plain_line, flags=re.I)
            if re.search(pattern, plain_line):
                found.append((rule, number, line.strip()))
    return found


def user_pages() -> list:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [p for p in pages if p.name not in MEASURED_PAGES]


def test_the_rules_catch_a_dated_remark_a_cpu_model_and_a_first_person_note():
    planted = {
        "The suite took 19 minutes on 2026-12-06.": "a date",
        "Run again at 21:12, a slower hour.": "a clock time",
        "Measured on the AMD EPYC (Zen 4) kind.": "a CPU model name",
        "A 2-core Xeon with AMX-BF16 ran it in 13 minutes.": "a CPU model name",
        "On this machine the cnn trains at 11,000 ex/s.": "the development machine",
        "Creating the store takes 3.4 s here.": "the development machine",
        "I tried steps_per_execution=16 first.": "a first-person remark",
        "we measured it twice": "a first-person remark",
    }
    for line, rule in planted.items():
        assert rule in {r for r, _, _ in notebook_remarks(line)}, line
    assert notebook_remarks("cluster=local: one task process on this machine") == []
    clean = ("Run `python -m xpdist --config-dir conf dataset=my_data`, open 127.0.0.1:5000, and "
             "see examples/my_project/README.md; the run's folder is outputs/<date>/<time>/.")
    assert notebook_remarks(clean) == []


def test_no_user_page_holds_a_date_a_clock_time_a_cpu_model_or_a_first_person_remark():
    found = [f"{page.relative_to(REPO)}:{number}: {rule}: {line}"
             for page in user_pages() for rule, number, line in notebook_remarks(page.read_text())]
    assert not found, "\n".join(found)


# The guides a user reads in minutes: every page but the generated reference and measurements.
GUIDES_MAX_WORDS = 25_000
GENERATED = ("configuration.md", GENERATED_MEASUREMENTS, "equivalence.md")


def test_the_guides_hold_at_most_their_word_budget():
    words = {p.name: len(p.read_text().split()) for p in user_pages() if p.name not in GENERATED}
    total = sum(words.values())
    assert total <= GUIDES_MAX_WORDS, (
        f"the guides hold {total} words, over {GUIDES_MAX_WORDS}: cut before adding. Largest: "
        + ", ".join(f"{name} {n}" for name, n in sorted(words.items(), key=lambda kv: -kv[1])[:5]))


def conf_options() -> dict:
    """Every config group's options: the YAML files of conf/<group>/ (the ground truth), and, where
    the schema keeps a table of them (xpdist.core.schema.OPTIONS), that table's names too."""
    from xpdist.core import schema

    found = {d.name: {f.stem for f in d.glob("*.yaml")} for d in sorted((REPO / "conf").iterdir())
             if d.is_dir() and d.name not in ("hydra", "recipe", "__pycache__")}
    for group, names in (getattr(schema, "OPTIONS", None) or {}).items():
        found.setdefault(group, set()).update(names)
    return found


def groups_table_errors(readme: str, options: dict) -> list:
    """How the README's "Groups and options" table differs from `options`: each group's row must
    name exactly its options, each in backquotes, and every group must have a row."""
    table = readme.split("## Groups and options", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.M))
    errors = [f"group {g} has no row" for g in sorted(set(options) - set(rows))]
    errors += [f"row {g} names no group" for g in sorted(set(rows) - set(options))]
    for group in sorted(set(rows) & set(options)):
        listed = set(re.findall(r"`(\w+)`", rows[group]))
        errors += [f"{group}: {name} missing" for name in sorted(options[group] - listed)]
        errors += [f"{group}: {name} is no option" for name in sorted(listed - options[group])]
    return errors


def test_the_readme_groups_table_lists_every_option_of_every_group():
    assert groups_table_errors((REPO / "README.md").read_text(), conf_options()) == []


def test_the_groups_check_fails_on_a_missing_or_an_unknown_option():
    readme = "## Groups and options\n\n| `dataset` | `digits`, `npz` | the data |\n| `x` | `y` | z |\n\n## Next\n"
    errors = groups_table_errors(readme, {"dataset": {"digits", "npz", "plugin"}, "model": {"linear"}})
    assert errors == ["group model has no row", "row x names no group", "dataset: plugin missing"]


def clustered_engines() -> set:
    """The cluster options whose engine runs a cluster of task processes."""
    from xpdist.driver import engines

    return {name for name in engines.ENGINES if engines.get(name).multi_process}


def multi_process_strategies() -> list:
    from xpdist.core import strategies

    return list(strategies.names_where(lambda spec: spec.needs.multi_process))


def test_the_clusters_a_multi_process_strategy_can_use_are_the_engines_that_run_clusters():
    """concepts.md's strategy table names every cluster option whose engine runs a cluster of task
    processes (cluster=ray was once missing from it)."""
    clustered = clustered_engines()
    assert {"localhost", "tf_config", "slurm", "ray"} <= clustered
    concepts = (REPO / "docs" / "concepts.md").read_text()
    for name in multi_process_strategies():
        row = re.search(rf"^\|[^|\n]*\| `{name}` \| ([^|]+) \|", concepts, re.M)
        assert row, f"concepts.md has no row for {name}"
        assert set(re.findall(r"`(\w+)`", row.group(1))) == clustered, (name, row.group(1))


def test_the_strategy_yaml_comments_name_the_same_clusters():
    clustered = clustered_engines()
    for name in multi_process_strategies():
        comment = (REPO / "conf" / "strategy" / f"{name}.yaml").read_text()
        needs = re.search(r"Needs cluster=([^.]+)\.", comment)
        if needs:
            assert set(re.findall(r"\w+", needs.group(1).replace("cluster=", ""))) - {"or"} == clustered, name


def test_the_support_matrix_states_the_ranges_pyproject_accepts():
    """docs/support.md's accepted versions are pyproject.toml's own specifiers, and README says both
    the accepted and the tested Python."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    page = (REPO / "docs" / "support.md").read_text()
    assert f"`{project['requires-python']}`" in page
    wanted = ("tensorflow", "keras", "tf-keras", "mlflow", "hydra-core", "omegaconf", "optuna")
    specs = {re.split(r"[<>=\[]", d, maxsplit=1)[0]: d for d in project["dependencies"]}
    specs.update({re.split(r"[<>=\[]", d, maxsplit=1)[0]: d for d in project["optional-dependencies"]["ray"]})
    for name in (*wanted, "ray"):
        spec = specs[name]
        bounds = spec[spec.index(">"):] if ">" in spec else spec
        assert bounds in page, (name, spec)
    readme = (REPO / "README.md").read_text()
    assert "Python 3.11 or 3.12 (tested on 3.11" in readme and project["requires-python"] == ">=3.11,<3.13"
