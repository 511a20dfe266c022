"""Fixtures shared by every test tier (helpers live in tests/helpers.py)."""

from __future__ import annotations

import gc
import os
import shutil
import platform
import sys
from pathlib import Path

import pytest

# pytest keeps each test module's assertion rewrite in tests/**/__pycache__ for the next session,
# unless bytecode is not written (PYTHONDONTWRITEBYTECODE, set on some machines of this kind): then
# every xdist worker rewrites the ~250 modules it collects again, 1.7 s of the fast tier's start
# (pytest's rewrite.py reads sys.dont_write_bytecode at each import). The test processes write
# it, as scripts/test.sh's compileall writes the bytecode of xpdist and the tests; the processes
# the tests start keep the variable.
sys.dont_write_bytecode = False

from tests.helpers import Xpdist, store_template  # noqa: E402  (rewritten with its cache written)
from xpdist.task.measure.flops import CACHE_ENV as FLOPS_CACHE_ENV  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def flops_cache(tmp_path_factory) -> Path:
    """The FLOP counts that runs keep for the next ones (xpdist/task/measure/flops.py) go to a folder of
    this test process, not to ~/.cache: a count kept by an earlier session, of older code,
    would stand in for the counting that the tests check."""
    folder = tmp_path_factory.mktemp("flops-cache")
    os.environ[FLOPS_CACHE_ENV] = str(folder)
    return folder


@pytest.fixture
def xpdist(tmp_path: Path) -> Xpdist:
    """`python -m xpdist` in tmp_path, its MLflow store tmp_path/mlflow.db (created by the CLI)."""
    return Xpdist(tmp_path)


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """One empty, migrated MLflow store per test process, for the tiers that train to copy."""
    return store_template(tmp_path_factory.mktemp("store-template"))


@pytest.fixture
def store_uri(tmp_path: Path, migrated_store: Path) -> str:
    """sqlite:/// of tmp_path/mlflow.db, a copy of the migrated empty store."""
    shutil.copy(migrated_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def xpdist_with_store(request, tmp_path: Path) -> Xpdist:
    """Xpdist in tmp_path with a copy of the migrated store in place, unless the test is
    marked new_store (it checks what the CLI does to a store it creates, or that it creates none)."""
    if request.node.get_closest_marker("new_store") is None:
        shutil.copy(request.getfixturevalue("migrated_store"), tmp_path / "mlflow.db")
    return Xpdist(tmp_path)


# Session services a test reaches through these fixtures (tests/engines/conftest.py): the
# tests that share them run in one xdist worker, which starts each service once.
SHARED_SERVICES = {"pg_uri", "tracking", "hosts", "cluster_factory"}
# Files that compose the same configs (every option of every group): one group, so that each
# composition is made once (tests.helpers.compose caches them per process). The optimizer and
# precision matrices train their cells in shared task processes (tests/integration/conftest.py).
SAME_GROUP = {"tests/unit/test_config_docs.py": "tests/unit/test_config.py",
              "tests/integration/test_precision_matrix.py": "tests/integration/test_optimizer_matrix.py"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(items):
    """Groups the tests for `--dist loadgroup` (scripts/test.sh): a test file per group, so that
    its module-scoped runs are made once, and every test of the shared services in one group."""
    for item in items:
        shared = SHARED_SERVICES & set(getattr(item, "fixturenames", ()))
        path = item.nodeid.split("::", 1)[0]
        group = "services" if shared else SAME_GROUP.get(path, path)
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """Keeps the garbage collector's full collections short in each test process.

    Each full collection scans every tracked object, and a test process holds 700,000 and
    more (the imported modules of xpdist, Hydra, MLflow and SQLAlchemy, the cached composes):
    0.15 s a collection, 30-odd times per xdist worker in the fast tier and 5 more times at the
    end (pytest's unraisable-exception check), 6 to 7 s of each worker's minute. What survives a
    full collection is moved out of its reach (gc.freeze), at the end of the test it ran in,
    so the next one scans only what came since. Frozen objects still go when their last
    reference does; only a cycle among them outlives the test process's need of it.
    """
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_note_full_collection)


_FULL_COLLECTION_DONE = []


def _note_full_collection(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        _FULL_COLLECTION_DONE.append(True)


def pytest_runtest_teardown(item, nextitem):
    if _FULL_COLLECTION_DONE:
        _FULL_COLLECTION_DONE.clear()
        gc.freeze()


# Each test's tier, for the totals printed at the end: the first marker of this list it has.
TIERS = ("browser", "slurm", "netns", "ray", "postgres", "cluster", "slow")
# A test longer than this (setup, call and teardown) is named at the end; such a test needs
# its reason in a comment (docs/contributing.md).
LONG_TEST_S = 60.0


def pytest_terminal_summary(terminalreporter):
    """Prints the seconds spent per tier and the tests over LONG_TEST_S.

    Seconds are summed over tests: with several xdist workers they add up to more than the
    wall time. The CPU model goes beside them, since machines of one kind differ up to 3x.
    """
    per_test: dict = {}
    tiers: dict = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) not in ("setup", "call", "teardown"):
                continue
            per_test[report.nodeid] = per_test.get(report.nodeid, 0.0) + report.duration
            tiers[report.nodeid] = next((t for t in TIERS if t in report.keywords), "fast")
    if not per_test:
        return
    totals: dict = {}
    for nodeid, seconds in per_test.items():
        totals[tiers[nodeid]] = totals.get(tiers[nodeid], 0.0) + seconds
    write = terminalreporter.write_line
    terminalreporter.section("seconds per tier (summed over tests)")
    write(f"CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs")
    for tier in ("fast", *reversed(TIERS)):
        if tier in totals:
            write(f"{tier:>9}: {totals[tier]:7.1f} s")
    long = sorted(((s, n) for n, s in per_test.items() if s > LONG_TEST_S), reverse=True)
    for seconds, nodeid in long:
        write(f"over {LONG_TEST_S:.0f} s: {seconds:6.1f} s {nodeid}")


def _cpu_model() -> str:
    """The CPU's model name, and whether it has the bf16 kernels that make it about 3x faster."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    name = fields.get("model name\t", "unknown").strip()
    flags = set(fields.get("flags\t\t", "").split())
    fast = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in flags]
    return f"{name} ({', '.join(fast) if fast else 'no amx_bf16 or avx512_bf16'})"
