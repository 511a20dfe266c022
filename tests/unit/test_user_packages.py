"""The public registration API (xpdist/core/options.py) refuses an option whose names or schema
disagree, and the user's packages are loaded from XPDIST_OPTIONS (entry points:
tests/integration/test_user_options.py) before any registry answers, in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from tests.helpers import REPO, xpdist_env
from xpdist.core import options, strategies
from xpdist.core.clusters import ClusterBase


@dataclass
class Named(strategies.StrategyBase):
    name: str = "named"


class Spec(strategies.StrategySpec):
    name = "named"
    config = Named


@pytest.mark.parametrize("name, spec, says", [
    ("other", Spec(), "its spec is named 'named'"),
    ("named", type("NoSchema", (strategies.StrategySpec,), {"name": "named"})(), "field of StrategyBase defaults to"),
    ("named", type("Mismatch", (strategies.StrategySpec,), {"name": "named", "config": ClusterBase})(), "extending "),
])
def test_a_strategy_whose_names_or_schema_disagree_is_refused(name, spec, says):
    with pytest.raises(ValueError, match=says):
        options.register_strategy(name, spec, task="no_such_module")
    assert name not in strategies.STRATEGIES


def test_a_package_named_by_the_environment_registers_before_any_registry_answers(tmp_path):
    (tmp_path / "env_options.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from xpdist.core import options
        from xpdist.core.clusters import ClusterBase

        @dataclass
        class Here(ClusterBase):
            name: str = "here"

        options.register_engine("here", Here, engine="no_such_module:Engine")
    '''))
    probe = ("from xpdist.core import clusters, schema; "
             "print(sorted(schema.OPTIONS['cluster'])); print('here' in clusters.CLUSTERS); "
             "import sys; print('tensorflow' in sys.modules)")
    env = xpdist_env({"PYTHONPATH": f"{REPO}:{tmp_path}", "XPDIST_OPTIONS": "env_options"})
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["['here', 'local', 'localhost', 'ray', 'slurm', 'tf_config']", "True",
                                           "False"], done.stdout

    env["XPDIST_OPTIONS"] = "no_such_options_module"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "xpdist: the options package no_such_options_module (XPDIST_OPTIONS) cannot be imported" in done.stderr
