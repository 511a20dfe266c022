#!/usr/bin/env bash
# The test command: installs xpdist with its test extras and the browser the UI test drives,
# then runs the whole suite (fast, slow, cluster and browser tests). Extra args go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"` for the fast tests alone.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --disable-pip-version-check -e ".[test]"

if ! command -v chromium >/dev/null 2>&1; then
  echo "scripts/test.sh: installing Debian's chromium for the MLflow UI browser test"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

exec python -m pytest "$@"
