"""What saving a run costs the harness, before and after, in one run:

    python -m benchmarks.persistence [--before REF] [--repeats N] [--turns N]

The runaway against an in-process fake model (no HTTP, no provider: only the harness's own time per turn,
from one model call to the next), ``--turns`` turns, in a fresh process per measurement, for this tree and
the tree at git ``REF`` (exported, as ``benchmarks.coldstart`` does), alternating: without a state dir,
with one on this disk, and with one on a tmpfs (``/dev/shm``, where an fsync returns at once). Also the
latency of one fsync of an appended line on this disk, the part of a saved turn no code can remove while
a paid reply must be on disk before the next request. Medians over the repetitions; first ten turns
against the last ten.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r'''
import asyncio, json, statistics, sys, tempfile, time
from pathlib import Path
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

class Fake:
    """Asks for list_files every turn, as the scripted runaway does; encodes the request as a client would."""
    def __init__(self):
        self.n, self.t = 0, []
    async def complete(self, model, messages, tools=None, **extra):
        self.t.append(time.perf_counter())
        self.n += 1
        json.dumps({"model": model, "messages": messages, "tools": tools}, separators=(",", ":")).encode()
        call = {"id": f"c{self.n}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                             "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 100 + 20 * self.n, "completion_tokens": 10}}
    async def aclose(self):
        pass

where, turns = sys.argv[1], int(sys.argv[2])
with tempfile.TemporaryDirectory(dir=None if where in ("none", "disk") else where) as tmp:
    fake = Fake()
    asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "runaway"), Workspace.copy_of(into=Path(tmp) / "ws").tools(),
                    Options(client=fake, max_turns=turns, trace=Trace(Path(tmp) / "trace.jsonl"),
                            state_dir=None if where == "none" else Path(tmp) / "runs")))
ms = [(b - a) * 1000 for a, b in zip(fake.t, fake.t[1:])]
print(json.dumps({"median": statistics.median(ms), "first_10": statistics.median(ms[:10]),
                  "last_10": statistics.median(ms[-10:])}))
'''


def measure(tree: Path, where: str, turns: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", CHILD, where, str(turns)], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{tree} {where}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def fsync_ms(n: int = 50) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(Path(tmp) / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        ms = []
        try:
            for _ in range(n):
                os.write(fd, b"x" * 600 + b"\n")
                t = time.perf_counter()
                os.fsync(fd)
                ms.append((time.perf_counter() - t) * 1000)
        finally:
            os.close(fd)
    return statistics.median(ms)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.persistence")
    p.add_argument("--before", default="HEAD~1", help="git ref of the tree to compare with")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--turns", type=int, default=50)
    args = p.parse_args(argv)
    from .coldstart import export
    wheres = ["none", "disk"] + (["/dev/shm"] if Path("/dev/shm").is_dir() else [])
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        export(args.before, before)
        trees = {f"before ({args.before})": before, "after": ROOT}
        results = {(t, w): [] for t in trees for w in wheres}
        syncs = []
        for _ in range(args.repeats):
            for w in wheres:
                for t, tree in trees.items():
                    results[t, w].append(measure(tree, w, args.turns))
            syncs.append(fsync_ms())
    print(f"the harness's own time per turn (fake model, no HTTP), {args.turns} turns, {args.repeats} alternating "
          f"runs, ms; load average {os.getloadavg()[0]:.2f}; one fsync of an appended line on this disk: median "
          f"{statistics.median(syncs):.2f} ms (range of the runs' medians {min(syncs):.2f}-{max(syncs):.2f})")
    names = {"none": "trace, no state dir", "disk": "trace + state dir on this disk",
             "/dev/shm": "trace + state dir on a tmpfs"}
    for w in wheres:
        for t in trees:
            med = {k: statistics.median(r[k] for r in results[t, w]) for k in ("median", "first_10", "last_10")}
            print(f"  {names[w]:32s} {t:16s} median {med['median']:6.3f}  first 10 {med['first_10']:6.3f}  "
                  f"last 10 {med['last_10']:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
