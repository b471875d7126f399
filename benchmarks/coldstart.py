"""Cold start of the command line, before and after, in one run:

    python -m benchmarks.coldstart [--before REF] [--repeats N]

Times ``python -m harness_lib run plan`` (a fresh interpreter each time: imports, the scripted provider
and its tokenizer, a three-turn run) for this tree and for the tree at git ``REF`` (default ``HEAD~1``;
``git archive`` into a temporary folder, run from there, so ``-m`` imports that tree's package), and for
this tree with the rank cache off (``HARNESS_LIB_CACHE=off``: a first run on a new machine). The
variants alternate, so a slow second of a shared machine falls on all of them; medians and ranges.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(ref: str, into: Path):
    # The data lives in harness_lib/data/; a tree from before that move keeps it in a top-level data/.
    old_data = subprocess.run(["git", "ls-tree", "--name-only", ref, "data"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", ref, "harness_lib", *(["data"] if old_data else [])], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)


def wall(cwd: Path, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harness_lib", "run", "plan"], cwd=cwd, env=env,
                       capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if r.returncode != 0 or "status=completed" not in r.stdout:
        raise RuntimeError(f"run plan failed in {cwd}: {r.stdout}{r.stderr}")
    return ms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.coldstart")
    p.add_argument("--before", default="HEAD~1", help="git ref of the tree to compare with")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        export(args.before, before)
        variants = {f"before ({args.before})": (before, env),
                    "after": (ROOT, env),
                    "after, no rank cache": (ROOT, {**env, "HARNESS_LIB_CACHE": "off"})}
        wall(ROOT, env)  # the rank cache exists before the clock starts
        times = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, (cwd, e) in variants.items():
                times[name].append(wall(cwd, e))
    base = statistics.median(next(iter(times.values())))
    print(f"python -m harness_lib run plan, wall time, {args.repeats} alternating runs; load average "
          f"{os.getloadavg()[0]:.2f}")
    for name, ms in times.items():
        med = statistics.median(ms)
        print(f"  {name:28s} median {med:6.0f} ms  (range {min(ms):.0f}-{max(ms):.0f})  ratio to before "
              f"{med / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
