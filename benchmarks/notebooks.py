"""What a notebook's Run All costs beyond the waits the chapter itself measures, and what ``make chapter`` costs:

    python -m benchmarks.notebooks [NOTEBOOK ...] [--profile N] [--chapter] [--repeats N]

Each notebook (every ``notebooks/*.ipynb`` when none is named) runs as ``make chapter`` runs it: a fresh
``python3`` kernel, ``notebooks/`` its working directory, every cell in order; the notebook file is read,
never written. Per notebook:

* ``kernel``: from starting the kernel to its first answer (what Run All after a restart pays first);
* ``run all``: the cells' wall time, from the first cell sent to the last one's reply;
* ``waits``: the waits the chapter itself measures, as the run made them: every ``time.sleep`` and
  ``asyncio.sleep`` (longer than 0) called from ``harness_lib``'s own code (the provider's injected latency and
  ``slow`` faults, the slow scan tool, a backoff, a poll of a child process), each interval timed as it ran;
  ``waits`` is the length of their union (two at once count once);
* ``beyond``: ``run all`` less ``waits``: what the notebook costs that the chapter does not set out to wait for;
* the kernel's CPU time (its threads, the provider's included; not a child process's: 08's and 10's second
  process): less than the wall time on a busy machine, where the kernel waits for a core, so it says what
  the notebook would cost on an idle one; the scripted provider's requests and its busy time (``Server-Timing``'s
  ``handler``, injected latency included), and the three slowest cells (their index among the code cells).

Nothing is added to a notebook's cells but one cell before them (it patches ``time.sleep``, ``asyncio.sleep``
and the provider's request counter to record, nothing else) and one after them (it hands the records back):
neither is counted. ``--profile N`` also samples every thread of the kernel every 2 ms (a stack a sample, as
pyinstrument does; cProfile sees one thread and inflates short calls) and prints, per notebook, the N
functions most often on the main thread's stack (cumulative) and at its top (self), and the provider
thread's. ``--chapter`` (with ``--no-notebooks``: only it) then times ``python -m harness_lib chapter
--execute`` (what ``make chapter`` runs: the notebooks, the report and the translations' build, into ``executed/``)
in a copy of ``notebooks/`` and ``locale/``, one notebook at a time (``HARNESS_CHAPTER_JOBS=1``) and two at
once, alternating, ``--repeats`` times each, and prints their own per-notebook lines and section 09's time
figures against their tolerances (running side by side must not move them out); after the notebooks' own table, each
run is put beside the waits the chapter prescribes (the notebooks' ``waits``, summed), the longest notebook alone
and its CPU over the cores (``beside_the_waits``). The load average is printed
with every table: on a shared machine the wall times hold other processes' turns, the differences and the
ratios much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from harness_lib.chapter.nbformat_fast import nbformat
from harness_lib.chapter.notebooks import _kernel

ROOT = Path(__file__).resolve().parent.parent

# Run in the kernel before the notebook's first cell: record every deliberate wait harness_lib makes and every
# request the scripted provider answers. Only harness_lib's own calls count (ipykernel and the libraries sleep
# too, in their own threads, and that is not the chapter's).
BEFORE = r'''
def _bench_setup():
    import asyncio, resource, sys, threading, time
    import harness_lib.scripted.server as server
    waits, lock = [], threading.Lock()

    def mine(depth):
        f = sys._getframe(depth)
        name = f.f_globals.get("__name__", "")
        return (name + "." + f.f_code.co_name) if name.startswith("harness_lib") else None

    sleep, asleep = time.sleep, asyncio.sleep

    def timed_sleep(seconds):
        who = mine(2)
        if who is None or not seconds or seconds <= 0:
            return sleep(seconds)
        t0 = time.perf_counter()
        try:
            return sleep(seconds)
        finally:
            with lock:
                waits.append((who, t0, time.perf_counter()))

    async def timed_asleep(delay, result=None):
        who = mine(2)
        if who is None or not delay or delay <= 0:
            return await asleep(delay, result)
        t0 = time.perf_counter()
        try:
            return await asleep(delay, result)
        finally:
            with lock:
                waits.append((who, t0, time.perf_counter()))

    time.sleep, asyncio.sleep = timed_sleep, timed_asleep
    counts = {"requests": 0, "busy": 0.0}
    count_request, count_busy = server._Server.count_request, server._Server.count_busy

    def counted_request(self):
        counts["requests"] += 1
        return count_request(self)

    def counted_busy(self, seconds):
        counts["busy"] += seconds
        return count_busy(self, seconds)

    server._Server.count_request, server._Server.count_busy = counted_request, counted_busy
    samples, halt, sampler = {}, threading.Event(), None
    if PROFILE:
        main_id = threading.main_thread().ident

        def where(frame):
            stack = []
            while frame is not None:
                code = frame.f_code
                stack.append(code.co_filename.split("site-packages/")[-1].split("/harness_lib/")[-1] + ":"
                             + code.co_name)
                frame = frame.f_back
            return tuple(reversed(stack))

        def sample():
            me = threading.get_ident()
            while not halt.is_set():
                for ident, frame in sys._current_frames().items():
                    if ident != me:
                        thread = "main" if ident == main_id else "other"
                        stack = where(frame)
                        samples.setdefault(thread, {}).setdefault(stack, 0)
                        samples[thread][stack] += 1
                sleep(0.002)

        sampler = threading.Thread(target=sample, daemon=True, name="bench-sampler")
        sampler.start()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"waits": waits, "counts": counts, "samples": samples, "halt": halt, "sampler": sampler,
            "cpu0": usage.ru_utime + usage.ru_stime}

_bench = _bench_setup()
del _bench_setup
'''

AFTER = r'''
def _bench_report():
    import json, resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _bench["halt"].set()
    if _bench["sampler"] is not None:
        _bench["sampler"].join()
    samples = {t: [[list(s), n] for s, n in stacks.items()] for t, stacks in dict(_bench["samples"]).items()}
    return json.dumps({"waits": list(_bench["waits"]), "requests": _bench["counts"]["requests"],
                       "busy": _bench["counts"]["busy"],
                       "cpu": usage.ru_utime + usage.ru_stime - _bench["cpu0"], "samples": samples})
print("BENCH " + _bench_report())
'''


def union(intervals) -> float:
    """The length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


async def measure(path: Path, profile: bool = False) -> dict:
    """One notebook's Run All in a fresh kernel, as ``make chapter`` runs it; see the module's docstring."""
    from nbclient import NotebookClient  # after nbformat_fast (at the top), which imports nbformat first

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    nb.cells = [nbformat.v4.new_code_cell(f"PROFILE = {profile}\n" + BEFORE), *cells,
                nbformat.v4.new_code_cell(AFTER)]
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_CHAPTER_COLLECT"}
    with _kernel("python3") as km:
        client = NotebookClient(nb, km=km, timeout=600, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": str(path.parent.resolve())}})
        t0 = time.perf_counter()
        async with client.async_setup_kernel(env=env):
            kernel = time.perf_counter() - t0
            await client.async_execute_cell(nb.cells[0], 0)
            per_cell = []
            t1 = time.perf_counter()
            for i, cell in enumerate(nb.cells[1:-1], 1):
                c0 = time.perf_counter()
                await client.async_execute_cell(cell, i)
                per_cell.append((i, time.perf_counter() - c0))
            run_all = time.perf_counter() - t1
            await client.async_execute_cell(nb.cells[-1], len(nb.cells) - 1)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    got = json.loads(text.split("BENCH ", 1)[1])
    by_caller: dict[str, list] = {}
    for who, a, b in got["waits"]:
        by_caller.setdefault(who, []).append((a, b))
    waits = union((a, b) for _, a, b in got["waits"])
    return {"name": path.name, "kernel": kernel, "run_all": run_all, "waits": waits, "beyond": run_all - waits,
            "cpu": got["cpu"], "requests": got["requests"], "busy": got["busy"],
            "waits_by": {w: union(v) for w, v in by_caller.items()},
            "slowest": sorted(per_cell, key=lambda c: -c[1])[:3], "first_cell": per_cell[0][1] if per_cell else 0,
            "samples": got["samples"]}


def profile_lines(samples: dict, top: int) -> list[str]:
    lines = []
    for thread in ("main", "other"):
        stacks = [(s, n) for s, n in samples.get(thread, []) if thread == "main" or any("scripted/" in f for f in s)]
        total = sum(n for _, n in stacks)
        if not total:
            continue
        cumulative: dict[str, int] = {}
        own: dict[str, int] = {}
        for stack, n in stacks:
            for frame in set(stack):
                cumulative[frame] = cumulative.get(frame, 0) + n
            own[stack[-1]] = own.get(stack[-1], 0) + n
        idle = sum(n for s, n in stacks if s[-1].endswith("selectors.py:select"))
        lines.append(f"    {'main thread' if thread == 'main' else 'the provider threads'}: {total} samples of 2 ms "
                     f"({idle / total:.0%} idle in select); cumulative (harness_lib's and the notebook's frames):")
        shown = [(f, n) for f, n in sorted(cumulative.items(), key=lambda kv: -kv[1])
                 if f == "<frozen importlib._bootstrap>:_find_and_load" or f.startswith("matplotlib/figure.py:savefig")
                 or not f.startswith(("/", "<frozen", "threading.py", "ipykernel"))
                 and ("harness_lib" in f or f.startswith(("<", "chapter/", "scripted/")) or "/" not in f)]
        lines += [f"      {n / total:6.1%}  {f}" for f, n in shown[:top]]
        lines.append("    self (the frame at the top of the stack):")
        lines += [f"      {n / total:6.1%}  {f}" for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return lines


def chapter(repeats: int, jobs_list=("1", "2"), rows=None) -> None:
    """``make chapter``'s command, timed, in a copy of ``notebooks/`` and ``locale/`` (it writes executed/ there), the
    notebooks one at a time (``HARNESS_CHAPTER_JOBS=1``) and two at once, alternating. ``rows``: the notebooks'
    own measurements, made just before; then each run is put beside the waits the chapter prescribes."""
    for _ in range(repeats):
        for jobs in jobs_list:
            with tempfile.TemporaryDirectory(prefix="bench-chapter-") as tmp:
                for folder in ("notebooks", "locale"):   # what the command reads, relative to where it runs
                    shutil.copytree(ROOT / folder, Path(tmp) / folder)
                env = {**os.environ, "HARNESS_CHAPTER_JOBS": jobs}
                load = os.getloadavg()[0]
                cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "harness_lib", "chapter", "--execute"], cwd=tmp,
                                   env=env, capture_output=True, text=True)
                t1 = time.perf_counter()
                cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r.returncode != 0:
                    raise RuntimeError(f"chapter --execute failed:\n{r.stdout}{r.stderr}")
                cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
                lines = [f"make chapter, HARNESS_CHAPTER_JOBS={jobs}: {t1 - t0:.1f} s, {cpu:.1f} s of CPU (its "
                         f"processes and the kernels), load average {load:.2f} at the start, "
                         f"{os.getloadavg()[0]:.2f} at the end; its lines:"]
                lines += ["  " + line for line in r.stdout.splitlines()]
                table = pd.read_csv(Path(tmp) / "executed" / "reports" / "chapter.csv", dtype=str)
                timed = table[table.tolerance.fillna("").str.startswith("±")]
                lines.append("  the time figures (chapter, ours, tolerance, match): " + "; ".join(
                    f"{r.id} {r.chapter}/{r.ours}/{r.tolerance}/{r.match}" for r in timed.itertuples()))
                if rows:
                    lines.append("  " + beside_the_waits(t1 - t0, cpu, rows, int(jobs)))
                print("\n".join(lines), flush=True)


def beside_the_waits(wall: float, cpu: float, rows: list[dict], jobs: int) -> str:
    """A ``make chapter`` run beside what bounds it: the waits the chapter prescribes (each notebook's, as measured
    alone), the longest notebook's own run, and its CPU over the cores it may use."""
    waits = {r["name"][:2]: r["waits"] for r in rows if r["waits"] >= 0.05}
    longest = max(rows, key=lambda r: r["run_all"] + r["kernel"])
    cores = min(jobs, os.cpu_count() or 1)
    return (f"beside the waits: {wall:.1f} s; the waits the chapter prescribes {sum(waits.values()):.1f} s in all ("
            + ", ".join(f"{k}: {v:.1f}" for k, v in waits.items())
            + f"), the longest notebook alone ({longest['name'][:2]}) {longest['run_all'] + longest['kernel']:.1f} s; "
              f"CPU {cpu:.1f} s over {cores} core{'s' if cores > 1 else ''}: {cpu / cores:.1f} s at the least; beyond "
              f"the waits {wall - sum(waits.values()):.1f} s")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.notebooks")
    p.add_argument("notebooks", nargs="*", help="notebooks/*.ipynb when none")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="the N hottest functions per notebook")
    p.add_argument("--chapter", action="store_true", help="then time make chapter's commands")
    p.add_argument("--no-notebooks", action="store_true", help="only --chapter")
    p.add_argument("--jobs", default="1,2", help="--chapter's HARNESS_CHAPTER_JOBS values, alternating (1,2)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each notebook (medians shown)")
    args = p.parse_args(argv)
    paths = [Path(n) for n in args.notebooks] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    rows: list[dict] = []
    if not args.no_notebooks:
        print(f"one fresh kernel per notebook, one after another; load average {os.getloadavg()[0]:.2f}, "
              f"{os.cpu_count()} cores")
        print(f"{'notebook':28s} {'kernel':>6s} {'run all':>7s} {'waits':>6s} {'beyond':>6s} {'CPU':>5s} "
              f"{'reqs':>5s} {'prov.':>6s}  slowest cells (index: s); its waits")
        for path in paths:
            runs = [asyncio.run(measure(path, profile=bool(args.profile))) for _ in range(args.repeats)]
            m = {k: statistics.median(r[k] for r in runs) if isinstance(runs[0][k], float) else runs[-1][k]
                 for k in runs[0]}
            rows.append(m)
            slow = ", ".join(f"{i}: {s:.1f}" for i, s in m["slowest"])
            waits = "; ".join(f"{w.removeprefix('harness_lib.')} {s:.1f}" for w, s in m["waits_by"].items())
            print(f"{m['name']:28s} {m['kernel']:6.1f} {m['run_all']:7.1f} {m['waits']:6.1f} {m['beyond']:6.1f} "
                  f"{m['cpu']:5.1f} {m['requests']:5d} {m['busy']:6.1f}  {slow}{'; ' + waits if waits else ''}",
                  flush=True)
            if args.profile:
                print("\n".join(profile_lines(m["samples"], args.profile)), flush=True)
        print(f"{'all':28s} {sum(r['kernel'] for r in rows):6.1f} {sum(r['run_all'] for r in rows):7.1f} "
              f"{sum(r['waits'] for r in rows):6.1f} {sum(r['beyond'] for r in rows):6.1f} "
              f"{sum(r['cpu'] for r in rows):5.1f} {sum(r['requests'] for r in rows):5d} "
              f"{sum(r['busy'] for r in rows):6.1f}; load average {os.getloadavg()[0]:.2f} at the end")
    if args.chapter:
        chapter(args.repeats, args.jobs.split(","), rows=None if args.no_notebooks else rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
