"""The MLflow UI, in a real headless Chromium, shows a finished 3-strategy sweep side by side.

Runs a real sweep, serves its store with scripts/mlflow_ui.sh on a free loopback port, opens
the compare view of the three child runs with Playwright (driving Debian's chromium, never a
downloaded browser) and checks the runs and their strategy and num_replicas params are shown.
The screenshot is kept in the test's tmp dir, and in $XPDIST_SCREENSHOT_DIR when set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.helpers import REPO, closed_port

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

CHROMIUM = "/usr/bin/chromium"
# Headless Chromium as root in a container: without --no-sandbox it refuses to start as root,
# and the --disable-* flags keep it from reaching the network; a fresh --user-data-dir is
# Playwright's own. Playwright adds --headless itself.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
STRATEGIES = ("one_device", "mirrored", "central_storage")
# The UI answers after 10-20 s on an idle machine; over a minute was seen on a busy one.
UI_START_TIMEOUT_S = 240
PAGE_TIMEOUT_MS = 120_000


def _wait_until_up(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + UI_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow ui exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    pytest.fail(f"mlflow ui did not answer {url} within {UI_START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after a grace: its job consumers
    (huey) were seen to outlive SIGTERM by more than 15 s."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(proc.pid):
            proc.poll()  # reaps the leader once it exits
            time.sleep(0.2)
        if not _group_alive(proc.pid):
            break
    proc.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    return any(_pgid(p) == pgid and p.status() != psutil.STATUS_ZOMBIE for p in psutil.process_iter())


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, psutil.Error):
        return None


@pytest.fixture
def finished_sweep(xpdist):
    """A real 3-strategy sweep, its jobs side by side: (tracking uri, experiment id, child runs in job order)."""
    done = xpdist.run("strategy=" + ",".join(STRATEGIES), "devices.logical_cpus=2", "trainer.epochs=1",
                      "trainer.progress=false", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3",
                      multirun=True, tiny=False, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = xpdist.runs()
    parents = [r for r in runs if r.data.tags.get("xpdist.sweep") == "true"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    children.sort(key=lambda r: int(r.data.tags["xpdist.job"]))
    assert [r.data.params["strategy"] for r in children] == list(STRATEGIES)
    assert all(r.info.status == "FINISHED" for r in children)
    return xpdist.workdir / "mlflow.db", parents[0].info.experiment_id, children


@pytest.fixture
def mlflow_ui(finished_sweep, tmp_path):
    """Serves the sweep's store with scripts/mlflow_ui.sh; yields its base URL; stops it after."""
    store, experiment_id, _ = finished_sweep
    # portpicker's free port; if another process binds it first, the UI fails to start and
    # _wait_until_up reports the server's log.
    port = closed_port()
    log = tmp_path / "mlflow_ui.log"
    with log.open("w") as out:
        # Its own session, so the server and every worker it forks stop together.
        proc = subprocess.Popen(["bash", str(REPO / "scripts" / "mlflow_ui.sh"), str(store), str(port)],
                                cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, f"{base}/health", log)
        # The script tells the user where the runs table is.
        assert f"{base}/#/experiments/{experiment_id}/runs" in log.read_text()
        yield base
    finally:
        _stop_group(proc)
    assert not _group_alive(proc.pid), "mlflow ui left processes behind"


# Over 60 s with its fixtures (69 s in a full run): a 3-job sweep, an MLflow UI that answers
# after 10-20 s, and a browser.
def test_compare_view_shows_the_sweep(finished_sweep, mlflow_ui, tmp_path):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: `apt-get install -y chromium` (scripts/test.sh does it)"
    from playwright.sync_api import sync_playwright

    _, experiment_id, children = finished_sweep
    run_ids = [r.info.run_id for r in children]
    url = (f"{mlflow_ui}/#/compare-runs?runs={urllib.parse.quote(json.dumps(run_ids))}"
           f"&experiments={urllib.parse.quote(json.dumps([experiment_id]))}")
    profile = tmp_path / "chromium-profile"
    shot = tmp_path / "mlflow-compare.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1100})
        try:
            page = browser.new_page()
            page.goto(url, timeout=PAGE_TIMEOUT_MS)
            page.get_by_text("num_replicas").first.wait_for(timeout=PAGE_TIMEOUT_MS)
            # What a person does first: hide the assistant and the plots, keep the params that differ.
            if page.get_by_role("button", name="Close").count():
                page.get_by_role("button", name="Close").first.click()
            page.get_by_text("Visualizations", exact=True).click()
            page.get_by_role("switch", name="Parameters - Show diff only").click()

            def row(name: str) -> list:
                cells = page.locator("table.mlflow-compare-table tr", has=page.get_by_text(name, exact=True))
                cells.first.wait_for(timeout=PAGE_TIMEOUT_MS)
                return [c.strip() for c in cells.first.inner_text().split("\t") if c.strip()]

            names = row("Run Name:")
            assert names[1:] == [r.info.run_name for r in children]
            assert row("strategy") == ["strategy", *STRATEGIES]
            assert row("num_replicas") == ["num_replicas", *(r.data.params["num_replicas"] for r in children)]
            assert row("num_replicas")[1:] == ["1", "2", "2"]
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    # Playwright closes Chromium with the context: none of its processes may survive.
    left = [p for p in psutil.process_iter(["cmdline"]) if str(profile) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"chromium processes left: {[p.pid for p in left]}"
    assert shot.stat().st_size > 10_000
    if os.environ.get("XPDIST_SCREENSHOT_DIR"):
        target = Path(os.environ["XPDIST_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / shot.name)
