"""The check of notebook 13's piece, ``research_tool(child_tools, url, child_model, max_turns, max_budget_usd)``: the
chapter's subagent, a tool whose run is a whole child run with its own transcript, its own limits, and the
parent's Stop.

Each case is the ``delegate`` parent (it asks ``research`` one question, then passes the answer on) run by
``harness_lib.run`` with the reader's tool, beside the same tree with ``harness_lib.subagent.research_tool``: the
child runs each script (one that answers, runs away, recovers, stops for approval, fails, scans slowly...), under
the chapter's limits (6 turns, $0.05) and under tighter ones (a cap below its answer, reached exactly; a budget
below its answer), and a slow child is stopped at its scan's first and last progress line (the Stop pressed on
the parent's task, as the toolbar's is). Compared: the parent's status (and why it stopped), turns, tokens and total
dollars (the child's included), the child's summary (status, turns, spend, window), what the parent's window
received, and the shared trace (the child's run id written "child": the library names it after the parent's
call, the notebook's tool lets ``new_run`` choose).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ..checking import (
    COST,
    IN,
    OUT,
    QUICK_SCAN,
    STATUS,
    TRANSCRIPT,
    TURN_COUNT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    Shape,
    dollars,
    plural,
    workspace,
)
from ..language import N_, NP_, Text, _, ngettext

CHILD = {"max_turns": 6, "max_budget_usd": 0.05}   # the chapter's limits


def _case(child: str, point: str, stop_at: int | None = None, **limits) -> Case:
    # TRANSLATORS: a case's name: "plan child", then the child's own limits (", max_turns 2"), names in the code
    name = Text(N_("{script} child{limits}"), script=child, limits="".join(f", {k} {v}" for k, v in limits.items()))
    if stop_at:
        # TRANSLATORS: a case's name: "slow child, Stop at progress 1": Stop pressed at the scan's first progress line
        name = Text(N_("{case}, Stop at progress {n}"), case=name, n=stop_at)
    return Case(name, point, {"child": child, "limits": {**CHILD, **limits}, "stop_at": stop_at})


CASES = (  # the first case that fails is the one explained: the common path first, then each property
    _case("plan", N_("the child runs its own transcript to its answer, and only that answer reaches the parent")),
    _case("runaway", N_("a runaway child stops at its own cap, and the parent goes on with 'no result'")),
    _case("runaway", N_("the child's own budget stops it before its cap: it cannot spend what it was not given"),
          max_budget_usd=0.003),
    _case("plan", N_("a child stopped by its budget before its answer is no result for the parent"),
          max_budget_usd=0.001),
    _case("plan", N_("a child capped before its answer is no result for the parent"), max_turns=2),
    _case("plan", N_("a cap reached exactly on the child's answer still returns the answer"), max_turns=3),
    _case("slow", N_("one Stop ends the tree: the child ends interrupted, and the parent with it"), stop_at=1),
    _case("slow", N_("a Stop after the scan's last step, before the child's next call, ends the tree too"), stop_at=3),
    _case("destructive", N_("a child stopped for approval was not cancelled: it is no result, and the parent goes on")),
    _case("slow", N_("a slow child not stopped completes, and its answer reaches the parent")),
    _case("recover", N_("the child reads its own tool errors and recovers: the parent gets its answer")),
    _case("forbidden", N_("a child that fails every turn is stopped by its own cap")),
    _case("direct", N_("the child's answer, whatever the script, is the parent's tool result")),
    _case("repeat", N_("the child's answer, whatever the script, is the parent's tool result")),
    _case("answer", N_("a child that answers at once still reports its one turn")),
    _case("delegate", N_("a child asking for a tool it was not given is told so, and answers")),
)


async def _tree(make, case: Case, url: str) -> dict:
    """The delegate parent with the research tool ``make(child_tools)`` builds; Stop pressed on the parent's task
    at the child's ``stop_at``-th scan progress. Exceptions of the tool (the loop would write them into the
    parent's transcript) are raised here."""
    from ...loop import Options, run
    from ...state import new_run
    from ...tools import Tool
    from ...trace import Trace
    from ...workspace import SYSTEM_PROMPT, TASK

    tools, parent, raised = workspace().tools(**QUICK_SCAN), {}, []
    research = make([_stopping(t, case.args["stop_at"], parent) if t.name == "scan_archive" else t for t in tools])
    if not isinstance(research, Tool):
        raise Shape(Text(N_("`research_tool` returned {kind}: return the Tool it builds"),
                         kind=type(research).__name__))

    async def watched(args, ctx):
        try:
            return await research.run(args, ctx)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as error:  # noqa: BLE001 - the reader's, to be said as theirs
            raised.append(error)
            raise

    trace = Trace(timestamps=False)
    parent["task"] = asyncio.ensure_future(run(new_run(SYSTEM_PROMPT, TASK, "delegate"),
                                               [replace(research, run=watched), *tools],
                                               Options(base_url=url, trace=trace)))
    state = await parent["task"]
    if raised:
        raise raised[0]
    child = state.subruns[0] if state.subruns else None
    why = state.interruption
    return {"status": state.status + (f" ({why.get('type')}: {why.get('reason')})" if isinstance(why, dict) else ""),
            "turns": state.turns,
            "in": state.prompt_tokens, "out": state.completion_tokens, "cost_usd": state.total_cost_usd,
            "child": {k: v for k, v in child.items() if k != "runId"} if isinstance(child, dict) else child,
            "received": next((m["content"] for m in state.messages if m["role"] == "tool"), None),
            "trace": _who(trace.events, state.run_id), "messages": state.messages}


def _stopping(tool, stop_at: int | None, parent: dict):
    """The scan, pressing Stop on the parent's task at its ``stop_at``-th progress line."""
    if stop_at is None:
        return tool
    seen = []

    async def scan(args, ctx):
        def progress(label):
            ctx.progress(label)
            seen.append(label)
            if len(seen) == stop_at:
                parent["task"].cancel("user pressed Stop")
        return await tool.run(args, replace(ctx, progress=progress))
    return replace(tool, run=scan)


def _who(events: list[dict], parent_id: str) -> list[dict]:
    """The trace, each line's run id said as whose it is, its time (``ms``) left out."""
    return [{**{k: v for k, v in e.items() if k != "ms"}, "runId": "parent" if e["runId"] == parent_id else "child"}
            for e in events]


async def yours(pieces: dict, case: Case, url: str) -> dict:
    return await _tree(lambda tools: pieces["research_tool"](tools, url, case.args["child"], **case.args["limits"]),
                       case, url)


async def expected(case: Case, url: str) -> dict:
    from ...subagent import research_tool
    return await _tree(lambda tools: research_tool(tools, url, case.args["child"], **case.args["limits"]), case, url)


def _child(c) -> str:
    if not isinstance(c, dict):
        return _("no child reported")
    turns = c.get("turns")
    # TRANSLATORS: the child's summary: "child completed, 3 turns, $0.002466" (its status stays as the code says it)
    return _("child {status}, {turns}, {cost}").format(
        status=c.get("status"), turns=plural(turns, TURN_COUNT) if isinstance(turns, int) else turns,
        cost=dollars(c.get("costUsd")))


def _trace_difference(e, y) -> str:
    if not isinstance(y, list):
        return _("no trace")
    for i, (a, b) in enumerate(zip(e, y)):
        if a != b:
            # TRANSLATORS: "trace line 4 expected child turn, yours parent turn": whose line (parent, child) and its
            # type, as the trace writes them
            return _("trace line {n} expected {expected_run} {expected_type}, yours {yours_run} {yours_type}").format(
                n=i + 1, expected_run=a["runId"], expected_type=a["type"], yours_run=b["runId"], yours_type=b["type"])
    return ngettext("the trace has {expected} line, yours {yours}", "the trace has {expected} lines, yours {yours}",
                    len(e)).format(expected=len(e), yours=len(y))


CHILD_FIELD = Field("child", show=_child, describe=lambda e, y: _("expected {expected}, yours {yours}").format(
    expected=_child(e), yours=_child(y)))


def _short(text, n: int = 30) -> str:
    return repr(text if not isinstance(text, str) or len(text) <= n else text[:n - 3] + "...")


# TRANSLATORS: "received 'The timeout is set in c...'": what the parent's window received from the child
RECEIVED = Field("received", show=lambda r: _("received {text}").format(text=_short(r)),
                 describe=lambda e, y: _("the parent's window received: expected {expected}, yours {yours}").format(
                     expected=_short(e, 60), yours=_short(y, 60)))
TRACE = Field("trace", show=lambda t: plural(len(t), NP_("{n:,} trace line", "{n:,} trace lines"))
              if isinstance(t, list) else repr(t),
              describe=_trace_difference, follows=True)


def _stopped(c: Case) -> bool:
    return c.args["stop_at"] is not None


def _child_is(y: dict, key: str):
    return y["child"].get(key) if isinstance(y.get("child"), dict) else None


def _spend_unnamed(y: dict) -> bool:
    """A child reported whose spend is not under ``costUsd`` (``cost_usd``, say, as RunState spells it)."""
    return isinstance(y.get("child"), dict) and y["child"].get("costUsd") is None


HINTS = (
    Hint(N_("Stop reaches the child as `asyncio.CancelledError`: raise it as it is, `raise "
            "asyncio.CancelledError(reason)`, never as another exception, so that the parent's loop sees a Stop and "
            "ends interrupted"), lambda c, e, y: _stopped(c) and y.get("raised") is not None
         and "CancelledError" not in y["raised"]),
    Hint(N_("report the child's spend under the trace's names: `{'runId': ..., 'status': ..., 'turns': ..., "
            "'costUsd': out.total_cost_usd, 'messages': len(out.messages)}`, `costUsd` as the chapter writes it"),
         lambda c, e, y: y["child"] != e["child"] and _spend_unnamed(y)),
    Hint(N_("your child never stopped: give it limits of its own, `Options(max_turns=max_turns, "
            "max_budget_usd=max_budget_usd)`, so a runaway child ends there and the parent goes on"),
         lambda c, e, y: y.get("hung") is not None),
    Hint(N_("Stop did not end the tree: when the child ends interrupted by a cancellation, raise "
            "`asyncio.CancelledError` with its reason, so the parent ends interrupted too"),
         lambda c, e, y: _stopped(c) and not y["status"].startswith("interrupted")),
    Hint(N_("nobody pressed Stop: raise the cancellation only for a child interrupted with type 'cancelled'; a child "
            "stopped for approval (or by a limit) is a result, 'no result: ...', and the parent goes on"),
         lambda c, e, y: not _stopped(c) and (y["status"].startswith("interrupted") if y.get("raised") is None
                                              else c.args["child"] == "destructive")),
    Hint(N_("the Stop reached the parent without its reason: raise `asyncio.CancelledError(reason)` with the child's "
            "`interruption['reason']`"), lambda c, e, y: _stopped(c) and y["status"] != e["status"]),
    Hint(N_("no child was reported: call `ctx.report_subrun(...)` with the child's run id, status, turns, cost and "
            "messages, so that the parent's total (and its budget) count what the child spent"),
         lambda c, e, y: y["child"] is None),
    Hint(N_("the child ran past its own budget: pass `max_budget_usd` to the child's `Options`; a child cannot "
            "spend what it was not given"), lambda c, e, y: _child_is(e, "status") == "budget_exceeded"
         and _child_is(y, "status") != "budget_exceeded"),
    Hint(N_("the child ran past its own cap: pass `max_turns` to the child's `Options`"),
         lambda c, e, y: _child_is(e, "status") == "max_turns_exceeded"
         and (_child_is(y, "turns") or 0) > _child_is(e, "turns")),
    Hint(N_("the child's run is its own: start it with `new_run(RESEARCH_SYSTEM, args['question'], child_model)`, "
            "its own system prompt and the question, not the parent's task"),
         lambda c, e, y: _child_is(y, "costUsd") != _child_is(e, "costUsd")
         and _child_is(y, "turns") == _child_is(e, "turns")),
    Hint(N_("a child that did not complete has no answer: return 'no result: the research run ended <status>', "
            "so the parent's window says in words what became of it"),
         lambda c, e, y: _child_is(e, "status") != "completed" and y["received"] != e["received"]),
    Hint(N_("the parent's window gets the child's answer (`out.output`), not its transcript: that is the child's own "
            "window"), lambda c, e, y: y["received"] != e["received"] and len(str(y["received"])) > len(e["received"])),
    Hint(N_("report the child as it ended: its `total_cost_usd` as `costUsd`, its turns, its status and "
            "`len(out.messages)`"), lambda c, e, y: y["child"] != e["child"]),
    Hint(N_("the child's lines belong in the parent's trace: pass `trace=ctx.trace` to the child's `Options`"),
         lambda c, e, y: [t for t in y["trace"] if t["runId"] == "child"] != [t for t in e["trace"]
                                                                              if t["runId"] == "child"]),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('runId', 'status', 'turns', 'costUsd', 'messages', 'RESEARCH_SYSTEM')
CHECK = Check("13-subagent", ("research_tool",), CASES,
              (STATUS, CHILD_FIELD, RECEIVED, TURNS, IN, OUT, COST, TRACE, TRANSCRIPT),
              yours, expected, HINTS)


async def check(research_tool, url: str | None = None):
    """Run your ``research_tool`` on every case of section 13 beside ``harness_lib``: a table, ``N of M cases
    pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, research_tool=research_tool)
