"""The peer comparison, in one command: ``python -m benchmarks [--repeats N] [--cap N] [--write]``.

One scripted provider in its own process (as a real endpoint would be: no shared GIL); every harness run
``repeats`` times, interleaved (each repetition runs every harness once, in a rotated order, so a slow
minute of the machine falls on all of them), each time in a fresh process (``one.py``). Figures per
harness, from the runaway capped at ``cap`` model calls: client-side overhead per turn (median over the
repetitions of each run's median; the spread is the range of those medians; min is the lowest single
turn), turns 1-10 against the last ten, request bytes of the last call, how it ends at its cap, whether
its usage totals match the server's; plus cold import time, peak RSS, and the overhead of the 3-turn plan.
``--write`` puts them in ``benchmarks/RESULTS.md`` with the machine and the versions.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .harnesses_imports import IMPORTS, PEERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODULE_OF = {"openai": "openai", "openai-agents": "agents", "pydantic-ai": "pydantic_ai", "langgraph": "langgraph"}
DISTRIBUTIONS = ("httpx", "openai", "openai-agents", "pydantic-ai-slim", "langgraph", "langgraph-prebuilt",
                 "langchain-openai", "langchain-core", "tiktoken")
LABELS = {
    "httpx": "a bare httpx loop (the floor)",
    "openai": "a hand loop on the official openai client",
    "openai-agents": "openai-agents (chat-completions model, tracing off)",
    "pydantic-ai": "pydantic-ai",
    "langgraph": "LangGraph prebuilt ReAct agent",
    "harness": "this harness, trace file on",
    "harness+state": "this harness, trace + state dir",
    "harness+state-tmpfs": "this harness, trace + state dir on a tmpfs (/dev/shm: an fsync costs nothing)",
}


def available(name: str) -> str | None:
    """None when the harness can run here, else why not."""
    if name in PEERS and importlib.util.find_spec(MODULE_OF[name]) is None:
        return f"{MODULE_OF[name]} is not installed: pip install -e '.[bench]'"
    return None


@contextlib.contextmanager
def provider_process():
    """The scripted provider in its own process, on a free port of 127.0.0.1."""
    proc = subprocess.Popen([sys.executable, "-m", "harness_lib", "serve", "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()  # "scripted provider on URL  scenarios: ..."
        if "http" not in line:
            raise RuntimeError(f"the scripted provider did not start: {line!r}")
        yield line.split()[3]
    finally:
        proc.terminate()
        proc.wait()


def one(name: str, base_url: str, cap: int, trees: dict[str, Path] | None = None) -> dict:
    """``name@REF`` measures ``name`` with the harness_lib of the tree exported for REF (``--before``)."""
    name, _, ref = name.partition("@")
    first = [str(trees[ref])] if ref else []  # before this tree: its harness_lib is the one imported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*first, str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "benchmarks.one", name, base_url, str(cap)], capture_output=True,
                         text=True, timeout=600, env=env, cwd=first[0] if first else ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(names: list[str], repeats: int, cap: int, log=print, trees: dict[str, Path] | None = None
            ) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {n: [] for n in names}
    with provider_process() as base_url:
        for rep in range(repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                runs[name].append(one(name, base_url, cap, trees))
            log(f"repetition {rep + 1}/{repeats} done")
    return runs


def aggregate(runs: list[dict]) -> dict:
    med = lambda key: statistics.median(r["runaway"][key] for r in runs)  # noqa: E731
    medians = [r["runaway"]["median_ms"] for r in runs]
    last = runs[-1]["runaway"]
    return {
        "median_ms": med("median_ms"), "spread_ms": (min(medians), max(medians)),
        "min_ms": min(r["runaway"]["min_ms"] for r in runs),
        "first_10_ms": med("first_10_ms"), "last_10_ms": med("last_10_ms"),
        "plan_ms": statistics.median(r["plan"]["overhead_ms"] for r in runs),
        "import_ms": statistics.median(r["import_ms"] for r in runs),
        "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
        "request_bytes_last": last["request_bytes_last"], "calls": last["calls"], "tool_runs": last["tool_runs"],
        "ended": last["ended"],
        "usage_matches": [r["runaway"]["usage_matches"] for r in runs],
        "plan_usage_matches": [r["plan"]["usage_matches"] for r in runs],
        "plan_ended": runs[-1]["plan"]["ended"], "plan_calls": runs[-1]["plan"]["calls"],
    }


def usage_word(matches: list) -> str:
    """yes / no (k of n runs differ) / none (it reports no totals); a mix of none and yes says so."""
    if all(m is None for m in matches):
        return "none"
    differ = sum(1 for m in matches if m is False)
    if differ:
        return f"no ({differ} of {len(matches)} runs differ)"
    return "yes" if all(matches) else f"yes in {sum(1 for m in matches if m)} of {len(matches)} runs, else none"


def table(figures: dict[str, dict], floor: str = "httpx") -> str:
    base = figures.get(floor, {}).get("median_ms")
    rows = ["| harness | ms/turn median (spread of runs) | x floor | min | turns 1-10 -> last 10 "
            "| 3-turn plan ms | import ms | peak RSS MB | request bytes, last call | model calls / tool runs "
            "| at its cap | usage = server's: runaway / plan |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in figures.items():
        ratio = f"{f['median_ms'] / base:.1f}" if base else "-"
        rows.append(f"| {label(name)} | {f['median_ms']:.2f} ({f['spread_ms'][0]:.2f}-{f['spread_ms'][1]:.2f}) "
                    f"| {ratio} | {f['min_ms']:.2f} | {f['first_10_ms']:.2f} -> {f['last_10_ms']:.2f} "
                    f"| {f['plan_ms']:.1f} | {f['import_ms']:.0f} | {f['peak_rss_mb']:.0f} "
                    f"| {f['request_bytes_last']:,} | {f['calls']} / {f['tool_runs']} | {f['ended']} "
                    f"| {usage_word(f['usage_matches'])} / {usage_word(f['plan_usage_matches'])} |")
    return "\n".join(rows)


def label(name: str) -> str:
    name, _, ref = name.partition("@")
    return LABELS[name] + (f", at {ref} (before)" if ref else "")


def versions() -> str:
    out = []
    for d in DISTRIBUTIONS:
        try:
            out.append(f"{d} {importlib.metadata.version(d)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(out)


def machine() -> str:
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   "")
    return (f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu or platform.machine()}), "
            f"Python {platform.python_version()}")


def report(figures: dict, skipped: dict, repeats: int, cap: int, seconds: float) -> str:
    lines = [
        "# Benchmarks: this harness beside the libraries a reader would pick instead",
        "",
        "Re-measure with `make bench` (`python -m benchmarks --write`; the peers need `pip install -e '.[bench]'`).",
        "",
        f"- machine: {machine()}; load average at the end {os.getloadavg()[0]:.2f} "
        "(other work shares these cores: compare ratios within this table, not absolute times across runs)",
        f"- versions: {versions()}",
        f"- method: one scripted provider in its own process; {repeats} repetitions, interleaved, each harness "
        f"in a fresh process per repetition; the runaway capped at {cap} model calls by each harness's own "
        f"cap; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s in all",
        "- overhead per turn = time from one request to the next, less the provider's own time for the first "
        "(its Server-Timing header), read by the same httpx event hooks in every harness",
        "",
        table(figures),
        "",
        "- with a state dir, each paid reply is on disk (fsynced) before the next request and a write's record "
        "before the write begins, so a saved turn costs at least one fsync of this disk, whatever the code; the "
        "tmpfs row is the same run where an fsync costs nothing: the harness's own cost of saving. "
        "`python -m benchmarks.persistence` times the harness alone (no HTTP), with this disk's fsync latency",
    ]
    if any("@" in name for name in figures):
        lines.append("- rows 'at REF (before)': this harness's entries run with the harness_lib of git REF "
                     "(`--before REF`), interleaved with the rest in the same run")
    lines.append("")
    for name, why in skipped.items():
        lines.append(f"- {label(name)}: not measured ({why})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cap", type=int, default=50, help="model calls each harness may make on the runaway")
    p.add_argument("--only", nargs="*", choices=list(IMPORTS), help="measure only these")
    p.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    p.add_argument("--before", metavar="REF", help="also measure this harness's entries with the harness_lib of "
                                                   "git REF (exported), interleaved with the rest")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.cap < 12:
        p.error("--repeats must be at least 1 and --cap at least 12 (first ten turns against the last ten)")
    names = args.only or list(IMPORTS)
    skipped = {n: why for n in names if (why := available(n))}
    names = [n for n in names if n not in skipped]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-before-") as tmp:
        trees = {}
        if args.before:
            from .coldstart import export
            trees[args.before] = Path(tmp) / "before"
            export(args.before, trees[args.before])
            names += [f"{n}@{args.before}" for n in names if n.startswith("harness")]
        runs = measure(names, args.repeats, args.cap, log=lambda s: print(s, file=sys.stderr), trees=trees)
    figures = {n: aggregate(runs[n]) for n in names}
    text = report(figures, skipped, args.repeats, args.cap, time.perf_counter() - t0)
    print(text)
    if args.write:
        (HERE / "RESULTS.md").write_text(text)
    return 0
