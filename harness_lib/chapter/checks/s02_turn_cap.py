"""The check of notebook 02's piece, ``capped_loop(url, model, messages, tools, max_turns)``: 01's loop with the
chapter's turn cap, checked before each turn is paid for.

The cases: the runaway at caps 0, 1, 2 and the chapter's 8 (3,431 input tokens); ``plan`` capped before its
answer, exactly on it and past it; ``answer``, which ends on its first turn, at a cap of 1; and the other scripts
02's loop can run (no error handling, no approval) under a cap they never reach. Expected is ``harness_lib.run``
with ``Options(max_turns=...)``, plus what the chapter's placement of the check adds: the library checks its
caps before it runs the calls a reply asked for and leaves them owed, the chapter's loop (and so yours) checks at
the top of the next turn, so it has run them. The library refuses a cap of 0 as a usage error; the chapter's
check stops such a run before its first turn, and that is what is expected of yours.
"""

from __future__ import annotations

from ..checking import (
    IN,
    OUT,
    QUICK_SCAN,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Hint,
    answered,
    returned,
    start,
    workspace,
)
from ..language import N_, Text
from . import served


def _case(script: str, cap: int, point: str) -> Case:
    return Case(Text(N_("{script}, cap {cap}"), script=script, cap=cap), point, {"script": script, "cap": cap})


CASES = (  # the cases that tell mistakes apart come first: the first case that fails is the one explained
    _case("runaway", 1, N_("a cap of 1 pays for exactly one turn, runs its call, then stops with max_turns_exceeded")),
    _case("runaway", 2, N_("the cap is checked at the top of every turn, before the model is asked")),
    _case("two_at_once", 2, N_("a reply may ask for two calls: each call that runs is a tool run, and a capped run "
                               "has run every call of its last turn")),
    _case("plan", 3, N_("a reply without calls ends the run as completed, even on the turn that reaches the cap")),
    _case("plan", 2, N_("a cap below a run's natural end stops it there, its last calls run")),
    _case("runaway", 0, N_("a cap of 0 stops the run before its first turn: nothing is paid")),
    _case("runaway", 8, N_("the chapter's cap of 8: 3,431 input tokens, every turn resending the ones before it")),
    _case("answer", 1, N_("an answer on the first turn completes the run at a cap of 1")),
    _case("plan", 20, N_("a cap a run never reaches changes nothing")),
    _case("direct", 20, N_("a cap a run never reaches changes nothing")),
    _case("repeat", 20, N_("a cap a run never reaches changes nothing")),
    _case("slow", 20, N_("a cap a run never reaches changes nothing")),
)

KEYS = ("status", "turns", "tool_runs", "in", "out")


async def yours(pieces: dict, case: Case, url: str) -> dict:
    messages, ws = start(), workspace()
    got = await pieces["capped_loop"](served.address(case.args["script"], url, "02", case.name, "yours"),
                                      case.args["script"], messages, ws.tools(**QUICK_SCAN), max_turns=case.args["cap"])
    return {**returned(got, KEYS, "capped_loop"), "messages": messages}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    if case.args["cap"] == 0:  # the library refuses it; the chapter's check stops before the first turn
        return {"status": "max_turns_exceeded", "turns": 0, "tool_runs": 0, "in": 0, "out": 0, "messages": start()}
    tools = workspace().tools(**QUICK_SCAN)
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools,
                      Options(base_url=served.address(case.args["script"], url, "02", case.name, "library"),
                              max_turns=case.args["cap"]))
    owed = await answered(state, tools) if state.status == "max_turns_exceeded" else []
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs + len(owed),
            "in": state.prompt_tokens, "out": state.completion_tokens, "messages": state.messages + owed}


def _results(side: dict) -> int:
    """The tool results in a run's transcript: what really ran."""
    return sum(1 for m in side["messages"] if isinstance(m, dict) and m.get("role") == "tool")


def _capped(e: dict) -> bool:
    return e["status"] == "max_turns_exceeded"


HINTS = (
    Hint(N_("your loop never stopped the runaway: give it a second way out, `turns >= max_turns` checked at the top "
            "of every turn"), lambda c, e, y: y.get("hung") is not None),
    Hint(N_("a cap of 0 paid for a turn: the chapter checks `turns >= max_turns` at the top of the loop, before the "
            "call, so a run capped at 0 pays nothing"), lambda c, e, y: c.args["cap"] == 0 and y["turns"] != 0),
    Hint(N_("one turn past the cap: the run stops once `turns >= max_turns`, the cap reached, not passed (`>` lets one "
            "more turn through)"), lambda c, e, y: _capped(e) and y["turns"] == e["turns"] + 1),
    Hint(N_("the model had answered on the turn that reached the cap, and your loop did not call that completed: a "
            "reply without tool calls ends the run whatever the count; the cap is checked before the next call"),
         lambda c, e, y: e["status"] == "completed" and y["status"] != "completed"),
    Hint(N_("your loop stopped before running the calls of the turn it had paid for: the chapter checks the cap at the "
            "top of the loop, so a paid turn's calls run first (harness_lib leaves them owed, on purpose: "
            "notebook 04)"),
         lambda c, e, y: _capped(e) and y["turns"] == e["turns"] and y["tool_runs"] < e["tool_runs"]
         and _results(y) < _results(e)),
    Hint(N_("the status of a capped run is the chapter's word for it, `max_turns_exceeded`"),
         lambda c, e, y: _capped(e) and y["turns"] == e["turns"] and y["status"] != e["status"]),
    Hint(N_("`in` and `out` add up every turn's usage, `prompt_tokens` and `completion_tokens` of each reply"),
         lambda c, e, y: y["turns"] == e["turns"] and (y["in"], y["out"]) != (e["in"], e["out"])),
    Hint(N_("a tool run is one call of a tool: count each call the loop runs, once (a reply may ask for several)"),
         lambda c, e, y: y["turns"] == e["turns"] and y["tool_runs"] != e["tool_runs"]),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'completed', 'max_turns_exceeded', 'messages')
CHECK = Check("02-turn-cap", ("capped_loop",), CASES, (STATUS, TURNS, TOOL_RUNS, IN, OUT, TRANSCRIPT), yours,
              expected, HINTS)


async def check(capped_loop, url: str | None = None):
    """Run your ``capped_loop`` on every case of section 2 beside ``harness_lib``: a table, ``N of M cases pass``,
    and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, capped_loop=capped_loop)
