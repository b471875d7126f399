"""The check of notebook 07's pieces: the run as a dict that keeps a person's decisions (``new_state``), the verdicts
(``approve``, ``reject``) and the gate in ``agent_loop(url, state, tools, max_turns)``.

The cases: ``destructive`` stopped at its delete, then each verdict (approve; reject with a reason, without one,
silently), twice across a restart (the stopped run saved and loaded as JSON before the verdict, and again before it
is handed back); ``delete_twice`` with both orders of approve and reject, approved twice, rejected in words then
silently; a new run after those, which must ask again (an approval belongs to its run); a cap that ends the run
before its gate (a cap of 0: the library refuses it, the loop stops before the first turn, and that is expected of
yours); and every other script the loop can run, which must pass the gate untouched. Expected is
``harness_lib.run`` with the same cap, each stop decided by ``harness_lib.state.approve`` / ``reject`` with the same
verdict (the library's run restarted the same way, through ``RunState.to_dict`` and ``from_dict``): the notebook's
loop keeps the library's order and words, so the two agree on every stop, the transcript included.
"""

from __future__ import annotations

import json
import re

from ..checking import (
    COST,
    DELETED,
    IN,
    OUT,
    QUICK_SCAN,
    RESTART,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    Shape,
    returned,
    start,
    workspace,
)
from ..language import N_, Text, _

REASON = "I only asked which file mentions a timeout; do not delete anything."
APPROVE, REJECT, NO_REASON, SILENT = "approve", "reject", "reject without a reason", "reject silently"


def _case(name: str, point: str, script: str, *verdicts: str, cap: int = 20, restart: bool = False,
          again: bool = False) -> Case:
    """``verdicts``: one for each stop, in order; ``restart``: around each verdict, the process stops and a new one
    goes on from the run saved as JSON; ``again``: once the run ends, a new run of the same script, in the same
    process."""
    return Case(name, point, {"script": script, "verdicts": verdicts, "cap": cap, "restart": restart,
                              "again": again})


def _capped(script: str, cap: int) -> Text:
    # TRANSLATORS: a case's name in a check's table: a script (`destructive`) run under a turn cap
    return Text(N_("{script}, cap {cap}"), script=script, cap=cap)


CASES = (  # the gate, then each verdict, then restarts and sequences, then the scripts it must leave alone
    _case(N_("destructive, stopped"), N_("a call to a tool that `needs_approval` stops the run: returned "
          "`interrupted`, the call described in `{'type': 'approval', 'callId', 'toolName', 'args'}`, nothing "
          "deleted"), "destructive"),
    _case(N_("destructive, approved"), N_("an approved call is an owed call now allowed to run: the file is deleted"),
          "destructive", APPROVE),
    _case(N_("destructive, approved, then a new run"), N_("approvals belong to the run that asked: a new run, in the "
          "same process, stops at its delete again"), "destructive", APPROVE, again=True),
    _case(N_("destructive, rejected with a reason"), N_("a rejection fills the call's slot in words, with the reason: "
          "the model tells the user nothing was deleted"), "destructive", REJECT),
    _case(N_("destructive, rejected without a reason"), N_("a rejection without a reason still says so in words: "
          "`The user declined this call.`"), "destructive", NO_REASON),
    _case(N_("destructive, rejected silently"), N_("a silent rejection leaves the slot empty, and the model reports a "
          "deletion that never happened: the chapter's lie, reproduced"), "destructive", SILENT),
    _case(N_("destructive, approved across a restart"), N_("the run waiting for its verdict is plain data: its process "
          "ends, a new one loads it from JSON and approves it, and a third goes on as if it never stopped"),
          "destructive", APPROVE, restart=True),
    _case(N_("destructive, rejected across a restart"), N_("a rejection kept in the run survives a restart too"),
          "destructive", REJECT, restart=True),
    _case(N_("delete_twice, rejected then approved"), N_("each call is decided on its own: the first refused in "
          "words, the second, asked next, approved"), "delete_twice", REJECT, APPROVE),
    _case(N_("delete_twice, approved then rejected"), N_("an approval lets that one call run: the next call stops the "
          "run again, and its rejection is written into its own slot"), "delete_twice", APPROVE, REJECT),
    _case(N_("delete_twice, approved twice"), N_("two approved deletes both run; the second finds the file gone and "
          "says so"), "delete_twice", APPROVE, APPROVE),
    _case(N_("delete_twice, rejected, then silently"), N_("each rejection writes its own slot: words, then nothing"),
          "delete_twice", REJECT, SILENT),
    _case(_capped("destructive", 2), N_("the cap is checked before what is owed, so before the gate: the run stops "
          "`max_turns_exceeded`, its delete still owed"), "destructive", cap=2),
    _case(_capped("destructive", 1), N_("a cap before the delete is asked for: the gate is never reached"),
          "destructive", cap=1),
    _case(_capped("destructive", 0), N_("a run capped at 0 stops before its first turn: a new run, as `new_state` "
          "makes it, returned with nothing paid"), "destructive", cap=0),
    _case("plan", N_("a run whose tools need no approval passes the gate untouched"), "plan"),
    _case(_capped("runaway", 8), N_("a run whose tools need no approval passes the gate untouched"), "runaway",
          cap=8),
    _case("recover", N_("a failing read passes the gate untouched, its error in its slot"), "recover"),
    _case("direct", N_("a run whose tools need no approval passes the gate untouched"), "direct"),
    _case("repeat", N_("a run whose tools need no approval passes the gate untouched"), "repeat"),
    _case(_capped("forbidden", 4), N_("a read that can never succeed passes the gate untouched"), "forbidden",
          cap=4),
    _case("slow", N_("a slow read passes the gate untouched"), "slow"),
    _case("answer", N_("a run that asks for no tool completes"), "answer"),
)


def _waiting(state) -> str | None:
    """The id of the call a run waits to have decided, if that is why it stopped."""
    why = state.get("interruption") if isinstance(state, dict) else state.interruption
    return why.get("callId") if isinstance(why, dict) and why.get("type") == "approval" else None


def _decide(approve, reject, state, call_id: str, verdict: str) -> None:
    if verdict == APPROVE:
        approve(state, call_id)
    elif verdict == REJECT:
        reject(state, call_id, reason=REASON)
    else:
        reject(state, call_id, **({"silent": True} if verdict == SILENT else {}))


def _restarted(state: dict) -> dict:
    """The reader's run, saved as JSON and loaded back, as another process would find it."""
    try:
        return json.loads(json.dumps(state))
    except (TypeError, ValueError) as error:
        raise Shape(Text(UNSAVED, error=f"{type(error).__name__}: {error}")) from None


UNSAVED = N_("your stopped run could not be saved as JSON ({error})")


def _says(message: str, text) -> bool:
    """Whether ``text`` holds ``message`` (a template: any values) as shown in the language spoken."""
    pattern = ".*".join(map(re.escape, re.split(r"\{[^{}]*\}", _(message))))
    return isinstance(text, str) and re.search(pattern, text, re.S) is not None


KEYS = ("status", "interruption", "turns", "tool_runs", "in", "out", "cost_usd", "answer", "messages")


async def yours(pieces: dict, case: Case, url: str, carry: dict | None = None) -> dict:
    """The case; across a restart, this process hands the run (as JSON) to the next (``RESTART``), which goes on
    with ``carry``: the run, the stops so far, the verdicts left, whether the next step is a verdict."""
    from ...workspace import TASK, Workspace

    a = case.args
    if carry is None:
        ws, state, asked, verdicts, deciding = workspace(), pieces["new_state"](a["script"], TASK), [], \
            list(a["verdicts"]), False
    else:
        ws, state, asked, verdicts, deciding = (Workspace(carry["workspace"]), carry["state"], carry["asked"],
                                                carry["verdicts"], carry["deciding"])

    def restart(deciding: bool) -> dict:
        return {RESTART: {"workspace": str(ws.keep().root), "state": _restarted(state), "asked": asked,
                          "verdicts": verdicts, "deciding": deciding}}

    tools, again = ws.tools(**QUICK_SCAN), a["again"] and carry is None
    while True:
        if not deciding:
            state = await pieces["agent_loop"](url, state, tools, a["cap"])
            got = returned(state, KEYS, "agent_loop")
            if not (call_id := _waiting(state)) or not verdicts:
                if not again:
                    break
                again, state = False, pieces["new_state"](a["script"], TASK)   # the same process, a new run
                continue
            asked.append(call_id)
            if a["restart"]:
                return restart(deciding=True)
        deciding = False
        _decide(pieces["approve"], pieces["reject"], state, asked[-1], verdicts.pop(0))
        if a["restart"]:
            return restart(deciding=False)
    return {**got, "asked": asked + ([_waiting(state)] if _waiting(state) else []), "deleted": list(ws.deleted)}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import RunState, approve, new_run, reject
    from ...workspace import SYSTEM_PROMPT, TASK

    a, ws = case.args, workspace()
    if a["cap"] == 0:  # the library refuses it; the loop's check stops before the first turn
        return {"status": "max_turns_exceeded", "interruption": {"type": "max_turns"}, "turns": 0, "tool_runs": 0,
                "in": 0, "out": 0, "cost_usd": 0.0, "answer": "", "messages": start(), "asked": [], "deleted": []}
    tools, asked, verdicts = ws.tools(**QUICK_SCAN), [], list(a["verdicts"])
    options = Options(base_url=url, max_turns=a["cap"])
    state = await run(new_run(SYSTEM_PROMPT, TASK, a["script"]), tools, options)
    while (call_id := _waiting(state)) and verdicts:
        asked.append(call_id)
        state = RunState.from_dict(json.loads(json.dumps(state.to_dict()))) if a["restart"] else state
        _decide(approve, reject, state, call_id, verdicts.pop(0))
        state = await run(state, tools, options)
    if a["again"]:   # a new run of the same script, once the first has ended
        state = await run(new_run(SYSTEM_PROMPT, TASK, a["script"]), tools, options)
    return {"status": state.status, "interruption": state.interruption, "turns": state.turns,
            "tool_runs": state.tool_runs, "in": state.prompt_tokens, "out": state.completion_tokens,
            "cost_usd": state.own_cost_usd, "answer": state.output or "", "messages": state.messages,
            "asked": asked + ([_waiting(state)] if _waiting(state) else []), "deleted": list(ws.deleted)}


def _slots(messages, ids) -> list:
    """What the transcript says for each of ``ids`` (None: no slot)."""
    found = {m.get("tool_call_id"): m.get("content") for m in messages if isinstance(m, dict) and m.get("role") ==
             "tool"} if isinstance(messages, list) else {}
    return [found.get(i) for i in ids]


def _rejected(c: Case) -> bool:
    return any(v != APPROVE for v in c.args["verdicts"])


def _slot_differs(c: Case, e: dict, y: dict) -> bool:
    return _rejected(c) and _slots(y["messages"], e["asked"]) != _slots(e["messages"], e["asked"])


ASKED = Field("asked", show=lambda a: _("stopped for {calls}").format(calls=", ".join(a)) if a else
              _("never stopped"), label=N_("stops for approval"),
              describe=lambda e, y: _("the run stopped for approval at {expected}, yours at {yours}").format(
                  expected=", ".join(e) or _("no call"), yours=", ".join(map(str, y)) or _("no call")))
INTERRUPTION = Field("interruption", show=lambda i: i["type"] if isinstance(i, dict) and "type" in i else
                     _("no interruption") if i is None else repr(i)[:30], label=N_("interruption"))
ANSWER = Field("answer", show=lambda a: repr(a if not isinstance(a, str) or len(a) <= 30 else a[:27] + "..."),
               label=N_("answer"))

HINTS = (
    Hint(N_("a run waiting for a verdict may outlive its process, so it is plain data: keep `approved` a list (a set "
            "is not JSON) and every decision inside the state"), lambda c, e, y: _says(UNSAVED, y.get("raised"))),
    Hint(N_("a rejected call must not run: the gate looks at `state['rejected']` first and answers the call with the "
            "rejection's words instead"), lambda c, e, y: _rejected(c) and len(y["deleted"]) > len(e["deleted"])
         and y["asked"][:1] == e["asked"][:1]),
    Hint(N_("your loop ran `delete_file` though nobody had approved it in this run: a call to a tool that "
            "`needs_approval` whose id is not in this run's `approved` returns the run `interrupted`, before the tool "
            "runs (an approval kept anywhere but the run's own state leaks into other runs, and a restart loses it)"),
         lambda c, e, y: len(y["deleted"]) > len(e["deleted"])
         or (c.args.get("again") and len(y["asked"]) < len(e["asked"]))),
    Hint(N_("only a tool marked `needs_approval` stops the run: the gate reads the tool's flag, not its name or the "
            "run's"), lambda c, e, y: set(y["asked"]) - set(e["asked"])),
    Hint(N_("a rejected call stopped the run again: the gate checks the run's `rejected` before asking for approval, "
            "and a call a person refused gets its slot filled, not another stop"),
         lambda c, e, y: _rejected(c) and len(y["asked"]) > len(e["asked"])),
    Hint(N_("an approved call must run when the run is handed back: `approve` writes its id into the run's own "
            "`approved`, where the gate reads it, and where it outlives a restart"),
         lambda c, e, y: len(y["asked"]) > len(e["asked"])),
    Hint(N_("a rejection writes the decision into the call's slot in words: `The user declined this call: <reason>`, "
            "or `The user declined this call.` without one, nothing only when silent; the model knows of your "
            "verdict only what that slot says"), _slot_differs),
    Hint(N_("a rejected call did not run: it is answered, not counted as a tool run"),
         lambda c, e, y: _rejected(c) and y["tool_runs"] > e["tool_runs"]),
    Hint(N_("the interruption carries what a person needs to decide: `{'type': 'approval', 'callId': ..., "
            "'toolName': ..., 'args': ...}`, the arguments parsed from the call's JSON"),
         lambda c, e, y: y["status"] == e["status"] and y["interruption"] != e["interruption"]),
)

FIELDS = (STATUS, ASKED, INTERRUPTION, TURNS, TOOL_RUNS, IN, OUT, COST, ANSWER, DELETED, TRANSCRIPT)
# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'interruption', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'answer', 'messages',
            'approved', 'rejected', 'interrupted', 'approval', 'callId', 'toolName', 'args', 'needs_approval')
CHECK = Check("07-approval", ("agent_loop", "new_state", "approve", "reject"), CASES, FIELDS, yours, expected, HINTS)


async def check(agent_loop, new_state, approve, reject, url: str | None = None):
    """Run your ``agent_loop`` (with your ``new_state``, ``approve`` and ``reject``) on every case of section 7
    beside ``harness_lib``: every stop, every verdict, across a restart. A table, ``N of M cases pass``, and for
    the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, new_state=new_state, approve=approve, reject=reject)
