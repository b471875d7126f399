"""The check of notebook 06's pieces, ``signature(call)`` and the dedupe gate of ``agent_loop(url, model, messages,
tools, dedupe, max_turns)``: two calls are the same call when they name the same tool with the same arguments, and
the chapter's gate answers a repeat from the cache only for a tool that changes nothing (``"read-only"``), any tool
under the naive cache (``"all"``), none under ``"off"``.

The cases: ``signature`` on pairs of calls (another id, the keys in another order, another file, another tool),
against ``harness_lib.dedupe.signature``; the same read twice (``repeat``) beside a delete asked twice
(``delete_twice``) under each cache; a read that always fails (``forbidden``) and the ``runaway`` under the caches;
every other script the loop can run under the chapter's gate. Expected is ``harness_lib.run`` with
``Options(dedupe=..., max_turns=...)``, each call its run stops for approved (the notebook's loop has no approval
gate: it deletes as if a person said yes), as tests/built/test_06_dedupe.py compares them. Every tool is watched on
both sides, so what really ran is compared beside the loop's own count of tool runs (a cached answer is not one).
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..checking import (
    COST,
    DELETED,
    IN,
    OUT,
    QUICK_SCAN,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    returned,
    start,
    workspace,
)


def _call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


READ = _call("c1", "read_file", '{"path": "errors.log"}')
PAIRS = (  # (how the second call differs from the first, the two calls)
    ("another id", READ, _call("c2", "read_file", '{"path": "errors.log"}')),
    ("keys in another order", _call("c1", "scan_archive", '{"pattern": "timeout", "path": "archive"}'),
     _call("c2", "scan_archive", '{"path":"archive","pattern":"timeout"}')),
    ("another file", READ, _call("c2", "read_file", '{"path": "notes.txt"}')),
    ("another tool", READ, _call("c2", "delete_file", '{"path": "errors.log"}')),
)


def _case(script: str, dedupe: str, point: str, cap: int = 20) -> Case:
    return Case(f"{script}, {dedupe}" + (f", cap {cap}" if cap != 20 else ""), point,
                {"script": script, "dedupe": dedupe, "cap": cap})


CASES = (  # the first case that fails is the one explained: the signature, then the gate, then every script
    Case("signature of 4 pairs", "a call's signature is its tool and its arguments, key order aside: not its id",
         {"signature": True}),
    _case("repeat", "read-only", "the chapter's gate answers the repeated read from the cache: the tool runs once"),
    _case("delete_twice", "read-only", "the gate never answers a tool that writes: the second delete runs"),
    _case("delete_twice", "all", "the naive cache answers any repeat, the delete's too: it runs once"),
    _case("repeat", "off", "with the cache off, a repeat runs again"),
    _case("repeat", "all", "the naive cache answers a repeated read as the gate does"),
    _case("delete_twice", "off", "with the cache off, the second delete runs"),
    _case("forbidden", "all", "only a successful result is kept: a call that failed is tried again", cap=8),
    _case("runaway", "read-only", "a repeat is seen only once the model has been paid to ask: the turns are the "
          "same, the tool runs fewer", cap=8),
    _case("runaway", "off", "with the cache off, every call runs", cap=8),
    _case("forbidden", "read-only", "only a successful result is kept: a call that failed is tried again", cap=8),
    _case("recover", "all", "a failed read is never answered from the cache"),
    _case("plan", "read-only", "calls that differ are never answered from the cache"),
    _case("direct", "read-only", "a run without a repeat is the same under the gate"),
    _case("destructive", "read-only", "a run without a repeat is the same under the gate"),
    _case("slow", "read-only", "a run without a repeat is the same under the gate"),
    _case("answer", "read-only", "a run without a call is the same under the gate"),
)

KEYS = ("status", "turns", "tool_runs", "in", "out", "cost_usd")


def _watched(tools: list, ran: list) -> list:
    """The same tools, each run noted (its name and arguments) before it starts: what really ran."""
    def watch(tool):
        async def run(args, ctx):
            ran.append(f"{tool.name} {json.dumps(args, sort_keys=True)}")
            return await tool.run(args, ctx)
        return replace(tool, run=run)
    return [watch(tool) for tool in tools]


def _verdicts(signature) -> list[str]:
    return ["same" if signature(a) == signature(b) else "different" for _, a, b in PAIRS]


async def yours(pieces: dict, case: Case, url: str) -> dict:
    if "signature" in case.args:
        return {"signature": _verdicts(pieces["signature"])}
    messages, ws, ran = start(), workspace(), []
    got = await pieces["agent_loop"](url, case.args["script"], messages, _watched(ws.tools(**QUICK_SCAN), ran),
                                     dedupe=case.args["dedupe"], max_turns=case.args["cap"])
    return {**returned(got, KEYS, "agent_loop"), "ran": ran, "deleted": ws.delete_runs, "messages": messages}


async def expected(case: Case, url: str) -> dict:
    from ...dedupe import signature
    from ...loop import Options, run
    from ...state import approve, new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    if "signature" in case.args:
        return {"signature": _verdicts(signature)}
    ws, ran = workspace(), []
    tools = _watched(ws.tools(**QUICK_SCAN), ran)
    options = Options(base_url=url, dedupe=case.args["dedupe"], max_turns=case.args["cap"])
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools, options)
    while state.status == "interrupted" and state.interruption["type"] == "approval":
        state = await run(approve(state, state.interruption["callId"]), tools, options)
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.own_cost_usd, "ran": ran, "deleted": ws.delete_runs,
            "messages": state.messages}


def _pairs_difference(e, y) -> str:
    if not isinstance(y, list) or len(y) != len(e):
        return f"signature verdicts: {y!r}"
    i = next(i for i, (a, b) in enumerate(zip(e, y)) if a != b)
    what, a, b = PAIRS[i]
    return (f"`{a['function']['name']} {a['function']['arguments']}` ({a['id']}) and `{b['function']['name']} "
            f"{b['function']['arguments']}` ({b['id']}), {what}: expected {e[i]} calls, yours {y[i]}")


SIGNATURE = Field("signature", show=lambda v: ", ".join(v) if isinstance(v, list) else repr(v),
                  describe=_pairs_difference)
def _ran(r) -> str:
    if not isinstance(r, list):
        return repr(r)
    names = [c.split(" ")[0] for c in r]
    return "ran " + (", ".join(f"{n}×{names.count(n)}" for n in dict.fromkeys(names)) or "nothing")


def _tally(r: list) -> str:
    return "; ".join(f"{c} ×{r.count(c)}" for c in dict.fromkeys(r)) or "nothing"


RAN = Field("ran", show=_ran, describe=lambda e, y: f"the tools really ran: expected {_tally(e)}, yours "
                                                   f"{_tally(y) if isinstance(y, list) else repr(y)}")


def _pair(e, y, what: str) -> bool:
    i = next(i for i, (w, _, _) in enumerate(PAIRS) if w == what)
    return e["signature"][i] != y["signature"][i]


def _mode(c: Case, script: str, dedupe: str) -> bool:
    return c.args.get("script") == script and c.args.get("dedupe") == dedupe


HINTS = (
    Hint("your signature tells apart two calls that differ only in their id: every call has an id of its own, so a "
         "cache keyed on it never sees a repeat; key on the tool and its arguments",
         lambda c, e, y: _pair(e, y, "another id")),
    Hint("the same arguments in another key order (or spacing) are the same call: parse the arguments and dump them "
         "again with `sort_keys=True`", lambda c, e, y: _pair(e, y, "keys in another order")),
    Hint("your signature leaves something out: a read of another file, or another tool with the same arguments, is "
         "another call; put the tool's name and its arguments in it",
         lambda c, e, y: _pair(e, y, "another file") or _pair(e, y, "another tool")),
    Hint("under \"read-only\" a tool that writes must run every time: the chapter's gate answers a repeat only when "
         "`tool.read_only` (a second delete answered from the cache silently does not happen)",
         lambda c, e, y: c.args.get("script") == "delete_twice" and len(y["ran"]) < len(e["ran"])
         and c.args["dedupe"] != "all"),
    Hint("\"all\" is the naive cache: it answers a repeat of any tool, writes included (the chapter's "
         "`opts.dedupeAll`)",
         lambda c, e, y: _mode(c, "delete_twice", "all") and len(y["ran"]) > len(e["ran"])),
    Hint("a cached answer is not a tool run: count `tool_runs` only when the tool really runs",
         lambda c, e, y: y["ran"] == e["ran"] and y["tool_runs"] > e["tool_runs"]),
    Hint("the repeated read ran again: look each call up by its signature (`key in seen`), never its call id, and "
         "answer a repeat from what the first call returned", lambda c, e, y: c.args.get("dedupe") != "off"
         and c.args.get("script") in ("repeat", "runaway") and len(y["ran"]) > len(e["ran"])),
    Hint("with the cache \"off\" (the library's default) nothing is answered from it: every call runs",
         lambda c, e, y: c.args.get("dedupe") == "off" and len(y["ran"]) < len(e["ran"])),
    Hint("only a successful result is kept: keep it once `tool.run` has returned, never an error's text, so a call "
         "that failed is tried again", lambda c, e, y: c.args.get("script") in ("forbidden", "recover")
         and len(y["ran"]) < len(e["ran"])),
    Hint("a call answered from the cache gets exactly what the first call returned, under its own call id",
         lambda c, e, y: y["ran"] == e["ran"] and y["messages"] != e["messages"]),
)

CHECK = Check("06-dedupe", ("agent_loop", "signature"), CASES,
              (SIGNATURE, STATUS, TURNS, TOOL_RUNS, RAN, DELETED, IN, OUT, COST, TRANSCRIPT), yours, expected, HINTS)


async def check(agent_loop, signature, url: str | None = None):
    """Run your ``agent_loop`` and ``signature`` on every case of section 6 beside ``harness_lib``: a table, ``N of M
    cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, signature=signature)
