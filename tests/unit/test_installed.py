"""scripts/installed.py: scripts/test.sh skips pip only when this checkout's install is in place.

A stand-in xpdist distribution (a dist-info directory put ahead of site-packages) shows each
reason to run pip; the real install is the case where nothing is missing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

SCRIPT = str(REPO / "scripts" / "installed.py")


def _ask(tmp_path, requires=(), url=REPO.as_uri(), editable=True):
    info = tmp_path / "xpdist-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xpdist\nVersion: 0.1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "direct_url.json").write_text(f'{{"url": "{url}", "dir_info": {{"editable": {str(editable).lower()}}}}}')
    return subprocess.run([sys.executable, SCRIPT, "test"], env={"PYTHONPATH": str(tmp_path)}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("requires, says", [
    (["no-such-package-xpdist>=1"], "no-such-package-xpdist (needed by xpdist) is not installed"),
    (["pytest<1; extra == 'test'"], "needs <1"),
    # everything installed (a requirement's own extras followed: psycopg[binary] needs
    # psycopg-binary): only the stamp of the last install from this checkout is left to ask for
    (["psycopg[binary]", "hydra-core"], "pyproject.toml, the package directories"),
])
def test_a_missing_or_too_old_requirement_needs_pip(tmp_path, requires, says):
    done = _ask(tmp_path, requires)
    assert done.returncode == 1 and says in done.stdout, done.stdout + done.stderr


def test_an_install_from_elsewhere_needs_pip(tmp_path):
    done = _ask(tmp_path, url="file:///elsewhere")
    assert done.returncode == 1 and "file:///elsewhere, not" in done.stdout, done.stdout


def test_an_extra_not_asked_for_is_not_required(tmp_path):
    done = _ask(tmp_path, ["no-such-package-xpdist; extra == 'gpu'"])
    assert done.returncode == 1 and "pyproject.toml, the package directories" in done.stdout, done.stdout
