"""docs/tutorial.md runs as written: every ```bash and ```python block, in order, in one working
directory (later steps read the store earlier ones wrote), each with the exit code and the
output the page shows.

The page's conventions, which this module reads:
- a ```bash or ```python block runs, unless its info string says `norun` (a server to leave
  running, commands for two other machines); `exit=N` is the exit code it must end with (0
  unless said);
- a ```text block right after it (nothing but blank lines between) is its output: each
  non-empty line must appear in the real output, in that order, with numbers, run ids, dates
  and times free to differ (as they do between machines) and runs of spaces free to differ in
  length (table columns); a line `...` marks lines left out; a `final:` line may hold more
  metrics than the page shows (a new metric must not break the page); `<date>` and `<time>` stand
  for a date (2026-12-04) and a time of day (14-07-36, 14:07:38,764), which the docs do not
  print (tests/unit/test_docs.py). A block with no
  ```text block after it must print nothing. The page shows the working directory as /home/me/tutorial.

`python -m tests.integration.test_tutorial` runs the page in a fresh directory and prints each
block's real output, to paste from when the page changes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest

from tests.helpers import REPO, xpdist_env

pytestmark = pytest.mark.slow

PAGE = REPO / "docs" / "tutorial.md"
SHOWN_DIR = "/home/me/tutorial"  # the working directory as the page shows it
_FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
# What may differ between the page and a run: a 32-hex run id; a number with its unit
# (0.0414, 1.997e+04, 12,697, 14ms, 2026-12-04, 14-02-48, 2r).
_VARIABLE = re.compile(r"[0-9a-f]{32}|\d[\d.,e+-]*[a-zµ]*")
# Placeholders of the page for what a run prints and the docs do not show.
_PLACEHOLDERS = {"<date>": r"\d{4}-\d\d-\d\d", "<time>": r"\d\d[-:]\d\d[-:]\d\d(?:,\d+)?"}


@dataclass
class Step:
    line: int  # of the opening fence in the page, for messages
    lang: str  # bash or python
    code: str
    exit_code: int
    shown: Optional[str]  # the ```text block that follows, if any


def steps(page: str) -> List[Step]:
    """The page's runnable blocks, in order, each with the output shown after it."""
    blocks = list(_FENCE.finditer(page))
    found = []
    for i, block in enumerate(blocks):
        lang, info, code = block.group(1), block.group(2), block.group(3)
        if lang not in ("bash", "python") or "norun" in info.split():
            continue
        exit_code = re.search(r"\bexit=(\d+)", info)
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        shown = (after.group(3) if after is not None and after.group(1) == "text"
                 and not page[block.end():after.start()].strip() else None)
        found.append(Step(page.count("\n", 0, block.start()) + 1, lang, code,
                          int(exit_code.group(1)) if exit_code else 0, shown))
    return found


def line_pattern(shown: str) -> re.Pattern:
    """A shown line as a regular expression: its variable parts free, spaces of any length."""
    tokens = []
    for whole in shown.split():
        parts = []
        for token in re.split("(" + "|".join(map(re.escape, _PLACEHOLDERS)) + ")", whole):
            if token in _PLACEHOLDERS:
                parts.append(_PLACEHOLDERS[token])
                continue
            last = 0
            for found in _VARIABLE.finditer(token):
                parts.append(re.escape(token[last:found.start()]))
                parts.append(r"[0-9a-f]{32}" if len(found.group(0)) == 32 and "." not in found.group(0)
                             else r"[\d.,e+-]+[a-zµ]*")
                last = found.end()
            parts.append(re.escape(token[last:]))
        tokens.append("".join(parts))
    return re.compile(r"\s*" + r"\s+".join(tokens) + r"\s*")


def _final_keys(line: str) -> Optional[set]:
    """The metric names of a summary's `final: a=1, b=2` line, or None for another line."""
    if not line.strip().startswith("final: "):
        return None
    return {item.split("=", 1)[0] for item in line.strip()[len("final: "):].split(", ")}


def missing_lines(shown: str, output: str) -> List[str]:
    """The shown lines not found in the output, in order (each after the previous match)."""
    lines = output.splitlines()
    at, missing = 0, []
    for want in shown.splitlines():
        if not want.strip() or want.strip() == "...":
            continue
        pattern, keys = line_pattern(want), _final_keys(want)

        def matches(line: str) -> bool:
            if keys is not None:
                return keys <= (_final_keys(line) or set())
            return bool(pattern.fullmatch(line))

        hit = next((i for i in range(at, len(lines)) if matches(lines[i])), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


def run_step(step: Step, workdir: Path) -> subprocess.CompletedProcess:
    env = xpdist_env({"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    if step.lang == "bash":
        cmd = ["bash", "-c", ("set -e\n" if step.exit_code == 0 else "") + step.code]
    else:
        cmd = [sys.executable, "-c", step.code]
    done = subprocess.run(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    done.stdout = done.stdout.replace(str(workdir), SHOWN_DIR)
    return done


def test_the_page_has_its_runnable_steps():
    found = steps(PAGE.read_text())
    assert len(found) >= 10 and sum(step.shown is not None for step in found) >= 9
    assert any(step.exit_code == 2 for step in found)


# Over 60 s (64-76 s in a quiet full run on 2 cores): every step of the page in order, nine of them
# trainings (a sweep, a cluster and a study among them) and one model load, as a newcomer runs
# them, in one store; each is as small as the page can make it. No time limit is asserted (a
# loaded machine took 261 s): the suite's summary names every test over 60 s.
def test_the_tutorial_runs_as_written(tmp_path):
    workdir = tmp_path / "tutorial"
    workdir.mkdir()
    for step in steps(PAGE.read_text()):
        done = run_step(step, workdir)
        where = f"docs/tutorial.md line {step.line}:\n{step.code}\n--- its output ---\n{done.stdout[-4000:]}"
        assert done.returncode == step.exit_code, f"exit code {done.returncode}, the page says {step.exit_code}. {where}"
        if step.shown is None:
            assert not done.stdout.strip(), f"the page shows no output, but there is. {where}"
        missing = missing_lines(step.shown or "", done.stdout)
        assert not missing, f"lines the page shows are not in the output: {missing}. {where}"


def test_the_line_patterns_free_what_differs_between_runs():
    pattern = line_pattern("  run id: e25e3cc71df4459ebf7f9ebfba4ddca4   tracking uri: sqlite:////home/me/tutorial/mlflow.db")
    assert pattern.fullmatch("  run id: 566fa3d9ce334b958a98bbfcabcde9b0 tracking uri: sqlite:////home/me/tutorial/mlflow.db")
    assert not pattern.fullmatch("  run id: 566fa3d9ce334b958a98bbfcabcde9b0 tracking uri: sqlite:////elsewhere/mlflow.db")
    keras = line_pattern("20/20 - 0s - 14ms/step - loss: 0.0299 - mae: 0.1679")
    assert keras.fullmatch("20/20 - 1s - 720us/step - loss: 1.2e-05 - mae: 0.0742")
    assert not keras.fullmatch("20/20 - 1s - 720us/step - loss: 0.03")
    assert missing_lines("Epoch 1/2\n...\nxpdist: run default-1r FINISHED in 5.0 s",
                         "noise\nEpoch 1/2\n20/20\nxpdist: run default-1r FINISHED in 12.3 s") == []
    assert missing_lines("b\na", "a\nb") == ["a"]
    hydra = line_pattern("[<date> <time>][HYDRA] \t#0 : strategy=one_device")
    assert hydra.fullmatch("[2026-12-04 14:07:38,764][HYDRA] \t#0 : strategy=one_device")
    assert not hydra.fullmatch("[2026-12-04 later][HYDRA] \t#0 : strategy=one_device")
    folder = line_pattern("  table and chart: multirun/<date>/<time>/summary (also artifacts of the parent run)")
    assert folder.fullmatch("  table and chart: multirun/2026-12-04/14-07-36/summary (also artifacts of the parent run)")
    assert missing_lines("  final: loss=0.1, mae=0.2", "  final: learning_rate=0.01, loss=0.3, mae=0.1") == []
    assert missing_lines("  final: loss=0.1, mae=0.2", "  final: loss=0.3") == ["  final: loss=0.1, mae=0.2"]
    table = line_pattern("0    strategy=one_device  FINISHED  1         5             0.005941    12,697               1.89")
    assert table.fullmatch("0    strategy=one_device  FINISHED  1   5   0.0299  4561  23.7")


if __name__ == "__main__":  # print each block's real output, to paste from
    with tempfile.TemporaryDirectory() as tmp:
        for step in steps(PAGE.read_text()):
            t0 = time.monotonic()
            done = run_step(step, Path(tmp))
            print(f"===== line {step.line} exit {done.returncode} ({time.monotonic() - t0:.1f} s)\n{done.stdout}")
