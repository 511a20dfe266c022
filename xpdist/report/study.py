"""A report on an Optuna study (a sweep made with hydra/sweeper=optuna): its trials sorted by
the objective, and the study's own plots as the sweeper logged them on the parent run."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from xpdist.tracking import store

STUDY_TAG, OBJECTIVE_TAG, DIRECTION_TAG = "xpdist.study", "xpdist.objective", "xpdist.direction"
TRIAL_TAG, STATE_TAG, PRUNED_TAG = "xpdist.trial", "xpdist.trial_state", "xpdist.pruned_at_epoch"
# Where the sweeper logs the study's plots on the parent run.
ARTIFACTS = "study"


def is_study(parent) -> bool:
    return parent is not None and STUDY_TAG in parent.data.tags


def sorted_trials(parent, runs: Sequence[Any]) -> List[Dict[str, Any]]:
    """One row per trial: best first by the objective, trials without a value last."""
    objective = parent.data.tags.get(OBJECTIVE_TAG, "loss")
    maximize = parent.data.tags.get(DIRECTION_TAG) == "maximize"
    space = [k for k in parent.data.params if not k.startswith("best.")]
    rows = []
    for run in runs:
        tags = run.data.tags
        value = run.data.metrics.get(objective)
        told = tags.get(STATE_TAG) in ("COMPLETE", None) and value is not None and math.isfinite(value)
        rows.append({"trial": tags.get(TRIAL_TAG, "?"), "state": tags.get(STATE_TAG, run.info.status),
                     "value": value, "told": told, "pruned_at": tags.get(PRUNED_TAG),
                     "params": {k: run.data.params.get(k) for k in space}, "run": run.info.run_name,
                     "run_id": run.info.run_id})
    rows.sort(key=lambda r: (not r["told"], (-1 if maximize else 1) * (r["value"] if r["told"] else 0.0)))
    return rows


def markdown(parent, rows: Sequence[Dict[str, Any]]) -> str:
    """The trials table, as a section of report.md."""
    objective = parent.data.tags.get(OBJECTIVE_TAG, "loss")
    direction = parent.data.tags.get(DIRECTION_TAG, "minimize")
    keys = list(rows[0]["params"]) if rows else []
    header = ["trial", "state", objective, *keys, "run"]
    lines = [f"## Study {parent.data.tags[STUDY_TAG]}: trials by {objective} ({direction}, best first)", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        state = row["state"] + (f" (epoch {row['pruned_at']})" if row["pruned_at"] else "")
        value = f"{row['value']:.6g}" if row["value"] is not None else ""
        cells = [str(row["trial"]), state, value, *[str(row["params"][k]) for k in keys], row["run"] or ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Storage: `{parent.data.tags.get('xpdist.study_storage', '?')}`. A pruned trial's value is its "
              "last epoch's; Optuna keeps it as PRUNED, not among the complete trials."]
    return "\n".join(lines) + "\n"


def fetch_plots(uri: str, parent, out_dir: Path) -> Dict[str, Path]:
    """The study's PNG plots logged on the parent run, copied into out_dir (name -> path)."""
    mlflow_client = store.client(uri)
    names = [a.path for a in store.retry(mlflow_client.list_artifacts, parent.info.run_id, ARTIFACTS)
             if a.path.endswith(".png")]
    files: Dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            local = Path(store.retry(mlflow_client.download_artifacts, parent.info.run_id, name, tmp))
            target = out_dir / f"study_{local.name}"
            shutil.copyfile(local, target)
            files[f"study_{local.stem}"] = target
    return files


def append(report_md: Path, parent, rows: Sequence[Dict[str, Any]], plots: Dict[str, Path]) -> Optional[Path]:
    """Adds the trials table and the study's plots to report.md."""
    text = markdown(parent, rows)
    if plots:
        text += "\n" + "\n".join(f"![{name}]({p.name})" for name, p in plots.items()) + "\n"
    with open(report_md, "a") as out:
        out.write("\n" + text)
    return report_md
