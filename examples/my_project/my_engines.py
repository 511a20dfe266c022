"""Engines of your own, in the driver process, which never imports TensorFlow: keep it out.

NotifyingLocalhost is a subclass of one of xpdist's engines, named by cluster._target_.
Journaled is the engine of cluster=journaled, an option of its own (my_options.py).
"""

from __future__ import annotations

from pathlib import Path

from xpdist.driver.engines.local import Local
from xpdist.driver.engines.localhost import Localhost


class NotifyingLocalhost(Localhost):
    """cluster=localhost that reports each job's outcome when its tasks are done: here a line
    in notifications.txt of the directory the command runs from; in your project, a message
    to your team's chat."""

    def follow(self):
        outcome = super().follow()
        line = (f"{self.cfg.strategy.name} on {self.cfg.cluster.workers} localhost workers: {outcome.status}"
                f"{f' ({outcome.error})' if outcome.error else ''}\n")
        with open(Path("notifications.txt"), "a") as out:
            out.write(line)
        return outcome


class Journaled(Local):
    """cluster=journaled: one task process on this machine, as cluster=local, and a line per job
    in the file cluster.journal names."""

    name = "journaled"

    def follow(self):
        outcome = super().follow()
        with open(Path(self.cfg.cluster.journal), "a") as out:
            out.write(f"{self.cfg.strategy.name} with {self.cfg.dataset.name}: {outcome.status}\n")
        return outcome
