"""The chief's log, followed to the terminal while a multi-process cluster trains.

Each task of cluster=localhost writes into its own log file (its output would interleave
on one terminal otherwise); without this, the terminal stays silent until the run ends.
A thread reading the growing file, because the file, not a pipe, is what the task writes
to, and it must outlive a restarted cluster (tasks append to the same file).
"""

from __future__ import annotations

import codecs
import sys
import threading
from pathlib import Path
from typing import IO, Optional

# Seconds between two looks at a file that has no new line yet.
POLL_S = 0.2


class LogFollower(threading.Thread):
    """Prints each complete line appended to `path` after its creation, until stop()."""

    def __init__(self, path: Path, prefix: str, out: Optional[IO] = None):
        super().__init__(name="xpdist-follow", daemon=True)
        self.path, self.prefix, self.out = Path(path), prefix, out or sys.stdout
        # A job directory used again keeps its logs: only what this run appends is shown.
        self._start = self.path.stat().st_size if self.path.exists() else 0
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self.path.exists():
            if self._stopping.wait(POLL_S):
                return
        with open(self.path, "rb") as log:
            log.seek(self._start)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a read may end mid-character
            pending = ""
            while True:
                stopping = self._stopping.is_set()  # before the read: a stop always gets one last read
                chunk = decoder.decode(log.read())  # read as bytes: a text file's seek offsets are opaque
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    print(f"{self.prefix}{line}", file=self.out, flush=True)
                if not chunk:
                    if stopping:
                        if pending:  # a last line without its newline
                            print(f"{self.prefix}{pending}", file=self.out, flush=True)
                        return
                    self._stopping.wait(POLL_S)

    def stop(self) -> None:
        """Prints what is left in the file, then ends the thread."""
        self._stopping.set()
        self.join(timeout=5)


def follow_chief(chief_log: Path, chief_name: str, logs_dir: Path, out: Optional[IO] = None) -> LogFollower:
    """Says where every task's log is, and starts printing the chief's log as it grows."""
    out = out or sys.stdout
    print(f"xpdist: cluster task logs in {logs_dir}/; {chief_name}'s log follows", file=out, flush=True)
    follower = LogFollower(chief_log, f"[{chief_name}] ", out)
    follower.start()
    return follower
