"""The notebooks whose runs are timed, run with every core busy (issue 19, item 4).

A Stop pressed at a wall-clock instant lands elsewhere on a loaded machine: 04's "Stop at 0.3 s" once came out
0 turns and $0.000000 instead of 1 turn and $0.000744, and `make test` failed on it after `make chapter`. Every
Stop and kill in the notebooks is now tied to an event of the run (a tool starting, a result saved), so with each
core spinning the notebooks must still print the same turns, tokens, statuses and dollars as their committed
outputs: nbval compares them, the durations sanitised as in `make test` (tests/sanitize.cfg)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The notebooks with a Stop, a kill or a latency in them.
TIMED = ["04-five-exits", "08-resume", "09-cancellation", "11-latency", "13-subagent", "14-libraries"]
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
    paths = [str(ROOT / "notebooks" / f"{name}.ipynb") for name in TIMED]
    assert all(Path(p).exists() for p in paths), "a timed notebook was renamed: update TIMED"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *paths, "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
         str(ROOT / "tests" / "sanitize.cfg"), "-p", "no:cacheprovider", "-q", "-x", "--rootdir", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:]


def test_make_test_leaves_out_the_translated_copies_of_these_notebooks_and_no_other():
    """The Makefile's TIMED (the translated notebooks `make test` leaves to `make test-timed-translations`) is TIMED."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("TIMED = "))
    assert line.split("=", 1)[1].split() == TIMED
