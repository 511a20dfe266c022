"""A user's package adds a strategy, an engine and a data source through xpdist's public
registration API (xpdist/core/options.py), announced by an entry point in its metadata: each is
listed by --help and the configuration reference, and a run with all three trains to FINISHED.
No xpdist module is patched: the package is written to a temporary directory with a dist-info
holding its entry point, as `pip install` would leave it, and put on PYTHONPATH."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO, TINY, Xpdist, xpdist_env

PACKAGE = {
    "toy_options/__init__.py": '"""A user\'s package with a strategy, an engine and a data source for xpdist."""\n',
    # The driver imports this module too: no TensorFlow here, and the task halves by path.
    "toy_options/register.py": '''
        from dataclasses import dataclass

        from xpdist.core import options
        from xpdist.core.clusters import ClusterBase
        from xpdist.core.data_sources import InMemoryDataset, InMemorySpec
        from xpdist.core.strategies import StrategyBase, StrategySpec


        @dataclass
        class ToyStrategy(StrategyBase):
            """OneDeviceStrategy on one device that the option names."""
            name: str = "toy_strategy"
            # The device that trains.
            device: str = "/cpu:0"


        class ToyStrategySpec(StrategySpec):
            name = "toy_strategy"
            config = ToyStrategy
            uses_devices = False


        @dataclass
        class ToyCluster(ClusterBase):
            """The one task process, on this machine; the engine notes each job's outcome."""
            name: str = "toy_cluster"
            # The file each job's outcome is appended to (in the launch directory).
            note: str = "toy-notes.txt"


        @dataclass
        class ToyData(InMemoryDataset):
            """Points on a line, y = 2x + 1."""
            name: str = "toy_data"
            per_replica_batch_size: int = 8
            # Number of examples.
            num_examples: int = 64


        class ToyDataSpec(InMemorySpec):
            name = "toy_data"
            config = ToyData


        options.register_strategy("toy_strategy", ToyStrategySpec(), task="toy_options.task_strategy")
        options.register_engine("toy_cluster", ToyCluster, engine="toy_options.engine:ToyEngine")
        options.register_data_source("toy_data", ToyDataSpec(), task="toy_options.task_data")
    ''',
    "toy_options/task_strategy.py": '''
        def build(tf, cfg, plan):
            print(f"toy_options: training on {cfg.strategy.device}", flush=True)
            return tf.distribute.OneDeviceStrategy(cfg.strategy.device)
    ''',
    "toy_options/task_data.py": '''
        from xpdist.task.data_sources import in_memory


        def load(cfg, plan, launch_dir, strategy=None):
            def make(cfg, rng, launch_dir):
                x = rng.uniform(-1, 1, (cfg.dataset.num_examples, 1)).astype("float32")
                return x, 2 * x + 1
            return in_memory(cfg, plan, launch_dir, make)
    ''',
    "toy_options/engine.py": '''
        from pathlib import Path

        from xpdist.driver.engines.local import Local


        class ToyEngine(Local):
            name = "toy_cluster"

            def follow(self):
                outcome = super().follow()
                with open(Path.cwd() / self.cfg.cluster.note, "a") as notes:
                    notes.write(f"{self.cfg.strategy.name} {outcome.status}\\n")
                return outcome
    ''',
    "toy_options-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: toy-options\nVersion: 0.1\n",
    "toy_options-0.1.dist-info/entry_points.txt": "[xpdist.options]\ntoy = toy_options.register\n",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The installed package: its modules and its dist-info, on PYTHONPATH."""
    root = tmp_path_factory.mktemp("site")
    for name, text in PACKAGE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())
    return root


def _env(site: Path) -> dict:
    return xpdist_env({"PYTHONPATH": f"{REPO}:{site}"})


@pytest.mark.slow  # the reference composes every option: about a minute
def test_the_users_options_are_listed_by_help_and_the_configuration_reference(site, tmp_path):
    done = subprocess.run([sys.executable, "-m", "xpdist", "--help"], cwd=tmp_path, env=_env(site),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for group, name in (("strategy", "toy_strategy"), ("cluster", "toy_cluster"), ("dataset", "toy_data")):
        listed = re.search(rf"^  {group} +(.+(?:\n {{10,}}.+)*)", done.stdout, re.M)  # with its continuations
        assert listed and name in re.findall(r"[a-z_0-9]+", listed.group(1)), done.stdout

    page = subprocess.run([sys.executable, str(REPO / "scripts" / "config_docs.py"), "--stdout"], cwd=tmp_path,
                          env=_env(site), capture_output=True, text=True, timeout=300)
    assert page.returncode == 0, page.stderr
    for section, key, meaning in (("strategy=toy_strategy", "strategy.device", "The device that trains."),
                                  ("cluster=toy_cluster", "cluster.note", "The file each job's outcome"),
                                  ("dataset=toy_data", "dataset.num_examples", "Number of examples.")):
        block = page.stdout.split(f"### {section}\n", 1)[1].split("\n#", 1)[0]
        assert f"| `{key}` |" in block and meaning in block, block
    assert "OneDeviceStrategy on one device that the option names." in page.stdout


@pytest.mark.slow
def test_a_run_with_the_users_strategy_engine_and_data_source_finishes(site, tmp_path):
    xpdist = Xpdist(tmp_path, env={"PYTHONPATH": f"{REPO}:{site}"})
    done = xpdist.run("strategy=toy_strategy", "cluster=toy_cluster", "dataset=toy_data", "trainer.epochs=2",
                      timeout=300, fork="")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "toy_options: training on /cpu:0" in done.stdout, done.stdout[-2000:]

    runs = xpdist.runs()
    assert [r.info.status for r in runs] == ["FINISHED"]
    params = runs[0].data.params
    assert (params["strategy"], params["cluster"], params["dataset"]) == ("toy_strategy", "toy_cluster", "toy_data")
    assert params["dataset.num_examples"] == "64" and params["strategy.device"] == "/cpu:0", params
    assert "loss" in runs[0].data.metrics
    assert (tmp_path / "toy-notes.txt").read_text() == "toy_strategy FINISHED\n"

    refused = xpdist.run("strategy=toy_strategy", "cluster=toy_cluster", "dataset=toy_data",
                         "dataset.per_replica_batch_size=0", timeout=120, fork="")
    assert refused.returncode == 2 and refused.stderr.startswith("xpdist: error: dataset.per_replica_batch_size=0")
