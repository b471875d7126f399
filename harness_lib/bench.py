"""How long the scripted provider takes to serve the chapter's 100-turn runaway.

    python -m harness_lib.bench        (or: make bench)

The 100 requests are the ones the harness sends for ``runaway`` at cap 100: the fixture's system prompt
and task, the four tool schemas, and per turn the assistant's ``list_files`` call (ids c0..c99) and its
result, the JSON list of the workspace's file names. Their prompt tokens must sum to the chapter's
337,299, or the figure measures the wrong thing. Two figures:

* ``complete``: server-side work alone (validate, script, count tokens), ``server.complete(body)``
  called in-process on every request; the median of 5 repetitions;
* ``http``: the same 100 bodies POSTed one after another to a ``ScriptedProvider`` over loopback with
  httpx on one kept-alive connection (bodies serialised beforehand); the median of 5 repetitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time

import httpx

from .client import ModelClient
from .loop import Options, run
from .scripted.server import ScriptedProvider, complete
from .state import new_run
from .tokens import compact
from .workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace

RUNAWAY_TURNS = 100
RUNAWAY_PROMPT_TOKENS = 337_299  # the chapter's input tokens at cap 100
REPEATS = 5


def runaway_requests(turns: int = RUNAWAY_TURNS) -> list[dict]:
    """The request bodies of a runaway run, turn 0 to turns - 1, in the harness's message shapes."""
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


def time_complete(bodies: list[dict]) -> float:
    """Milliseconds for ``complete`` over every body, in process."""
    t0 = time.perf_counter()
    results = [complete(body)[0] for body in bodies]
    ms = (time.perf_counter() - t0) * 1000
    _check([r["usage"]["prompt_tokens"] for r in results])
    for t, r in enumerate(results):
        if r["message"]["tool_calls"][0]["id"] != f"c{t}":
            raise AssertionError(f"turn {t}: the provider answered {r['message']}, not call c{t}")
    return ms


def time_http(base_url: str, payloads: list[bytes]) -> float:
    """Milliseconds of wall time for POSTing every payload, one after another, on one connection."""
    url = base_url + "/chat/completions"
    with httpx.Client(trust_env=False, timeout=30, headers={"Content-Type": "application/json"}) as http:
        http.get(base_url + "/models").raise_for_status()  # connect before the clock starts
        t0 = time.perf_counter()
        responses = [http.post(url, content=p) for p in payloads]
        ms = (time.perf_counter() - t0) * 1000
    for r in responses:
        r.raise_for_status()
    _check([r.json()["usage"]["prompt_tokens"] for r in responses])
    return ms


def provider_bench(repeats: int = REPEATS) -> dict:
    """Time the provider over the whole runaway; medians and every repetition, in milliseconds."""
    bodies = runaway_requests()
    for body in bodies[:5]:
        complete(body)  # warm the tokenizer before the clock starts
    complete_ms = [time_complete(bodies) for _ in range(repeats)]
    payloads = [compact(b).encode() for b in bodies]
    with ScriptedProvider() as provider:
        http_ms = [time_http(provider.base_url, payloads) for _ in range(repeats)]
    return {
        "turns": len(bodies),
        "prompt_tokens": RUNAWAY_PROMPT_TOKENS,
        "request_bytes": sum(len(p) for p in payloads),
        "complete_ms": statistics.median(complete_ms),
        "complete_ms_runs": complete_ms,
        "http_ms": statistics.median(http_ms),
        "http_ms_runs": http_ms,
    }


class _TimedClient(ModelClient):
    """A ModelClient that notes the clock before every call, and the provider's own time for each
    request from its ``Server-Timing`` header."""

    def __init__(self, base_url: str):
        super().__init__(base_url)
        self.marks, self.server_ms = [], []
        self.http.event_hooks["response"].append(self._server_timing)

    async def _server_timing(self, response):
        timing = response.headers.get("Server-Timing", "handler;dur=0")
        self.server_ms.append(float(timing.split("dur=")[1]))

    async def complete(self, *args, **kwargs):
        self.marks.append(time.perf_counter())
        return await super().complete(*args, **kwargs)


async def _one_run(client: ModelClient, max_turns: int):
    try:
        return await run(new_run(SYSTEM_PROMPT, TASK, "runaway"), Workspace.copy_of().tools(),
                         Options(client=client, max_turns=max_turns))
    finally:
        await client.http.aclose()


@contextlib.contextmanager
def provider_process():
    """The scripted provider in its own process, as a real endpoint would be: no shared GIL."""
    proc = subprocess.Popen([sys.executable, "-m", "harness_lib", "serve", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().split()[3]  # "scripted provider on URL  scenarios: ..."
    finally:
        proc.terminate()
        proc.wait()


def harness_bench(turns: int = 50, repeats: int = REPEATS) -> dict:
    """Client-side overhead per turn on a ``turns``-turn runaway: the time from one model call to the
    next, less the provider's own time for that request (its Server-Timing header). What is left is
    the loop, the tool run, the JSON of the growing transcript, httpx and loopback. The provider runs
    in another process. The median over turns, then over repeats; the first run only warms up."""
    medians, first, last = [], [], []
    with provider_process() as base_url:
        for _ in range(repeats + 1):
            client = _TimedClient(base_url)
            state = asyncio.run(_one_run(client, turns + 1))
            overhead = [(b - a) * 1000 - s for a, b, s in zip(client.marks, client.marks[1:], client.server_ms)]
            medians.append(statistics.median(overhead))
            first.append(statistics.median(overhead[:10]))
            last.append(statistics.median(overhead[-10:]))
    if state.turns != turns + 1:
        raise AssertionError(f"the runaway ran {state.turns} turns, not {turns + 1}")
    return {"turns": turns, "overhead_ms": statistics.median(medians[1:]),
            "first_10_ms": statistics.median(first[1:]), "last_10_ms": statistics.median(last[1:])}


async def _raw_loop(base_url: str, turns: int) -> list[float]:
    """The floor: a bare httpx loop that sends the same growing runaway transcript and appends the
    replies and a constant tool result, with no harness at all. Returns the per-turn overhead in ms."""
    tools = [t.schema() for t in Workspace(DATA_WORKSPACE).tools()]
    names = compact(sorted(p.name for p in DATA_WORKSPACE.iterdir() if p.is_file()))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    marks, server_ms = [], []
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        for _ in range(turns + 1):
            marks.append(time.perf_counter())
            r = await http.post(base_url + "/chat/completions",
                                json={"model": "runaway", "messages": messages, "tools": tools})
            server_ms.append(float(r.headers["Server-Timing"].split("dur=")[1]))
            message = r.json()["choices"][0]["message"]
            messages.append(message)
            for c in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": "list_files", "content": names})
    return [(b - a) * 1000 - s for a, b, s in zip(marks, marks[1:], server_ms)]


def raw_bench(turns: int = 50, repeats: int = REPEATS) -> dict:
    with provider_process() as base_url:
        medians = [statistics.median(asyncio.run(_raw_loop(base_url, turns))) for _ in range(repeats + 1)]
    return {"turns": turns, "overhead_ms": statistics.median(medians[1:])}


def main() -> int:
    raw = raw_bench()
    print(f"raw httpx loop (no harness), {raw['turns']}-turn runaway: {raw['overhead_ms']:.2f} ms per turn (median)")
    h = harness_bench()
    print(f"harness, {h['turns']}-turn runaway: client-side overhead {h['overhead_ms']:.2f} ms per turn (median); "
          f"turns 1-10 {h['first_10_ms']:.2f} ms, turns {h['turns'] - 9}-{h['turns']} {h['last_10_ms']:.2f} ms")
    r = provider_bench()
    print(f"runaway, {r['turns']} turns: {r['prompt_tokens']:,} prompt tokens in {r['request_bytes']:,} request bytes")
    print(f"provider, in process (server.complete): {r['complete_ms']:.1f} ms for {r['turns']} requests "
          f"({r['complete_ms'] / r['turns']:.2f} ms each), median of {len(r['complete_ms_runs'])}")
    print(f"provider, over HTTP (httpx, loopback):  {r['http_ms']:.1f} ms for {r['turns']} POSTs "
          f"({r['http_ms'] / r['turns']:.2f} ms each), median of {len(r['http_ms_runs'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
