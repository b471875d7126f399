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
from ..language import N_, Text, _


def _call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


READ = _call("c1", "read_file", '{"path": "errors.log"}')
ANOTHER_ID, KEY_ORDER, ANOTHER_FILE, ANOTHER_TOOL = (N_("another id"), N_("keys in another order"),
                                                     N_("another file"), N_("another tool"))
PAIRS = (  # (how the second call differs from the first, the two calls)
    (ANOTHER_ID, READ, _call("c2", "read_file", '{"path": "errors.log"}')),
    (KEY_ORDER, _call("c1", "scan_archive", '{"pattern": "timeout", "path": "archive"}'),
     _call("c2", "scan_archive", '{"path":"archive","pattern":"timeout"}')),
    (ANOTHER_FILE, READ, _call("c2", "read_file", '{"path": "notes.txt"}')),
    (ANOTHER_TOOL, READ, _call("c2", "delete_file", '{"path": "errors.log"}')),
)


def _case(script: str, dedupe: str, point: str, cap: int = 20, again: bool = False) -> Case:
    """Named by its script and cache (names in the code, never translated), and its cap when not the default;
    ``again``: a second run of the same script after the first, in the same process, its reads run anew."""
    # TRANSLATORS: a case's name in a check's table: a script (`runaway`), a cache (`read-only`), its turn cap
    name = Text(N_("{script}, {dedupe}, cap {cap}"), script=script, dedupe=dedupe, cap=cap) if cap != 20 \
        else f"{script}, {dedupe}"
    # TRANSLATORS: a case's name: "repeat, read-only, then a second run": two runs of the script, one after the other
    name = Text(N_("{case}, then a second run"), case=name) if again else name
    return Case(name, point, {"script": script, "dedupe": dedupe, "cap": cap, "again": again})


CASES = (  # the first case that fails is the one explained: the signature, then the gate, then every script
    Case(N_("signature of 4 pairs"),
         N_("a call's signature is its tool and its arguments, key order aside: not its id"), {"signature": True}),
    _case("repeat", "read-only",
          N_("the chapter's gate answers the repeated read from the cache: the tool runs once")),
    _case("delete_twice", "read-only", N_("the gate never answers a tool that writes: the second delete runs")),
    _case("delete_twice", "all", N_("the naive cache answers any repeat, the delete's too: it runs once")),
    _case("repeat", "read-only", N_("a cache belongs to its run: a second run reads the file again, its first read "
                                    "answered from nothing the first run kept"), again=True),
    _case("repeat", "off", N_("with the cache off, a repeat runs again")),
    _case("repeat", "all", N_("the naive cache answers a repeated read as the gate does")),
    _case("delete_twice", "off", N_("with the cache off, the second delete runs")),
    _case("forbidden", "all", N_("only a successful result is kept: a call that failed is tried again"), cap=8),
    _case("runaway", "read-only", N_("a repeat is seen only once the model has been paid to ask: the turns are the "
                                     "same, the tool runs fewer"), cap=8),
    _case("runaway", "off", N_("with the cache off, every call runs"), cap=8),
    _case("forbidden", "read-only", N_("only a successful result is kept: a call that failed is tried again"),
          cap=8),
    _case("recover", "all", N_("a failed read is never answered from the cache")),
    _case("plan", "read-only", N_("calls that differ are never answered from the cache")),
    _case("direct", "read-only", N_("a run without a repeat is the same under the gate")),
    _case("destructive", "read-only", N_("a run without a repeat is the same under the gate")),
    _case("slow", "read-only", N_("a run without a repeat is the same under the gate")),
    _case("answer", "read-only", N_("a run without a call is the same under the gate")),
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
    """For each pair, whether ``signature`` makes its two calls the same call: kept in English, shown through ``_``."""
    # TRANSLATORS: a verdict on two tool calls: their signatures are the same, or different
    return [N_("same") if signature(a) == signature(b) else N_("different") for _what, a, b in PAIRS]


async def yours(pieces: dict, case: Case, url: str) -> dict:
    if "signature" in case.args:
        return {"signature": _verdicts(pieces["signature"])}
    ws, ran = workspace(), []
    for _run in range(2 if case.args["again"] else 1):   # the second run's fields are the case's
        messages = start()
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
    for _run in range(2 if case.args["again"] else 1):
        state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools, options)
        while state.status == "interrupted" and state.interruption["type"] == "approval":
            state = await run(approve(state, state.interruption["callId"]), tools, options)
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.own_cost_usd, "ran": ran, "deleted": ws.delete_runs,
            "messages": state.messages}


def _pairs_difference(e, y) -> str:
    if not isinstance(y, list) or len(y) != len(e):
        return _("signature verdicts: {verdicts}").format(verdicts=repr(y))
    i = next(i for i, (a, b) in enumerate(zip(e, y)) if a != b)
    what, a, b = PAIRS[i]
    return _("`{first}` ({first_id}) and `{second}` ({second_id}), {what}: expected {expected} calls, yours "
             "{yours}").format(first=f"{a['function']['name']} {a['function']['arguments']}", first_id=a["id"],
                               second=f"{b['function']['name']} {b['function']['arguments']}", second_id=b["id"],
                               what=_(what), expected=_(e[i]), yours=_(y[i]) if isinstance(y[i], str) else y[i])


SIGNATURE = Field("signature", show=lambda v: ", ".join(map(_, v)) if isinstance(v, list) else repr(v),
                  describe=_pairs_difference)
def _ran(r) -> str:
    if not isinstance(r, list):
        return repr(r)
    names = [c.split(" ")[0] for c in r]
    ran = ", ".join(f"{n}×{names.count(n)}" for n in dict.fromkeys(names))
    # TRANSLATORS: the tools that really ran, by name: "ran list_files×1, delete_file×1"
    return _("ran {tools}").format(tools=ran) if ran else _("ran nothing")


def _tally(r: list) -> str:
    return "; ".join(f"{c} ×{r.count(c)}" for c in dict.fromkeys(r)) or _("nothing")


RAN = Field("ran", show=_ran, describe=lambda e, y: _("the tools really ran: expected {expected}, yours {yours}")
            .format(expected=_tally(e), yours=_tally(y) if isinstance(y, list) else repr(y)))


def _pair(e, y, what: str) -> bool:
    i = next(i for i, (w, _a, _b) in enumerate(PAIRS) if w == what)
    return e["signature"][i] != y["signature"][i]


def _mode(c: Case, script: str, dedupe: str) -> bool:
    return c.args.get("script") == script and c.args.get("dedupe") == dedupe


def _unprefixed(e: dict, y: dict) -> bool:
    """Whether a failed call's result in yours is the library's without its ``Error: ``."""
    pairs = zip(e["messages"], y["messages"]) if isinstance(y["messages"], list) else ()
    return any(isinstance(a, dict) and isinstance(b, dict) and a.get("role") == "tool"
               and str(a.get("content")).startswith("Error: ") and b.get("content") == a["content"][len("Error: "):]
               for a, b in pairs)


HINTS = (
    Hint(N_("a cache belongs to its run: keep it in the loop (`seen = {}` as the run starts), never in a variable of "
            "the process, where a second run finds the first run's answers"),
         lambda c, e, y: c.args.get("again") and len(y["ran"]) < len(e["ran"])),
    Hint(N_("a failed call's result is the error in its own words, as notebook 05's `descriptive` policy writes it: "
            "`f\"Error: {error}\"`"), lambda c, e, y: _unprefixed(e, y)),
    Hint(N_("your signature tells apart two calls that differ only in their id: every call has an id of its own, so "
            "a cache keyed on it never sees a repeat; key on the tool and its arguments"),
         lambda c, e, y: _pair(e, y, ANOTHER_ID)),
    Hint(N_("the same arguments in another key order (or spacing) are the same call: parse the arguments and dump "
            "them again with `sort_keys=True`"), lambda c, e, y: _pair(e, y, KEY_ORDER)),
    Hint(N_("your signature leaves something out: a read of another file, or another tool with the same arguments, "
            "is another call; put the tool's name and its arguments in it"),
         lambda c, e, y: _pair(e, y, ANOTHER_FILE) or _pair(e, y, ANOTHER_TOOL)),
    Hint(N_("under \"read-only\" a tool that writes must run every time: the chapter's gate answers a repeat only "
            "when `tool.read_only` (a second delete answered from the cache silently does not happen)"),
         lambda c, e, y: c.args.get("script") == "delete_twice" and len(y["ran"]) < len(e["ran"])
         and c.args["dedupe"] != "all"),
    Hint(N_("\"all\" is the naive cache: it answers a repeat of any tool, writes included (the chapter's "
            "`opts.dedupeAll`)"),
         lambda c, e, y: _mode(c, "delete_twice", "all") and len(y["ran"]) > len(e["ran"])),
    Hint(N_("a cached answer is not a tool run: count `tool_runs` only when the tool really runs"),
         lambda c, e, y: y["ran"] == e["ran"] and y["tool_runs"] > e["tool_runs"]),
    Hint(N_("the repeated read ran again: look each call up by its signature (`key in seen`), never its call id, and "
            "answer a repeat from what the first call returned"), lambda c, e, y: c.args.get("dedupe") != "off"
         and c.args.get("script") in ("repeat", "runaway") and len(y["ran"]) > len(e["ran"])),
    Hint(N_("with the cache \"off\" (the library's default) nothing is answered from it: every call runs"),
         lambda c, e, y: c.args.get("dedupe") == "off" and len(y["ran"]) < len(e["ran"])),
    Hint(N_("only a successful result is kept: keep it once `tool.run` has returned, never an error's text, so a "
            "call that failed is tried again"), lambda c, e, y: c.args.get("script") in ("forbidden", "recover")
         and len(y["ran"]) < len(e["ran"])),
    Hint(N_("a call answered from the cache gets exactly what the first call returned, under its own call id"),
         lambda c, e, y: y["ran"] == e["ran"] and y["messages"] != e["messages"]),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'off', 'read-only', 'all', 'read_only',
            'tool_call_id')
CHECK = Check("06-dedupe", ("agent_loop", "signature"), CASES,
              (SIGNATURE, STATUS, TURNS, TOOL_RUNS, RAN, DELETED, IN, OUT, COST, TRANSCRIPT), yours, expected, HINTS)


async def check(agent_loop, signature, url: str | None = None):
    """Run your ``agent_loop`` and ``signature`` on every case of section 6 beside ``harness_lib``: a table, ``N of M
    cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, signature=signature)
