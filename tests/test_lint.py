"""One style for the whole code base: ruff, with the rules in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "harness_lib", "tests", "benchmarks", "book"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
