"""The project's own options, registered with xpdist: strategy=pinned, cluster=journaled and
dataset=spirals, each an option of its own with its keys, checks and --help line.

xpdist imports this module at the start of the driver and of every task: pyproject.toml names
it as an entry point of the group `xpdist.options` (after `pip install -e .`), or, without
installing, XPDIST_OPTIONS=my_options. The driver never imports TensorFlow, so neither does
this module; each option's TensorFlow half is given as a module path, imported by the task.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core import options
from xpdist.core.clusters import ClusterBase
from xpdist.core.strategies import StrategyBase, StrategySpec

import my_sources


@dataclass
class PinnedStrategy(StrategyBase):
    """OneDeviceStrategy on the one device that strategy.device names."""

    name: str = "pinned"
    # The device that trains, e.g. /cpu:0 or /gpu:1.
    device: str = "/cpu:0"


class Pinned(StrategySpec):
    """One replica, in one process: the defaults of StrategySpec."""

    name = "pinned"
    config = PinnedStrategy
    uses_devices = False  # the device is the option's own key, not the plan's list


@dataclass
class JournaledCluster(ClusterBase):
    """One task process on this machine; each job's outcome is appended to a journal file."""

    name: str = "journaled"
    # The journal, relative to the directory the command runs from.
    journal: str = "journal.txt"


options.register_strategy("pinned", Pinned(), task="my_strategies")
options.register_engine("journaled", JournaledCluster, engine="my_engines:Journaled")
options.register_data_source("spirals", my_sources.Spirals(), task="my_sources")
