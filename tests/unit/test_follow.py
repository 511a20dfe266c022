"""The chief's log followed to the terminal: only what is appended, every line, the last one too."""

from __future__ import annotations

import io
import time

from xpdist.driver.processes.follow import LogFollower


def test_follower_prints_appended_lines_and_drains_on_stop(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text("from an earlier run\n")
    out = io.StringIO()
    follower = LogFollower(log, "[worker:0] ", out)
    follower.start()
    with open(log, "a") as f:
        f.write("Epoch 1/2\n")
        f.flush()
        time.sleep(0.5)
        f.write("Epoch 2/2\nno newline yet")
    follower.stop()  # after the task closed its file: what it wrote last is printed
    assert out.getvalue().splitlines() == ["[worker:0] Epoch 1/2", "[worker:0] Epoch 2/2", "[worker:0] no newline yet"]
    assert not follower.is_alive()


def test_follower_waits_for_the_file_and_stops_without_it(tmp_path):
    out = io.StringIO()
    follower = LogFollower(tmp_path / "never.log", "", out)
    follower.start()
    follower.stop()
    assert out.getvalue() == "" and not follower.is_alive()
