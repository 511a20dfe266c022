#!/usr/bin/env bash
# The test command: installs xpdist with its test and ray extras and the browser the UI test drives,
# then runs the whole suite (fast, slow, cluster and browser tests). Extra args go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"` for the fast tests alone.
set -euo pipefail
cd "$(dirname "$0")/.."

# The ray extra: the cluster=ray tests start real Ray processes (they skip where Ray cannot start).
# pip runs unless this checkout's install is already in place here (scripts/installed.py: about
# 0.3 s, where pip takes 7 s to find nothing to do).
if ! python scripts/installed.py test,ray; then
  python -m pip install --quiet --disable-pip-version-check -e ".[test,ray]"
  python scripts/installed.py --record test,ray
fi

# Debian packages the browser and engine tests need: chromium (MLflow UI test), slurm-wlm and
# munge (a real single-node SLURM), postgresql (the MLflow server's database), iproute2
# (network namespaces). Without apt-get, or without root or sudo, the tests that need them skip
# with the reason.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v srun >/dev/null 2>&1 \
  || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1 \
   && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
  echo "scripts/test.sh: installing Debian's ${missing[*]} for the browser and engine tests"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  # The services these packages may have just started are not wanted: the tests start private ones.
  for pkg in "${missing[@]}"; do
    case "$pkg" in
      slurm-wlm) units="slurmctld slurmd" ;; munge) units="munge" ;; postgresql) units="postgresql" ;; *) units="" ;;
    esac
    for unit in $units; do $SUDO service "$unit" stop >/dev/null 2>&1 || true; done
  done
elif [ "${#missing[@]}" -gt 0 ]; then
  echo "scripts/test.sh: ${missing[*]} missing and no apt-get with root: their tests will skip"
fi

# Both cores (or more): tests run in pytest-xdist workers, a group at a time: a test file, or
# every test of the PostgreSQL, MLflow server and network-namespace services (tests/conftest.py),
# so that module-scoped runs and session services are made once. `-n 0` runs in one process;
# an explicit -n or --dist of the caller wins.
parallel=(-n "${XPDIST_TEST_WORKERS:-auto}" --dist loadgroup)
for arg in "$@"; do
  case "$arg" in -n|-n[0-9]*|-nauto|--numprocesses*|--dist*|no:xdist) parallel=() ;; esac
done
# Bytecode for xpdist and the tests, written once here: the suite starts hundreds of Python
# processes that import them, and where PYTHONDONTWRITEBYTECODE is set none of them writes it, so
# each compiled xpdist from source again (4 s of the fast tier's minute on 2 cores). compileall
# writes it whatever that variable says; it does nothing to files whose bytecode is current.
python -m compileall -q xpdist tests scripts >/dev/null
lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1 | sed 's/^/scripts\/test.sh: CPU: /'
exec python -m pytest "${parallel[@]}" "$@"
