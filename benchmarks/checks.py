"""How long a reader waits for a check, each notebook's check cell run as its kernel runs it:

    python -m benchmarks.checks [--repeats N] [STEM ...]

For each section notebook with a cell tagged ``check``, in a fresh interpreter per notebook (as a kernel is): the
notebook's build cells (the reference solution), then its check cell, ``--repeats`` times (default 5). The first
call computes the library's side of every case and keeps it; the later ones are what a reader waits for each time
they run the check again after changing their piece. Beside each: the cases it ran. Wall time of the check cell
alone (imports and the build cells before it are not counted), median and range of the later calls, and the
process's CPU time over all of them. The goal (issue 33): a check answers in 3 s or less on this two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import asyncio, json, resource, sys, time
sys.path.insert(0, {tests!r})
from checked import report
from built_cells import load
times = []
for _ in range({repeats}):
    namespace = load({stem!r})
    started = time.perf_counter()
    got = report({stem!r}, namespace=namespace)
    times.append(time.perf_counter() - started)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"times": times, "cases": got.total, "ok": got.ok, "cpu": usage.ru_utime + usage.ru_stime}}))
"""


def measure(stem: str, repeats: int, in_thread: bool = False) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **({"HARNESS_CHECK_IN_THREAD": "1"} if in_thread else {})}
    out = subprocess.run([sys.executable, "-c", CHILD.format(tests=str(ROOT / "tests"), stem=stem, repeats=repeats)],
                         cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from checked import stems_with_checks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stems", nargs="*")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--in-thread", action="store_true",
                        help="beside each, the same check with its cases in a thread of the kernel, as where there "
                             "is no fork (HARNESS_CHECK_IN_THREAD=1): what a process a case costs")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"a fresh interpreter per notebook; {args.repeats} calls of its check; load average {load:.2f}, "
          f"{os.cpu_count()} cores")
    print(f"{'notebook':<22} {'cases':>5} {'first':>7} {'again':>7} {'(min-max)':>13} {'CPU':>6}  all pass")
    worst = 0.0
    for stem in args.stems or stems_with_checks():
        for in_thread in (False, True) if args.in_thread else (False,):
            m = measure(stem, args.repeats, in_thread)
            first, again = m["times"][0], m["times"][1:] or m["times"]
            worst = worst if in_thread else max(worst, statistics.median(again))
            name = "  (in a thread)" if in_thread else stem
            print(f"{name:<22} {m['cases']:>5} {first:>6.2f}s {statistics.median(again):>6.2f}s "
                  f"{f'({min(again):.2f}-{max(again):.2f})':>13} {m['cpu']:>5.1f}s  {m['ok']}")
    print(f"slowest check, run again: {worst:.2f} s (goal: 3 s or less); load average {os.getloadavg()[0]:.2f} at "
          f"the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
