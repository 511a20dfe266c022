"""Runs several `python -m xpdist` commands side by side and reads back what they recorded.

Each command runs in a directory of its own (so Hydra output folders never collide) with a
copy of one pre-migrated MLflow store (creating a SQLite store costs ~3 s of schema
migrations per run otherwise). XPDIST_TEST_JOBS sets how many run at once (default 2).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence
from urllib.parse import unquote, urlparse

import numpy as np

from tests.helpers import Xpdist, store_template  # noqa: F401  (store_template: for the tests)

JOBS = int(os.environ.get("XPDIST_TEST_JOBS", "2"))


@dataclass
class Finished:
    """One CLI run and the MLflow run it recorded."""

    name: str
    xpdist: Xpdist
    proc: subprocess.CompletedProcess
    run: object  # mlflow.entities.Run

    @property
    def client(self):
        return self.xpdist.client()

    def history(self, metric: str) -> List[tuple]:
        """(step, value) of every logged value, by step."""
        return sorted((m.step, m.value) for m in self.client.get_metric_history(self.run.info.run_id, metric))

    def artifact_dir(self) -> Path:
        return Path(unquote(urlparse(self.run.info.artifact_uri).path))

    def artifacts(self) -> List[str]:
        """Every artifact path, recursively, relative to the run's artifact root."""
        root = self.artifact_dir()
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def weights(self) -> List[np.ndarray]:
        """The trainable weights saved in model/model.keras, read with h5py (no TensorFlow)."""
        return keras_file_weights(self.artifact_dir() / "model" / "model.keras")


def keras_file_weights(path: Path) -> List[np.ndarray]:
    import h5py

    found: Dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as raw:
        with h5py.File(io.BytesIO(raw.read()), "r") as h5:
            def keep(name, node):
                if isinstance(node, h5py.Dataset) and name.startswith("layers/"):
                    found[name] = node[()]
            h5.visititems(keep)
    return [found[k] for k in sorted(found)]



def run_many(root: Path, template: Optional[Path], commands: Dict[str, Sequence[str]], timeout: float = 420,
             env: Optional[dict] = None, setup: Optional[Callable[[str, Path], None]] = None) -> Dict[str, Finished]:
    """Runs each named list of overrides as its own CLI run, JOBS at a time.

    Args:
        setup: called with (name, launch directory) before that run starts.
    """
    def one(name: str) -> Finished:
        xpdist = Xpdist(root / name)
        xpdist.workdir.mkdir(parents=True)
        if template is not None:
            shutil.copy(template, xpdist.workdir / "mlflow.db")
        if setup is not None:
            setup(name, xpdist.workdir)
        proc = xpdist.run(*commands[name], timeout=timeout, env=env)
        runs = xpdist.runs()
        assert len(runs) == 1, f"{name}: {len(runs)} runs\n{proc.stdout}\n{proc.stderr}"
        return Finished(name, xpdist, proc, runs[0])

    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        return dict(zip(commands, pool.map(one, commands)))


def describe(done: Finished) -> str:
    """What to print when an assertion on a run fails."""
    return f"{done.name}: exit {done.proc.returncode}\n--- stdout\n{done.proc.stdout[-3000:]}\n--- stderr\n" \
           f"{done.proc.stderr[-3000:]}"


def git_checkout(directory: Path) -> str:
    """Makes directory a git checkout with one commit; returns the commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args], cwd=directory,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "launch directory")
    return git("rev-parse", "HEAD")

