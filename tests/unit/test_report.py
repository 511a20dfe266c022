"""xpdist.report against a real temporary MLflow store (written with MlflowClient) and, marked
slow, against the runs of a real sweep."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from xpdist.tracking import store as tracking
from xpdist.report import build, main
from xpdist.report.runs import add_labels, report_row

from tests.helpers import REPO, closed_port, xpdist_env
PLOTS = {"loss.png", "examples_per_sec.png", "scaling_efficiency.png"}
# Per-epoch metrics of the sweep's children: (strategy, replicas, loss, val_loss, examples/sec).
# central_storage also logs steady_examples_per_sec (as xpdist's runner does), which the report prefers.
SWEEP = [("one_device", 1, [0.9, 0.5, 0.3], [1.0, 0.6, 0.4], [100.0, 200.0, 220.0]),
         ("mirrored", 2, [0.8, 0.4, 0.25], [0.9, 0.5, 0.35], [150.0, 300.0, 340.0]),
         ("central_storage", 2, [0.85, 0.45, 0.2], [0.95, 0.55, 0.3], [120.0, 250.0, 230.0])]


def _log_run(client, experiment_id, name, strategy, replicas, losses, val_losses, rates, parent=None,
             status="FINISHED", error=None, job=None):
    from mlflow.entities import Metric, Param

    tags = {"xpdist.wall_time_s": f"{30 + replicas:.2f}"}
    if parent:
        tags["mlflow.parentRunId"] = parent
    if error:
        tags[tracking.ERROR_TAG] = error
    if job is not None:
        tags["xpdist.job"] = str(job)
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    params = {"strategy": strategy, "cross_ops": "auto" if strategy == "mirrored" else "none",
              "communication": "none", "num_replicas": str(replicas), "global_batch_size": str(16 * replicas)}
    metrics = []
    for epoch, (loss, val, rate) in enumerate(zip(losses, val_losses, rates), start=1):
        metrics += [Metric("loss", loss, epoch, epoch), Metric("val_loss", val, epoch, epoch),
                    Metric("examples_per_sec", rate, epoch, epoch)]
    if strategy == "central_storage":
        metrics.append(Metric("steady_examples_per_sec", 260.0, len(rates), len(rates)))
    client.log_batch(run.info.run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory, migrated_store):
    """A store with one finished 3-run sweep and one FAILED run outside it, in experiment xpdist."""
    root = tmp_path_factory.mktemp("store")
    shutil.copy(migrated_store, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment_id = tracking.ensure_experiment(client, "xpdist", uri)
    parent = client.create_run(experiment_id, run_name="sweep-test", tags={"xpdist.sweep": "true"}).info.run_id
    # Started in another order than their job numbers, as parallel jobs can be.
    started = [_log_run(client, experiment_id, f"{i}-{s}-{r}r", s, r, l, v, e, parent=parent, job=i)
               for i, (s, r, l, v, e) in reversed(list(enumerate(SWEEP)))]
    children = started[::-1]  # job order
    client.set_terminated(parent, "FINISHED")
    failed = _log_run(client, experiment_id, "lonely-mirrored", "mirrored", 2, [0.7], [0.8], [90.0],
                      status="FAILED", error="TaskError: worker 1 died")
    return {"uri": uri, "client": client, "parent": parent, "children": children, "failed": failed,
            "experiment_id": experiment_id}


def _csv(path: Path) -> list:
    with path.open() as f:
        return list(csv.DictReader(f))


def _assert_png(path: Path) -> None:
    with Image.open(path) as image:
        image.verify()  # raises on a truncated or corrupt file
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 150


def test_sweep_report_tables_plots_and_artifacts(store, tmp_path):
    report = build(store["uri"], tmp_path / "out", sweep=store["parent"])

    rows = _csv(tmp_path / "out" / "report.csv")
    assert [r["run_id"] for r in rows] == store["children"]
    assert [r["strategy"] for r in rows] == ["one_device", "mirrored", "central_storage"]
    assert [r["replicas"] for r in rows] == ["1", "2", "2"]
    assert [r["global_batch"] for r in rows] == ["16", "32", "32"]
    assert [r["cross_ops"] for r in rows] == ["none", "auto", "none"]
    assert [float(r["final_loss"]) for r in rows] == [0.3, 0.25, 0.2]  # the last epoch's
    assert [float(r["final_val_loss"]) for r in rows] == [0.4, 0.35, 0.3]
    # Steady state: the run's steady_examples_per_sec, else the upper median of epochs 2.. (as the runner).
    assert [float(r["examples_per_sec"]) for r in rows] == [220.0, 340.0, 260.0]
    # (examples/sec / replicas) / one_device's examples/sec
    assert [float(r["scaling_efficiency"]) for r in rows] == pytest.approx([1.0, 170 / 220, 130 / 220])
    assert [float(r["wall_time_s"]) for r in rows] == [31.0, 32.0, 32.0]
    assert {r["status"] for r in rows} == {"FINISHED"}

    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| 1-mirrored-2r | mirrored | auto | none | 2 | 32 | 0.25 | 0.35 | 340 | 0.7727 | 32 | FINISHED |" in markdown
    for plot in PLOTS:
        _assert_png(tmp_path / "out" / plot)
        assert f"]({plot})" in markdown
    assert "compare-runs?runs=" in markdown

    # The same files, as artifacts of the sweep's parent run.
    assert report.parent_run_id == store["parent"]
    client = store["client"]
    logged = {Path(a.path).name for a in client.list_artifacts(store["parent"], "report")}
    assert logged == PLOTS | {"report.md", "report.csv"}
    fetched = client.download_artifacts(store["parent"], "report/report.csv", str(tmp_path))
    assert Path(fetched).read_text() == (tmp_path / "out" / "report.csv").read_text()


def test_experiment_report_includes_failed_runs_and_not_the_parent(store, tmp_path):
    report = build(store["uri"], tmp_path, experiment="xpdist")

    rows = _csv(tmp_path / "report.csv")
    assert [r["run_id"] for r in rows] == store["children"] + [store["failed"]]
    assert rows[-1]["status"] == "FAILED"
    # Outside the sweep, so no one_device baseline of its own.
    assert rows[-1]["scaling_efficiency"] == ""
    assert report.parent_run_id is None
    assert "- lonely-mirrored (FAILED): TaskError: worker 1 died" in (tmp_path / "report.md").read_text()


def test_run_list_without_baseline_has_no_scaling_plot(store, tmp_path):
    picked = store["children"][1:]
    build(store["uri"], tmp_path, run_ids=picked)

    rows = _csv(tmp_path / "report.csv")
    assert [r["run_id"] for r in rows] == picked
    assert all(r["scaling_efficiency"] == "" for r in rows)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["examples_per_sec.png", "loss.png"]
    assert "No FINISHED one_device run here" in (tmp_path / "report.md").read_text()


def test_report_row_without_history_never_shows_the_last_epoch_as_steady(store):
    """What a caller holding only Run objects gets: xpdist.summary's row, plus the parent run;
    a run without a steady figure and no history given has none (not the last epoch's)."""
    run = store["client"].get_run(store["children"][1])
    row = report_row(run)
    assert (row["strategy"], row["replicas"], row["final_loss"], row["examples_per_sec"]) == ("mirrored", 2, 0.25, None)
    assert report_row(run, {"examples_per_sec": [(1, 100.0), (2, 340.0)]})["examples_per_sec"] == 340.0
    assert row["parent_run_id"] == store["parent"]


def test_the_table_shows_the_params_that_differ_between_the_runs(tmp_path, store_uri):
    """Runs logged with the params xpdist logs for real configs that differ in model, dataset,
    optimizer and learning rate: the table names those, and not what its columns already show."""
    from omegaconf import OmegaConf

    from tests.unit.unit_helpers import plain
    from xpdist.core.plan import make_plan
    from xpdist.tracking.params import run_params

    uri = store_uri
    client = tracking.client(uri)
    experiment_id = tracking.ensure_experiment(client, "xpdist", uri)
    configs = {"linear": [], "cnn": ["model=cnn", "dataset=digits", "strategy=mirrored", "devices.logical_cpus=2"],
               "adam": ["optimizer=adam", "optimizer.learning_rate=0.003"]}
    for name, overrides in configs.items():
        cfg = plain(*overrides)
        params = run_params(OmegaConf.to_container(cfg), make_plan(cfg, tmp_path))
        tracking.create_run(uri, "xpdist", name, params, {})
    build(uri, tmp_path / "out", experiment="xpdist")

    differs = {r["run_name"]: r["differs"] for r in _csv(tmp_path / "out" / "report.csv")}
    assert differs == {
        "linear": "dataset=synthetic_regression devices.logical_cpus=1 learning_rate=0.01 model=linear optimizer=sgd",
        "cnn": "dataset=digits devices.logical_cpus=2 learning_rate=0.01 model=cnn optimizer=sgd",
        "adam": "dataset=synthetic_regression devices.logical_cpus=1 learning_rate=0.003 model=linear optimizer=adam"}
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| run | params that differ | strategy |" in markdown
    assert "| cnn | dataset=digits devices.logical_cpus=2 learning_rate=0.01 model=cnn optimizer=sgd | mirrored |" \
        in markdown


def test_labels_tell_apart_runs_of_the_same_name():
    rows = [{"run_name": "0-a", "run_id": "aaaaaaaaaa"}, {"run_name": "0-a", "run_id": "bbbbbbbbbb"},
            {"run_name": "1-b", "run_id": "cc"}]
    add_labels(rows)
    assert [r["label"] for r in rows] == ["0-a (aaaaaaaa)", "0-a (bbbbbbbb)", "1-b"]


@pytest.mark.parametrize("args, argument", [
    (["--experiment", "nope"], "--experiment: no experiment named 'nope'. Known: "),
    (["--runs", "0123456789abcdef"], "--runs: no run with id '0123456789abcdef'"),
    (["--sweep", "CHILD"], "--sweep: run CHILD has no child runs"),
    (["--experiment", "xpdist", "--tracking-uri", "sqlite:////nonexistent/mlflow.db"], "--tracking-uri: no MLflow store"),
    (["--experiment", "xpdist", "--tracking-uri", "http://127.0.0.1:PORT"], "--tracking-uri: cannot read"),
])
def test_bad_input_is_one_line_naming_the_argument(store, tmp_path, capsys, monkeypatch, args, argument):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    child = store["children"][0]
    args = [a.replace("CHILD", child).replace("PORT", str(closed_port())) for a in args]
    argument = argument.replace("CHILD", child)
    if "--tracking-uri" not in args:
        args += ["--tracking-uri", store["uri"]]

    assert main(args + ["--out", str(tmp_path / "out")]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"xpdist-report: error: {argument}"), err
    assert not (tmp_path / "out").exists()


def test_module_entry_point_reads_no_tensorflow(store, tmp_path):
    code = ("import runpy, sys; sys.argv = ['xpdist-report'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('xpdist.report', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'tensorflow' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code, "--runs", store["children"][0], "--tracking-uri",
                           store["uri"], "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"1 runs -> {tmp_path / 'report.md'}" in done.stdout


@pytest.mark.slow
def test_report_on_a_real_sweep(xpdist):
    done = xpdist.run("strategy=one_device,mirrored", "devices.logical_cpus=2", multirun=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    parent = next(r for r in xpdist.runs() if r.data.tags.get("xpdist.sweep") == "true").info.run_id

    # From the launch directory the default store is ./mlflow.db, as for `python -m xpdist`.
    report = subprocess.run([sys.executable, "-m", "xpdist.report", "--sweep", parent],
                            cwd=xpdist.workdir, env=_env(), capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr

    out = xpdist.workdir / "report"
    rows = _csv(out / "report.csv")
    assert [(r["strategy"], r["replicas"], r["status"]) for r in rows] == \
        [("one_device", "1", "FINISHED"), ("mirrored", "2", "FINISHED")]
    assert all(float(r["examples_per_sec"]) > 0 and float(r["wall_time_s"]) > 0 for r in rows)
    children = {r.info.run_id: r for r in xpdist.runs() if r.data.tags.get("mlflow.parentRunId") == parent}
    assert [float(r["examples_per_sec"]) for r in rows] == \
        pytest.approx([children[r["run_id"]].data.metrics["steady_examples_per_sec"] for r in rows])
    assert float(rows[0]["scaling_efficiency"]) == 1.0 and float(rows[1]["scaling_efficiency"]) > 0
    for plot in PLOTS:
        _assert_png(out / plot)
    logged = {Path(a.path).name for a in xpdist.client().list_artifacts(parent, "report")}
    assert logged == PLOTS | {"report.md", "report.csv"}


def _env() -> dict:

    return xpdist_env()


def test_runs_with_the_same_loss_curve_are_all_visible():
    """mirrored and central_storage often log the same losses: each line must still show."""
    from xpdist.report.plots import loss_figure

    same = {"loss": [(1, 0.9), (2, 0.5)], "val_loss": [(1, 1.0), (2, 0.6)]}
    rows = [{"label": name, "history": same} for name in ("one_device", "mirrored", "central_storage")]
    fig = loss_figure(rows)
    for ax in fig.axes[:2]:
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == ["one_device", "mirrored", "central_storage"]
        assert len({line.get_marker() for line in lines}) == 3
        assert all(line.get_markerfacecolor() == "none" for line in lines)  # hollow: one shape shows through another


def test_report_md_gives_the_mlflow_ui_command_itself(store, tmp_path):
    """scripts/ exists only in a clone of the repository; `mlflow ui` works wherever xpdist is installed."""
    build(store["uri"], tmp_path, sweep=store["parent"], log_to_parent=False)
    markdown = (tmp_path / "report.md").read_text()
    assert "scripts/" not in markdown
    assert f"`mlflow ui --host 127.0.0.1 --port 5000 --backend-store-uri {store['uri']}`" in markdown


def test_many_runs_are_plotted_as_groups(tmp_path, monkeypatch, store_uri):
    """60 runs of 3 strategies: each plot shows 3 groups (median and range), not 60 runs, and the
    bulk history read gives each run its own epochs."""
    from xpdist.report import plots

    uri = store_uri
    client = tracking.client(uri)
    experiment_id = tracking.ensure_experiment(client, "many", uri)
    strategies = [("one_device", 1), ("mirrored", 2), ("central_storage", 2)]
    for i in range(60):
        strategy, replicas = strategies[i % 3]
        _log_run(client, experiment_id, f"run-{i}", strategy, replicas, [1.0 + i, 0.5 + i], [1.1, 0.6],
                 [100.0, 200.0 + i], job=i)
    legends = {}
    real_save = plots._save

    def save_and_read_legend(fig, path):
        legends[path.name] = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", save_and_read_legend)
    report = build(uri, tmp_path / "out", experiment="many")

    assert len(report.rows) == 60
    by_name = {r["run_name"]: r for r in report.rows}
    assert by_name["run-7"]["history"]["loss"] == [(1, 8.0), (2, 7.5)]
    assert len(legends["loss.png"]) == 3
    assert legends["loss.png"][0].startswith("strategy=one_device") and "(20 runs)" in legends["loss.png"][0]
    with Image.open(tmp_path / "out" / "examples_per_sec.png") as image:
        assert image.height < 600  # one bar per group; 60 bars would be ~3,000 px tall
