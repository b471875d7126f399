"""The check of notebook 04's pieces: the run as data (``Run``, its ``resumable``), ``stop``, ``owed``, ``run_owed``
and ``agent(url, run, tools, max_turns, max_budget_usd, on_event)``, the loop whose every exit is a returned run.

The cases: each of the five exits reached (an answer; the cap; the budget; an approval and a Stop, both
``interrupted``; a provider refusing with HTTP 401 and a tool that raises, both ``failed``); every resumable kind
handed back and continued (a cap raised, or not enough; a budget raised; a call approved, the next one waiting
again; the stopped scan run again) and a completed run handed back; the limits' edges (a cap of 0 and of 1, a
budget of exactly one turn, both reached on the same turn; a cancel without a reason). Expected is
``harness_lib.run`` with the same limits, the same Stop (a hook on the trace's ``tool_start``) and
``state.approve``: the notebook's loop keeps the library's order (the limits, then what is owed, then the model),
so the two agree on everything, the transcript included. Where they legitimately differ: the library refuses a cap
of 0 as a usage error, the loop stops such a run before its first turn, and that is expected of yours; a tool that
raises ends the loop's run ``failed`` at once, its call unanswered and not counted, where the library's
``tool_errors="fatal"`` first writes the error into the call's slot and counts the run: expected is the library's
without either. Errors are compared on whether there is one: each harness words its own.
"""

from __future__ import annotations

import asyncio

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
    Shape,
    ending,
    start,
    workspace,
)
from ..language import N_, Text, _

STOP = "user pressed Stop"
ONE_TURN = 0.000684   # what the first turn of plan or runaway costs: 204 tokens in, 23 out


def _case(name: str, point: str, script: str, limits: dict | None = None, *then: dict, stop: str | None = None,
          refused: bool = False, fatal: bool = False, **values) -> Case:
    """``name``: a template of the script's name and ``values`` (the script's name stays English; alone, it is a
    template no catalogue has, so that `_()` shows it as it is: `answer` is a message); ``then``: each continuation,
    its limits and whether the call the run waits for is approved first; ``stop``: the reason Stop gives once the
    scan starts ("": none, a bare ``cancel()``)."""
    return Case(Text(name, script=script, **values), point, {"script": script, "limits": limits or {}, "then": then,
                                                              "stop": stop, "refused": refused, "fatal": fatal})


def _more(approve: bool = False, **limits) -> dict:
    return {"limits": limits, "approve": approve}


CASES = (  # the five exits first, then their continuations, then the edges: the first case that fails is explained
    _case(N_("{script}, cap {cap}"),
          N_("a reply without calls is the `completed` exit, its text the run's output"),
          "plan", {"max_turns": 20}, cap=20),
    _case(N_("{script}, cap {cap}"),
          N_("the cap is an exit, `max_turns_exceeded` with `{'type': 'max_turns'}`, checked before the calls a turn "
             "asked for run: the run stops owing them"),
          "runaway", {"max_turns": 8}, cap=8),
    _case(N_("{script}, budget {usd}"),
          N_("the budget is an exit, `budget_exceeded` with `{'type': 'max_budget'}`"),
          "runaway", {"max_budget_usd": 0.010}, usd="$0.010"),
    _case("{script}",
          N_("a call that needs approval stops the run `interrupted`, the call described in its interruption, nothing "
             "deleted"),
          "destructive"),
    _case(N_("{script}, Stop once the scan starts"),
          N_("Stop is an exit, `interrupted` with `{'type': 'cancelled', 'reason': ...}`, returned, not raised"),
          "slow", stop=STOP),
    _case(N_("{script}, provider answers 401"),
          N_("a refused request is the `failed` exit: returned with its error, and not resumable"),
          "plan", refused=True),
    _case(N_("{script}, its tool raises"),
          N_("anything else that breaks is `failed` too, with its error: returned, not raised"),
          "recover", fatal=True),
    _case(N_("{script}, cap {cap}, then cap {more}"),
          N_("a capped run handed back with a higher cap first runs the call it owes, then pays for new turns only"),
          "runaway", {"max_turns": 8}, _more(max_turns=10), cap=8, more=10),
    _case(N_("{script}, then approved"),
          N_("an approved call is a call owed and now allowed: handed back, the run deletes the file and completes"),
          "destructive", {}, _more(approve=True)),
    _case(N_("{script}, Stop, then handed back"),
          N_("a stopped run handed back runs the call it owes and completes"),
          "slow", {}, _more(), stop=STOP),
    _case(N_("{script}, budget of one turn"),
          N_("the budget stops the run once the spend has reached it (`>=`): one turn's price exactly stops it after "
             "that turn"),
          "plan", {"max_budget_usd": ONE_TURN}),
    _case(N_("{script}, cap {cap}"),
          N_("a cap of 1 pays for one turn and stops owing its call"),
          "runaway", {"max_turns": 1}, cap=1),
    _case(N_("{script}, cap {cap}"),
          N_("a cap of 0 stops the run before its first turn: nothing paid"),
          "runaway", {"max_turns": 0}, cap=0),
    _case(N_("{script}, cap {cap} and budget of one turn"),
          N_("both limits reached on the same turn: the cap is checked first"),
          "runaway", {"max_turns": 1, "max_budget_usd": ONE_TURN}, cap=1),
    _case(N_("{script}, cap {cap}, then cap {more}"),
          N_("handed back with a cap it has already reached, a run stops at once: no turn paid, its call still owed"),
          "runaway", {"max_turns": 8}, _more(max_turns=5), cap=8, more=5),
    _case(N_("{script}, budget {usd}, then {more}"),
          N_("a budget raised continues the run from its owed call"),
          "runaway", {"max_budget_usd": 0.010}, _more(max_budget_usd=0.020), usd="$0.010", more="$0.020"),
    _case(N_("{script}, cap {cap}, then cap {more}"),
          N_("a run continued after its cap finishes as if it had never stopped"),
          "plan", {"max_turns": 2}, _more(max_turns=20), cap=2, more=20),
    _case(N_("{script}, budget {usd}, then {more}"),
          N_("a run continued after its budget finishes as if it had never stopped"),
          "plan", {"max_budget_usd": 0.001}, _more(max_budget_usd=0.010), usd="$0.001", more="$0.010"),
    _case(N_("{script}, approved once"),
          N_("an approval lets that one call run: the next call that needs one stops the run again"),
          "delete_twice", {}, _more(approve=True)),
    _case(N_("{script}, {status}, handed back"),
          N_("a completed run handed back stays completed: nothing paid, nothing run"),
          "plan", {}, _more(), status="completed"),
    _case("{script}", N_("an answer on the first turn completes the run"), "answer"),
    _case("{script}", N_("a run that never reaches a limit completes"), "direct"),
    _case("{script}", N_("a run that never reaches a limit completes"), "repeat"),
    _case(N_("{script}, cancelled without a reason"),
          N_("a cancel that gives no reason is still the `cancelled` exit, its reason `'cancelled'`"),
          "slow", stop=""),
    _case(N_("{script}, no Stop"), N_("a slow tool without Stop runs to the end"), "slow"),
)


def _stop_once(tool_name: str, reason: str | None):
    """A hook that cancels the run's task as ``tool_name`` starts, with ``reason`` ("": none); None: no hook."""
    def hook(event):
        if event.get("type") == "tool_start" and event.get("toolName") == tool_name:
            asyncio.current_task().cancel(reason or None)
    return hook if reason is not None else None


def _waiting(run) -> str | None:
    """The id of the call a run waits to have approved, if that is why it stopped."""
    why = run.interruption
    return why.get("callId") if isinstance(why, dict) and why.get("type") == "approval" else None


def _fields(run, deleted: list, resumable) -> dict:
    return {"status": run.status, "interruption": run.interruption, "resumable": resumable, "turns": run.turns,
            "tool_runs": run.tool_runs, "in": run.prompt_tokens, "out": run.completion_tokens,
            "cost_usd": getattr(run, "own_cost_usd", getattr(run, "cost_usd", None)), "output": run.output,
            "error": bool(run.error), "deleted": list(deleted), "messages": run.messages}


async def _yours_once(pieces: dict, where: str, run, tools, limits: dict, hook):
    task = asyncio.create_task(pieces["agent"](where, run, tools, on_event=hook, **limits))
    try:
        got = await task
    except asyncio.CancelledError:
        if ending():   # the check's own deadline, or Stop: not the piece's doing
            raise
        raise Shape(Text(N_("Stop left `agent` as an exception, CancelledError, not as the run it returns"))) from None
    if not isinstance(got, pieces["Run"]):
        raise Shape(Text(N_("`agent` returned {kind}: return the run it was given, its status set"),
                         kind=type(got).__name__))
    return got


async def _written(pieces: dict) -> None:
    """Each of the smaller pieces called once on a new run, in the cells' order: one not written yet is named even
    though `agent`'s own `except Exception` would catch what it raises."""
    run = pieces["Run"]("plan")
    getattr(run, "resumable")  # noqa: B009 - read for what it raises
    pieces["owed"](run.messages)
    await pieces["run_owed"](run, {})
    pieces["stop"](run, "running")


async def yours(pieces: dict, case: Case, url: str) -> dict:
    from ..s04_five_exits import refusing_url

    await _written(pieces)
    a, ws = case.args, workspace()
    tools = ws.tools(**QUICK_SCAN)
    run = await _yours_once(pieces, refusing_url() if a["refused"] else url, pieces["Run"](a["script"]), tools,
                            a["limits"], _stop_once("scan_archive", a["stop"]))
    for more in a["then"]:
        if more["approve"] and _waiting(run):   # a run not waiting for one is handed back as it is: it differs
            run.approved.add(_waiting(run))
        run = await _yours_once(pieces, url, run, tools, more["limits"], None)
    return {**_fields(run, ws.deleted, run.resumable), "error_text": str(run.error)}   # the text for a hint only


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import approve, new_run
    from ...trace import Trace
    from ...workspace import SYSTEM_PROMPT, TASK
    from ..s04_five_exits import refusing_url

    a = case.args
    if a["limits"].get("max_turns") == 0:  # the library refuses it; the loop's check stops before the first turn
        return {"status": "max_turns_exceeded", "interruption": {"type": "max_turns"}, "resumable": True,
                "turns": 0, "tool_runs": 0, "in": 0, "out": 0, "cost_usd": 0.0, "output": None, "error": False,
                "deleted": [], "messages": start()}
    ws = workspace()
    tools = ws.tools(**QUICK_SCAN)
    hook = _stop_once("scan_archive", a["stop"])
    options = Options(base_url=refusing_url() if a["refused"] else url, trace=Trace(timestamps=False, on_event=hook),
                      tool_errors="fatal" if a["fatal"] else "descriptive", **a["limits"])
    state = await asyncio.create_task(run(new_run(SYSTEM_PROMPT, TASK, a["script"]), tools, options))
    for more in a["then"]:
        if more["approve"]:
            approve(state, _waiting(state))
        state = await asyncio.create_task(run(state, tools, Options(base_url=url, **more["limits"])))
    got = _fields(state, ws.deleted, state.resumable)
    if a["fatal"]:  # the library writes the failed call's slot and counts its run; the loop fails as the tool raises
        got.update(tool_runs=state.tool_runs - 1, messages=state.messages[:-1])
    return got


def _interruption(i) -> str:
    return i["type"] if isinstance(i, dict) and "type" in i else _("no interruption") if i is None else repr(i)[:30]


INTERRUPTION = Field("interruption", show=_interruption, label=N_("interruption"))
RESUMABLE = Field("resumable", show=lambda r: _("resumable") if r is True else _("not resumable") if r is False
                  else repr(r), label=N_("resumable"))
OUTPUT = Field("output", show=lambda o: _("no output") if o is None
               else repr(o if not isinstance(o, str) or len(o) <= 30 else o[:27] + "..."), label=N_("output"))
ERROR = Field("error", show=lambda e: _("an error") if e else _("no error"),
              describe=lambda e, y: _("expected an error, yours has none") if e else
              _("yours has an error, expected none"))


def _continued(c: Case) -> bool:
    return bool(c.args["then"])


def _raised(y: dict, what: str) -> bool:
    return what in (y.get("raised") or "")


HINTS = (
    Hint(N_("part of `agent` is not written yet: its `except Exception` caught the `NotImplementedError` of the stub "
            "(YOUR CODE HERE) and made it the run's error"), lambda c, e, y: "NotImplementedError" in y["error_text"]),
    Hint(N_("Stop reaches the loop as `CancelledError` at its next await: catch it and return the run `interrupted`, "
            "`{'type': 'cancelled', 'reason': ...}` with the reason Stop gave; a stopped run is fine, and can go on"),
         lambda c, e, y: _raised(y, "CancelledError")),
    Hint(N_("a refused request reaches the loop as `httpx.HTTPStatusError`: catch it and return the run `failed`, "
            "with the error; a run that got a 401 has nothing to continue from, but it still ends as data"),
         lambda c, e, y: _raised(y, "HTTPStatusError")),
    Hint(N_("your loop ran `delete_file` without an approval: a call to a tool that `needs_approval` and whose id is "
            "not in `run.approved` stops the run, `interrupted`, before it runs"),
         lambda c, e, y: len(y["deleted"]) > len(e["deleted"])),
    Hint(N_("an approved call must run when the run is handed back: `run_owed` lets a call through once its id is in "
            "`run.approved`"), lambda c, e, y: _continued(c) and e["status"] == "completed" and y["status"] ==
         "interrupted" and y["deleted"] == []),
    Hint(N_("Stop is not a failure: it ends the run `interrupted` (resumable), with `{'type': 'cancelled', "
            "'reason': ...}`; folding the exits into \"it failed\" loses the three that can go on"),
         lambda c, e, y: c.args["stop"] is not None and not _continued(c) and y["status"] != e["status"]),
    Hint(N_("a refused request ends the run `failed`, with its error: the one exit besides `completed` that cannot be "
            "continued"), lambda c, e, y: c.args["refused"] and (y["status"], y["error"]) != (e["status"], e["error"])),
    Hint(N_("`resumable` is true for exactly three statuses, `max_turns_exceeded`, `budget_exceeded` and "
            "`interrupted`: a completed or failed run has nothing to continue"),
         lambda c, e, y: y["status"] == e["status"] and y["resumable"] != e["resumable"]),
    Hint(N_("one turn past the budget: the run stops once the spend has reached it, `cost_usd >= max_budget_usd`, "
            "checked before the call (`>` pays for one more turn)"),
         lambda c, e, y: e["status"] == "budget_exceeded" and y["turns"] > e["turns"]),
    Hint(N_("one turn past the cap: the run stops once `turns >= max_turns`, checked before the call"),
         lambda c, e, y: e["status"] == "max_turns_exceeded" and y["turns"] > e["turns"]),
    Hint(N_("both limits were reached on the same turn: the chapter checks the cap first, `max_turns_exceeded`"),
         lambda c, e, y: e["status"] == "max_turns_exceeded" and y["status"] == "budget_exceeded"
         and y["turns"] == e["turns"]),
    Hint(N_("your loop ran the calls of the turn that reached a limit before checking it: check the cap and the "
            "budget first, so that a stopped run owes its last calls and a continued one runs them without paying "
            "for the turn again"), lambda c, e, y: e["status"] in ("max_turns_exceeded", "budget_exceeded")
         and y["turns"] == e["turns"] and y["tool_runs"] > e["tool_runs"]),
    Hint(N_("your loop left calls unanswered: `owed` names the calls of the last reply whose ids (`tool_call_id`) have "
            "no result in the transcript yet, and each runs before the model is asked again"),
         lambda c, e, y: y["turns"] == e["turns"] and y["tool_runs"] < e["tool_runs"]),
    Hint(N_("the interruption says why the run stopped, as data: `{'type': 'max_turns'}`, `{'type': 'max_budget'}`, "
            "`{'type': 'approval', 'callId', 'toolName', 'args'}` or `{'type': 'cancelled', 'reason'}`"),
         lambda c, e, y: y["status"] == e["status"] and y["interruption"] != e["interruption"]),
    Hint(N_("the run you handed back paid for turns it already had, or skipped what it owed: each pass first checks "
            "the limits, then runs the calls `owed` names (the last reply's calls without a result), and asks the "
            "model only when nothing is owed"), lambda c, e, y: _continued(c) and (y["turns"], y["tool_runs"]) !=
         (e["turns"], e["tool_runs"])),
    Hint(N_("a run whose last message is an answer has ended: the loop returns it `completed`, its text as the "
            "output, before anything else"), lambda c, e, y: e["status"] == "completed" and y["status"] != "completed"),
    Hint(N_("each exit sets the run's status, its interruption and its error (none where there is none) and "
            "returns the run"), lambda c, e, y: y["status"] != e["status"] or y["error"] != e["error"]),
)

FIELDS = (STATUS, INTERRUPTION, RESUMABLE, TURNS, TOOL_RUNS, IN, OUT, COST, OUTPUT, ERROR, DELETED, TRANSCRIPT)
# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'interruption', 'resumable', 'output', 'error', 'completed', 'failed', 'max_turns_exceeded',
            'budget_exceeded', 'interrupted', 'max_turns', 'max_budget', 'approval', 'cancelled', 'callId',
            'toolName', 'args', 'reason')
CHECK = Check("04-five-exits", ("agent", "Run", "stop", "owed", "run_owed"), CASES, FIELDS, yours, expected, HINTS)


async def check(agent, Run, stop, owed, run_owed, url: str | None = None):  # noqa: N803 - the notebook's class
    """Run your ``agent`` (with your ``Run``, ``stop``, ``owed`` and ``run_owed``) on every case of section 4 beside
    ``harness_lib``: each exit reached, each resumable one continued. A table, ``N of M cases pass``, and for the
    first case that fails, what differs and what to change."""
    from ..s04_five_exits import refusing_url
    refusing_url()   # started here, in the kernel: a case's process uses it, never starts one the piece seems to leave
    return await CHECK.run(url, agent=agent, Run=Run, stop=stop, owed=owed, run_owed=run_owed)
