"""`python -m xpdist docs`: the documentation's path, in a checkout and in an installed wheel."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO, xpdist_env
from xpdist.core import docs


def test_docs_is_the_repositorys_docs_folder_in_a_checkout():
    assert docs.folder() == REPO / "docs"
    assert Path(docs.page("configuration.md")).is_file()


def test_a_page_by_name_or_a_list_of_pages(capsys):
    out = io.StringIO()
    assert docs.cli(["configuration"], out=out) == 0
    assert out.getvalue().strip() == str(REPO / "docs" / "configuration.md")
    assert docs.cli(["no_such_page"], out=out) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("xpdist: error: docs no_such_page: there is no such page.") and "configuration" in error


def test_the_command_prints_the_folder_and_starts_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "xpdist", "docs"], cwd=tmp_path, env=xpdist_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == str(REPO / "docs") and proc.stderr == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # builds and installs a wheel
def test_the_wheel_ships_the_docs_and_the_command_finds_them_installed(tmp_path):
    """The wheel holds docs/ as xpdist/docs; installed, the command and the error lines point there."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "xpdist", "conf", "recipes", "docs", "hydra_plugins"):
        if (REPO / name).is_dir():  # the links (xpdist/conf, xpdist/docs) stay links, as in the checkout
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "wheel").glob("xpdist-*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {f"xpdist/docs/{p.name}" for p in (REPO / "docs").glob("*.md")} <= shipped
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = xpdist_env({"PYTHONPATH": str(site)})
    run = tmp_path / "elsewhere"
    run.mkdir()
    proc = subprocess.run([sys.executable, "-m", "xpdist", "docs", "configuration"], cwd=run, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == str(site / "xpdist" / "docs" / "configuration.md"), proc.stderr
    assert Path(proc.stdout.strip()).is_file()
    proc = subprocess.run([sys.executable, "-m", "xpdist", "--check", "trainer.epochs=two"], cwd=run, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and str(site / "xpdist" / "docs" / "configuration.md") in proc.stderr, proc.stderr
