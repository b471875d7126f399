"""The check of notebook 14's pieces: ``ai``'s stop predicates in Python, ``step_count_is(n)``, ``has_tool_call(name)``
and the reader's own ``called_at_least(name, n)``, and the exit of ``agent_loop(url, model, messages, tools,
stop_when)``: after each step (a model call and the tools it asked for), any one predicate true of the steps so far
ends the run.

Each case runs the reader's loop with a list of the reader's predicates on a script the loop applies to (no error
policy, no approval): each predicate alone, at 1 and at more steps, one that never fires, several at once (the
first true one wins, whichever it is), none at all, and a run that answers before a predicate would fire. Expected
is ``harness_lib.run`` with the twin conditions (``stops.max_turns``, ``stops.tool_called``, ``stops.when`` on the
tool log), plus what the chapter's order adds, as notebook 14 shows it: the library checks its turn cap before it
runs the calls a reply asked for and leaves them owed; ``ai``'s loop, and so yours, runs them and then asks the
predicates, so they are counted run. The status is the loop's word: ``completed`` for an answer, ``stopped``
whichever predicate fired (the library names the condition: ``max_turns_exceeded`` or ``interrupted``).
"""

from __future__ import annotations

from ..checking import (
    IN,
    OUT,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    answered,
    returned,
    start,
    workspace,
)
from ..language import N_, Text, _
from . import served


def _case(script: str, *predicates: tuple, point: str) -> Case:
    said = ", ".join(f"{p[0]}({', '.join(repr(a) for a in p[1:])})" for p in predicates)
    # TRANSLATORS: a case's name: "runaway, stop when step_count_is(2)": the script, then the predicates, as code
    name = Text(N_("{script}, stop when {predicates}"), script=script, predicates=said) if said else \
        Text(N_("{script}, stop when nothing"), script=script)
    return Case(name, point, {"script": script, "predicates": predicates})


CASES = (  # the first case that fails is the one explained: each predicate alone, then the list, then the edges
    _case("runaway", ("step_count_is", 2), point=N_("the step count is asked after each step, its tools run")),
    _case("runaway", ("step_count_is", 1), point=N_("a step count of 1 ends the run after its first step")),
    _case("plan", ("has_tool_call", "read_file"), point=N_("has_tool_call is true once the last step called the tool")),
    _case("plan", ("has_tool_call", "list_files"), point=N_("has_tool_call is true of the step that called the tool")),
    _case("runaway", ("called_at_least", "list_files", 3),
          point=N_("called_at_least counts every call of the tool in the run, and fires at n")),
    _case("runaway", ("step_count_is", 8), ("called_at_least", "list_files", 3),
          point=N_("any one true predicate stops the run: your own fires at 3, before the step count of 8")),
    _case("runaway", ("step_count_is", 3), ("called_at_least", "list_files", 10),
          point=N_("any one true predicate stops the run, the first in the list as well as the last")),
    _case("runaway", ("step_count_is", 8), ("has_tool_call", "list_files"),
          point=N_("has_tool_call('list_files') is true after the first step, whatever the step count says")),
    _case("repeat", ("called_at_least", "read_file", 2), point=N_("the same call asked twice is two calls")),
    _case("two_at_once", ("called_at_least", "read_file", 2),
          point=N_("two calls of a tool in one step are two calls: called_at_least counts calls, not steps")),
    _case("slow", ("has_tool_call", "scan_archive"), point=N_("a predicate on the slow tool fires once it has run")),
    _case("plan", point=N_("with no predicate at all, only an answer ends the run")),
    _case("plan", ("step_count_is", 3), point=N_("a reply that asks for nothing ends the run, before any predicate")),
    _case("answer", ("step_count_is", 1), point=N_("an answer on the first step completes the run")),
    _case("direct", ("has_tool_call", "list_files"), point=N_("a predicate that never comes true changes nothing")),
    _case("runaway", ("step_count_is", 8), point=N_("the chapter's stepCountIs(8): eight steps, their calls run")),
)

KEYS = ("status", "turns", "tool_runs", "in", "out")


async def yours(pieces: dict, case: Case, url: str) -> dict:
    messages, asked = start(), []
    stop_when = [pieces[name](*args) for name, *args in case.args["predicates"]]
    if stop_when:   # the first predicate, asked first, also notes how many steps it was asked about
        stop_when[0] = _noting(stop_when[0], asked)
    got = await pieces["agent_loop"](served.address(case.args["script"], url, "14", case.name, "yours"),
                                     case.args["script"], messages, workspace().tools(seconds=0.05), stop_when)
    return {**returned(got, KEYS, "agent_loop"), "asked": asked, "messages": messages}


def _noting(predicate, asked: list):
    def noted(steps):
        asked.append(len(steps) if hasattr(steps, "__len__") else steps)
        return predicate(steps)
    return noted


def _condition(name: str, *args):
    from ... import stops
    if name == "step_count_is":
        return stops.max_turns(*args)
    if name == "has_tool_call":
        return stops.tool_called(*args)
    tool, n = args
    return stops.when(lambda s: sum(r["toolName"] == tool for r in s.tool_log) >= n, f"{tool} called {n} times")


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    tools = workspace().tools(seconds=0.05)
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools,
                      Options(base_url=served.address(case.args["script"], url, "14", case.name, "library"),
                              stops=[_condition(*p) for p in case.args["predicates"]]))
    owed = await answered(state, tools)   # at the library's turn cap: the calls it left owed, run as yours does
    steps = sum(1 for m in state.messages if m["role"] == "assistant" and m.get("tool_calls"))
    return {"status": "completed" if state.status == "completed" else "stopped", "turns": state.turns,
            "tool_runs": state.tool_runs + len(owed), "in": state.prompt_tokens, "out": state.completion_tokens,
            "asked": list(range(1, steps + 1)) if case.args["predicates"] else [], "messages": state.messages + owed}


def _asked(a) -> str:
    if not isinstance(a, list) or not a:
        return _("never asked") if a == [] else repr(a)
    if a == list(range(a[0], a[-1] + 1)) and len(a) > 2:
        return _("asked after steps {first} to {last}").format(first=a[0], last=a[-1])
    if len(a) > 1:
        return _("asked after steps {steps}").format(steps=", ".join(map(str, a)))
    return _("asked after step {step}").format(step=a[0])


ASKED = Field("asked", show=_asked, describe=lambda e, y: _(
    "the predicates were {expected} (the number of steps they were shown), yours {yours}").format(
    expected=_asked(e), yours=_asked(y)))


def _names(c: Case) -> set[str]:
    return {p[0] for p in c.args["predicates"]}


def _late(c: Case, e: dict, y: dict) -> bool:
    return e["status"] == "stopped" and isinstance(y["turns"], int) and y["turns"] > e["turns"]


NEVER = {
    "step_count_is": N_("step_count_is(n) is true once n steps have run, `len(steps) == n`"),
    "has_tool_call": N_("has_tool_call(name) is true when the last step called `name`"),
    "called_at_least": N_("called_at_least(name, n) counts every call of `name` in every step so far, true at n"),
}

HINTS = (
    Hint(N_("your loop never stopped: after each step, ask every predicate in `stop_when` about the steps so far and "
            "return once one says yes"), lambda c, e, y: y.get("hung") is not None and len(_names(c)) > 1),
    *(Hint(Text(N_("your loop never stopped: {says}; or your loop never asked it (after each step, ask every "
                   "predicate in `stop_when`)"), says=Text(says)),
           lambda c, e, y, name=name: y.get("hung") is not None and _names(c) == {name})
      for name, says in NEVER.items()),
    Hint(N_("the predicates were asked before the step was added to `steps`: each step goes into `steps` as soon as "
            "its tools have run, and only then are the predicates asked"),
         lambda c, e, y: y["asked"] and e["asked"] and y["asked"][0] < e["asked"][0]),
    Hint(N_("with no predicate, nothing stops the run but an answer: `any` of an empty list is false (`all` of it is "
            "true)"), lambda c, e, y: not c.args["predicates"] and y["status"] != e["status"]),
    Hint(N_("any one true predicate stops the run (`any`), not all of them together"),
         lambda c, e, y: len(c.args["predicates"]) > 1 and _late(c, e, y)),
    Hint(N_("your loop stopped before running the step's tools: ai asks its predicates after each step, a model call "
            "and the tools it asked for, so a stopped run has run its last calls"),
         lambda c, e, y: y["turns"] == e["turns"] and y["tool_runs"] < e["tool_runs"]),
    Hint(N_("a reply that asks for nothing ends the run as `completed`, before any predicate is asked"),
         lambda c, e, y: e["status"] == "completed" and y["status"] == "stopped"),
    Hint(N_("the run's status is the loop's word for how it ended: `stopped` when a predicate said yes, `completed` "
            "for an answer"), lambda c, e, y: y["turns"] == e["turns"] and y["status"] != e["status"]),
    Hint(N_("step_count_is(n) is true once n steps have run: `len(steps) == n` (count the step before asking)"),
         lambda c, e, y: _names(c) == {"step_count_is"} and y["turns"] != e["turns"]),
    Hint(N_("has_tool_call(name) is true when the last step, `steps[-1]`, called `name`: compare each call's "
            "`call['function']['name']`"), lambda c, e, y: _names(c) == {"has_tool_call"} and y["turns"] != e["turns"]),
    Hint(N_("called_at_least(name, n) counts every call of `name` in every step so far, and is true once the count "
            "reaches n (`>=`)"), lambda c, e, y: _names(c) == {"called_at_least"} and y["turns"] != e["turns"]),
    Hint(N_("`in` and `out` add up every step's usage"), lambda c, e, y: (y["in"], y["out"]) != (e["in"], e["out"])),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'completed', 'stopped', 'tool_calls', 'usage')
CHECK = Check("14-libraries", ("agent_loop", "step_count_is", "has_tool_call", "called_at_least"), CASES,
              (STATUS, TURNS, TOOL_RUNS, ASKED, IN, OUT, TRANSCRIPT), yours, expected, HINTS)


async def check(agent_loop, step_count_is, has_tool_call, called_at_least, url: str | None = None):
    """Run your ``agent_loop`` with your predicates on every case of section 14 beside ``harness_lib``'s stop
    conditions: a table, ``N of M cases pass``, and for the first case that fails, what differs and what to
    change."""
    return await CHECK.run(url, agent_loop=agent_loop, step_count_is=step_count_is, has_tool_call=has_tool_call,
                           called_at_least=called_at_least)
