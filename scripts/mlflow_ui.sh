#!/usr/bin/env bash
# Opens the MLflow UI on an xpdist store, bound to 127.0.0.1 (the UI has no authentication).
#
#   scripts/mlflow_ui.sh [STORE] [PORT]
#
# STORE: an SQLite file (default: ./mlflow.db, where `python -m xpdist` logs when run from this
#        directory) or any MLflow store URI (sqlite:///..., postgresql://...).
# PORT:  default $XPDIST_UI_PORT, else 5000.
# Prints the URL of the experiment's runs table ($XPDIST_EXPERIMENT, default xpdist); Ctrl-C stops it.
set -euo pipefail

store="${1:-mlflow.db}"
port="${2:-${XPDIST_UI_PORT:-5000}}"
experiment="${XPDIST_EXPERIMENT:-xpdist}"

if [[ "$store" == *://* ]]; then
  uri="$store"
else
  if [[ ! -f "$store" ]]; then
    echo "mlflow_ui.sh: no MLflow store at $store: run \`python -m xpdist\` here first, or pass the store (path or URI)" >&2
    exit 2
  fi
  uri="sqlite:///$(cd "$(dirname "$store")" && pwd)/$(basename "$store")"
fi

base="http://127.0.0.1:$port"
experiment_id=""
if [[ "$uri" == sqlite:///* ]]; then
  # Read the id straight from the database: importing mlflow for it would add seconds.
  experiment_id="$(python3 - "${uri#sqlite:///}" "$experiment" <<'PY' || true
import sqlite3, sys
row = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(
    "SELECT experiment_id FROM experiments WHERE name = ?", (sys.argv[2],)).fetchone()
print(row[0] if row else "")
PY
)"
fi
if [[ -n "$experiment_id" ]]; then
  echo "mlflow_ui.sh: runs of experiment '$experiment': $base/#/experiments/$experiment_id/runs"
else
  echo "mlflow_ui.sh: MLflow UI at $base (experiments list: $base/#/experiments)"
fi
echo "mlflow_ui.sh: store $uri; the UI answers after 10-20 s; Ctrl-C stops it"
exec mlflow ui --host 127.0.0.1 --port "$port" --backend-store-uri "$uri"
