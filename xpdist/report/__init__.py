"""`python -m xpdist.report` / `xpdist-report`: compare runs as a table and plots.

Input is an experiment, a sweep (its parent run id) or a list of run ids in an MLflow store;
output is report.md, report.csv and PNG plots in a folder. For an Optuna study
(hydra/sweeper=optuna) report.md also lists the trials by the objective, with the study's plots. For a sweep the files are also
logged as artifacts of its parent run (under `report/`), so they show up in the MLflow UI.
It reads MLflow only (no TensorFlow), so it takes seconds.

Example:
    python -m xpdist.report --sweep 18beaa285add4c0ca7bc7db8692f7129 --out report
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from xpdist.tracking import reap, store
from xpdist.report import plots, study, tables
from xpdist.report.runs import DEFAULT_UI, ReportError, compare_url, open_store, read_rows, select_runs

ARTIFACT_PATH = "report"


@dataclasses.dataclass
class Report:
    rows: List[Dict[str, Any]]  # xpdist.report.runs.read_rows's
    files: Dict[str, Path]  # csv, md and each plot, by name
    parent_run_id: Optional[str] = None  # the sweep whose parent run got the files as artifacts


def build(uri: str, out_dir: Path, experiment: Optional[str] = None, sweep: Optional[str] = None,
          run_ids: Sequence[str] = (), log_to_parent: bool = True) -> Report:
    """Writes report.csv, report.md and the plots into out_dir (created if needed).

    Exactly one of experiment, sweep and run_ids selects the runs.

    Raises:
        ReportError: bad input, naming the command-line argument at fault.
    """
    mlflow_client = open_store(uri)
    reap.announce(reap.close_stale(uri))  # a run whose driver was lost is reported FAILED, not RUNNING
    runs, parent, title = select_runs(mlflow_client, experiment, sweep, run_ids)
    if not runs:
        raise ReportError("--experiment", f"experiment {experiment!r} has no runs yet")
    rows = read_rows(mlflow_client, runs)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ReportError("--out", f"cannot create {out_dir}: {err.strerror}") from None
    plot_files = plots.write_plots(rows, out_dir)
    # A URL for 50+ runs is too long to be useful.
    ui = uri.rstrip("/") if uri.startswith(("http://", "https://")) else DEFAULT_UI  # a server serves its own UI
    url = compare_url([r["run_id"] for r in rows], [r.info.experiment_id for r in runs], ui) if len(rows) <= 50 else None
    files = {"md": tables.write_markdown(rows, out_dir / "report.md", title, uri, plot_files, url),
             "csv": tables.write_csv(rows, out_dir / "report.csv"), **plot_files}
    if study.is_study(parent):  # an Optuna study: its trials by the objective, its own plots
        study_plots = study.fetch_plots(uri, parent, out_dir)
        study.append(files["md"], parent, study.sorted_trials(parent, runs), study_plots)
        files.update(study_plots)
    report = Report(rows, files)
    if parent is not None and log_to_parent:
        store.log_artifacts(uri, parent.info.run_id, files.values(), ARTIFACT_PATH)
        report.parent_run_id = parent.info.run_id
    return report


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xpdist-report", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", "-e", help="every run of this MLflow experiment (e.g. xpdist)")
    which.add_argument("--sweep", "-s", metavar="PARENT_RUN_ID",
                       help="the child runs of this sweep; the report is also logged to the parent run")
    which.add_argument("--runs", "-r", nargs="+", metavar="RUN_ID", default=(), help="these runs")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///$PWD/mlflow.db)")
    parser.add_argument("--out", "-o", type=Path, default=Path("report"), help="output folder (default: ./report)")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to the sweep's parent run")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    # An unreachable tracking server should fail in seconds, not after MLflow's minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    uri = store.resolve_uri(args.tracking_uri, Path.cwd())
    try:
        report = build(uri, args.out, args.experiment, args.sweep, args.runs, log_to_parent=not args.no_log)
    except ReportError as err:
        print(f"xpdist-report: error: {err}", file=sys.stderr)
        return 2
    print(f"xpdist-report: {len(report.rows)} runs -> {report.files['md']}")
    for name, path in report.files.items():
        if name != "md":
            print(f"  {path}")
    if report.parent_run_id:
        print(f"  logged as artifacts '{ARTIFACT_PATH}/' of sweep run {report.parent_run_id}")
    return 0


def cli() -> None:
    sys.exit(main())
