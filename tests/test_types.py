"""The core's types hold: mypy over the modules listed in pyproject.toml ([tool.mypy] files), no error allowed."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error_in_the_core():
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "Success: no issues found" in r.stdout, r.stdout + r.stderr


def test_the_checked_files_include_the_loop_and_its_seams():
    """A [tool.mypy] that lost its file list would check nothing and pass: the core must be named."""
    import tomllib
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    for module in ("loop", "options", "dedupe", "policy", "numbers", "state", "client", "reply", "tools", "stops",
                   "budget", "pricing", "trace", "subagent"):
        assert f"harness_lib/{module}.py" in files
