"""The notebooks whose runs are timed, run with every core busy (issue 19, item 4).

A Stop pressed at a wall-clock instant lands elsewhere on a loaded machine: 04's "Stop at 0.3 s" once came out
0 turns and $0.000000 instead of 1 turn and $0.000744, and `make test` failed on it after `make chapter`. Every
Stop and kill in the notebooks is now tied to an event of the run (a tool starting, a result saved), so with each
core spinning the notebooks must still print the same turns, tokens, statuses and dollars as their committed
outputs: nbval compares them, the durations sanitised as in `make test` (tests/sanitize.cfg).

The six run three at once (pytest-xdist, a notebook to a worker, the longest first), beside a spinner per core:
the cores are busier than with one notebook at a time, and the test holds them for half as long (its spinners'
CPU, which `make test`'s other tests would have had, halves with it). `make test` leaves the English ones to this
test (the Makefile's TIMED_ENGLISH): nbval's comparisons are the same, here under load.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The notebooks with a Stop, a kill or a latency in them.
TIMED = ["04-five-exits", "08-resume", "09-cancellation", "11-latency", "13-subagent", "14-libraries"]
LONGEST_FIRST = ["09-cancellation", "14-libraries", "11-latency", "13-subagent", "08-resume", "04-five-exits"]
SPIN = "while True: pass"


@pytest.fixture
def every_core_busy():
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 2)]
    try:
        yield len(spinners)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_timed_notebooks_print_the_same_figures_with_every_core_busy(every_core_busy, tmp_path):
    assert sorted(LONGEST_FIRST) == TIMED
    paths = [str(ROOT / "notebooks" / f"{name}.ipynb") for name in LONGEST_FIRST]
    assert all(Path(p).exists() for p in paths), "a timed notebook was renamed: update TIMED"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *paths, "-n", "3", "--dist", "loadfile", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"), "-p", "no:cacheprovider", "-q", "-x",
         "--rootdir", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:]


def test_make_test_leaves_these_notebooks_to_this_test_and_checks_their_translations_itself():
    """The Makefile's TIMED is TIMED; `make test` runs nbval on every notebook but these (nbval's here, under load);
    their translated copies are nbval's in the suite, as every other notebook."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("TIMED = "))
    assert line.split("=", 1)[1].split() == TIMED
    said = subprocess.run(["make", "-n", "test", "STAMP=Makefile"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    ignored = {arg.split("=", 1)[1] for arg in said.split() if arg.startswith("--ignore-glob=")}
    assert ignored == {f"notebooks/{name}.ipynb" for name in TIMED}
    translated = [ROOT / f"notebooks/{lang}/{name}.ipynb" for lang in ("bg", "hu") for name in TIMED]
    assert all(p.exists() for p in translated), "a translated copy of a timed notebook is missing"
