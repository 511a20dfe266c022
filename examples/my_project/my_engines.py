"""An engine of your own: a subclass of one of xpdist's engines, named by cluster._target_.

It runs in the driver process, which never imports TensorFlow: keep TensorFlow out of it.
"""

from __future__ import annotations

from pathlib import Path

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
