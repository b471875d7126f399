"""How long the scripted provider takes to serve the chapter's 100-turn runaway.

    python -m benchmarks.provider

(The harness's own overhead, beside a bare httpx loop and the peer libraries, is the rest of
``benchmarks/``: ``make bench``.)

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

import statistics
import time

import httpx

from harness_lib.scripted.server import ScriptedProvider, complete
from harness_lib.tokens import compact
from harness_lib.workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace

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


def main() -> int:
    r = provider_bench()
    print(f"runaway, {r['turns']} turns: {r['prompt_tokens']:,} prompt tokens in {r['request_bytes']:,} request bytes")
    print(f"provider, in process (server.complete): {r['complete_ms']:.1f} ms for {r['turns']} requests "
          f"({r['complete_ms'] / r['turns']:.2f} ms each), median of {len(r['complete_ms_runs'])}")
    print(f"provider, over HTTP (httpx, loopback):  {r['http_ms']:.1f} ms for {r['turns']} POSTs "
          f"({r['http_ms'] / r['turns']:.2f} ms each), median of {len(r['http_ms_runs'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
