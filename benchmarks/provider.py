"""How long the scripted provider takes per request as the chapter's 100-turn runaway grows, before and after:

    python -m benchmarks.provider [--before REF] [--repeats N]

(The harness's own overhead, beside a bare httpx loop and the peer libraries, is the rest of
``benchmarks/``: ``make bench``.)

The 100 requests are the ones the harness sends for ``runaway`` at cap 100: the fixture's system prompt
and task, the four tool schemas, and per turn the assistant's ``list_files`` call (ids c0..c99) and its
result, the JSON list of the workspace's file names. Their prompt tokens must sum to the chapter's
337,299, or the figure measures the wrong thing. Each measurement is a fresh process that serves the
100 requests once, in order, as a run sends them (so what a provider may keep from one request to the next
is there, and nothing else); per request:

* ``complete``: the server's own work (validate, script, count tokens), ``server.complete(body)``
  called in process;
* ``http``: the same bodies POSTed one after another to a ``ScriptedProvider`` over loopback with httpx on
  one kept-alive connection (bodies serialised beforehand), wall time per POST.

For this tree and the tree at git ``REF`` (``git archive``d, as ``benchmarks.coldstart`` does), alternating,
``--repeats`` processes each: the median over the processes of each one's median of requests 1-5, 48-52
and 96-100 (turns 1, 50 and 100), and of the whole 100's wall and CPU time (the process's, the server
thread's included: on a busy machine the wall time of 100 requests holds other processes' turns).
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
RUNAWAY_TURNS = 100
RUNAWAY_PROMPT_TOKENS = 337_299  # the chapter's input tokens at cap 100
POINTS = {1: slice(0, 5), 50: slice(47, 52), 100: slice(95, 100)}  # turn -> the requests around it


def runaway_requests(turns: int = RUNAWAY_TURNS) -> list[dict]:
    """The request bodies of a runaway run, turn 0 to turns - 1, in the harness's message shapes."""
    from harness_lib.tokens import compact
    from harness_lib.workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace

    tools = [t.schema() for t in Workspace(DATA_WORKSPACE).tools()]
    names = compact(sorted(p.name for p in DATA_WORKSPACE.iterdir() if p.is_file()))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    bodies = []
    for t in range(turns):
        bodies.append({"model": "runaway", "messages": list(messages), "tools": tools})
        call = {"id": f"c{t}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "name": "list_files", "content": names})
    return bodies


def _check(prompt_tokens: list[int]):
    if sum(prompt_tokens) != RUNAWAY_PROMPT_TOKENS:
        raise AssertionError(f"the runaway's prompts sum to {sum(prompt_tokens)}, not {RUNAWAY_PROMPT_TOKENS}")


def serve_in_process(bodies: list[dict]) -> list[float]:
    """Milliseconds of ``complete`` for each body, in order."""
    from harness_lib.scripted.server import complete
    ms, results = [], []
    for body in bodies:
        t0 = time.perf_counter()
        results.append(complete(body)[0])
        ms.append((time.perf_counter() - t0) * 1000)
    _check([r["usage"]["prompt_tokens"] for r in results])
    for t, r in enumerate(results):
        if r["message"]["tool_calls"][0]["id"] != f"c{t}":
            raise AssertionError(f"turn {t}: the provider answered {r['message']}, not call c{t}")
    return ms


def serve_over_http(bodies: list[dict]) -> list[float]:
    """Milliseconds of wall time for each POST, one after another, on one connection."""
    import httpx

    from harness_lib.scripted.server import ScriptedProvider
    from harness_lib.tokens import compact
    payloads = [compact(b).encode() for b in bodies]
    with ScriptedProvider() as provider, httpx.Client(trust_env=False, timeout=30,
                                                      headers={"Content-Type": "application/json"}) as http:
        http.get(provider.base_url + "/models").raise_for_status()  # connect before the clock starts
        url, ms, responses = provider.base_url + "/chat/completions", [], []
        for p in payloads:
            t0 = time.perf_counter()
            responses.append(http.post(url, content=p))
            ms.append((time.perf_counter() - t0) * 1000)
    for r in responses:
        r.raise_for_status()
    _check([r.json()["usage"]["prompt_tokens"] for r in responses])
    return ms


def child(mode: str) -> dict:
    """One measurement, in this process: the tokenizer made ready first, as a provider is before it serves."""
    from harness_lib import tokens
    tokens.warm()
    bodies = runaway_requests()
    cpu = time.process_time()
    ms = (serve_in_process if mode == "complete" else serve_over_http)(bodies)
    return {"total": sum(ms), "cpu": (time.process_time() - cpu) * 1000,
            **{str(turn): statistics.median(ms[s]) for turn, s in POINTS.items()}}


def measure(tree: Path, mode: str) -> dict:
    """``child(mode)`` in a fresh process that imports the harness_lib of ``tree`` (this file's, from ROOT)."""
    code = (f"import json, sys; sys.path.append({str(ROOT)!r}); from benchmarks.provider import child; "
            f"print(json.dumps(child({mode!r})))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{tree} {mode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.provider")
    p.add_argument("--before", default="HEAD~1", help="git ref of the tree to compare with")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    from .coldstart import export
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        export(args.before, before)
        trees = {f"before ({args.before})": before, "after": ROOT}
        results: dict[tuple[str, str], list[dict]] = {(t, m): [] for m in ("complete", "http") for t in trees}
        for _ in range(args.repeats):
            for (t, m), runs in results.items():
                runs.append(measure(trees[t], m))
    print(f"the scripted provider serving the runaway, {RUNAWAY_TURNS} requests in order "
          f"({RUNAWAY_PROMPT_TOKENS:,} prompt tokens), ms per request; medians of {args.repeats} alternating "
          f"fresh processes; load average {os.getloadavg()[0]:.2f}")
    names = {"complete": "in process (complete)", "http": "over HTTP (httpx, loopback)"}
    for (t, m), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("1", "50", "100", "total", "cpu")}
        print(f"  {names[m]:28s} {t:16s} turn 1 {med['1']:6.2f}  turn 50 {med['50']:6.2f}  turn 100 {med['100']:6.2f}"
              f"  (100 / 1: {med['100'] / med['1']:4.1f})  all 100: {med['total']:7.1f} wall, {med['cpu']:7.1f} cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
