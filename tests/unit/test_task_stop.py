"""A task stops on SIGINT or SIGTERM even when TensorFlow loses the KeyboardInterrupt
(xpdist/task/main.py): it comes again until main catches one, and not after."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import xpdist_env

# A task's signal handling with what TensorFlow sometimes does: the first KeyboardInterrupt is
# swallowed where it was raised, and the loop trains on.
PROGRAM = """
import os, signal, time
from xpdist.task import main as task
task.INSIST_S = 0.2
task.stop_on_signals()
try:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        while True:
            time.sleep(0.01)
    except KeyboardInterrupt:
        print("lost", flush=True)
    while True:
        time.sleep(0.01)
except KeyboardInterrupt:
    task._stop_caught()
    print("caught", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # while the result is written: ignored
time.sleep(1.0)  # five INSIST_S: no other KeyboardInterrupt comes
print("wrote its result", flush=True)
"""


def test_a_lost_interrupt_comes_again_until_main_catches_it():
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=xpdist_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["lost", "caught", "wrote", "its", "result"]
