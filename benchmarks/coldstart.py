"""Cold start of the command line, before and after, in one run:

    python -m benchmarks.coldstart [--before REF] [--repeats N]

Times two commands, each in a fresh interpreter: ``python -m harness_lib --help`` (what the command line
costs before it does anything: its imports and its parser) and ``python -m harness_lib run plan`` (imports,
the scripted provider and its tokenizer, a three-turn run), for this tree and for the tree at git ``REF``
(default ``HEAD~1``; ``git archive`` into a temporary folder, run from there, so ``-m`` imports that tree's
package), and ``run plan`` for this tree with the rank cache off (``HARNESS_LIB_CACHE=off``: a first run
on a new machine). Beside them, the floor: a fresh interpreter that only imports what any run needs before
the harness does anything (asyncio, httpx, and what httpx imports when it first connects: httpcore, anyio's
asyncio backend, h11), and the floor issue 34 sets its goal against (asyncio and httpx imported, an ``AsyncClient``
built); the last line holds the goals to them: ``--help`` under 250 ms, ``run plan`` within twice that floor.
Bytecode is written and used (``PYTHONDONTWRITEBYTECODE`` unset), as for an installed
package; the first round is a warm-up, not counted. The variants alternate, so a slow second of a shared
machine falls on all of them; medians and ranges of the wall time and of the CPU time (user + system of
the child, from ``getrusage``, which a busy machine inflates less than the wall time).
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(ref: str, into: Path):
    # The data is at the top, data/ (harness_lib/data/ for a while, archived with the package then).
    old_data = subprocess.run(["git", "ls-tree", "--name-only", ref, "data"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", ref, "harness_lib", *(["data"] if old_data else [])], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)


COMMANDS = {"--help": ("usage:", ["-m", "harness_lib", "--help"]),
            "run plan": ("status=completed", ["-m", "harness_lib", "run", "plan"])}
FLOOR = ("imported", ["-c", "import asyncio, httpx, httpcore, anyio._backends._asyncio, h11; print('imported')"])
# The floor as issue 34 states the goal: a bare interpreter that imports asyncio and httpx and builds a client (an
# AsyncClient: httpx builds its SSL context then, which the harness skips for a plain-HTTP server).
FLOOR_CLIENT = ("built", ["-c", "import asyncio, httpx; httpx.AsyncClient(); print('built')"])
FLOORS = {"floor": FLOOR, "floor+client": FLOOR_CLIENT}
GOALS = {"--help": 250.0, "run plan": 2.0}   # --help: ms of wall time; run plan: times the floor with a client


def timed(command: str, cwd: Path, env: dict) -> tuple[float, float]:
    """(wall ms, CPU ms) of ``python -m harness_lib COMMAND`` (or, ``floor``, of the imports alone) in ``cwd``."""
    expect, argv = COMMANDS.get(command) or FLOORS[command]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0 or expect not in r.stdout:
        raise RuntimeError(f"{command} failed in {cwd}: {r.stdout}{r.stderr}")
    return ms, (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) * 1000


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.coldstart")
    p.add_argument("--before", default="HEAD~1", help="git ref of the tree to compare with")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        export(args.before, before)
        variants = {(c, f"before ({args.before})"): (before, env) for c in COMMANDS}
        variants.update({(c, "after"): (ROOT, env) for c in COMMANDS})
        variants[("run plan", "after, no rank cache")] = (ROOT, {**env, "HARNESS_LIB_CACHE": "off"})
        variants[("floor", "asyncio + httpx imports")] = (ROOT, env)
        variants[("floor+client", "and an AsyncClient")] = (ROOT, env)
        for (command, _), (cwd, e) in variants.items():  # the rank cache and the bytecode exist before the clock
            timed(command, cwd, e)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {v: [] for v in variants}
        for _ in range(args.repeats):
            for (command, name), (cwd, e) in variants.items():
                times[command, name].append(timed(command, cwd, e))
    print(f"python -m harness_lib COMMAND, {args.repeats} alternating runs; load average {os.getloadavg()[0]:.2f}")
    for command in [*COMMANDS, *FLOORS]:
        base = statistics.median(w for w, _ in times.get((command, f"before ({args.before})"), [(0, 0)]))
        for (c, name), runs in times.items():
            if c != command:
                continue
            wall, cpu = [w for w, _ in runs], [u for _, u in runs]
            ratio = f"ratio to before {statistics.median(wall) / base:.2f}" if base else "(the same in both trees)"
            print(f"  {command:9s} {name:23s} wall median {statistics.median(wall):6.0f} ms (range {min(wall):.0f}-"
                  f"{max(wall):.0f}), {ratio};  CPU median {statistics.median(cpu):5.0f} ms (range "
                  f"{min(cpu):.0f}-{max(cpu):.0f})")
    # The goals of issue 34, on this run's medians: --help under 250 ms; run plan within twice the floor that
    # imports asyncio and httpx and builds a client (and, beside it, the imports-only floor).
    median = {key: statistics.median(w for w, _ in runs) for key, runs in times.items()}
    helped, plan = median["--help", "after"], median["run plan", "after"]
    client, imports = median["floor+client", "and an AsyncClient"], median["floor", "asyncio + httpx imports"]
    print(f"  goals: --help {helped:.0f} ms (goal under {GOALS['--help']:.0f} ms); run plan {plan / client:.2f} x the "
          f"floor with a client (goal under {GOALS['run plan']:.1f}), {plan / imports:.2f} x the imports-only floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
