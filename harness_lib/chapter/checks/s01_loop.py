"""The check of notebook 01's piece, ``agent_loop(url, model, messages, tools)``: the chapter's loop (ask; append
the reply; run every call it asks for, appending each result under its call id; again, until a reply asks for
nothing), returning the answer and its tally (``turns``, ``tool_runs``, ``in``, ``out``, ``prompts``).

The cases: every script the loop finishes without a cap, error handling or approval (``answer``, ``plan``, the
chapter's run, ``direct``, ``repeat``, ``slow``), ``plan`` handed a transcript already under way (the model reads
its turn off the transcript, so the loop continues it), and two scripts of the check's own (served by ``served``):
``two_at_once`` asks for two reads in one reply and answers with what it was told, ``narrates`` says something
beside each call (a reply with content is not yet an answer). Expected is
``harness_lib.run`` on the same transcript and scripts, whose loop does the same three steps. Compared: the answer,
turns, tool runs, tokens, each request's prompt tokens, the transcript.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..checking import (
    ANSWER,
    IN,
    OUT,
    QUICK_SCAN,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    Shape,
    answered,
    start,
    workspace,
)
from ..language import N_, Text, _, number
from . import served


# -- the check's own scripts --------------------------------------------------------------------------------------
def narrates(t: int, _: str) -> dict:
    """Says what it is about to do beside each call: a reply with content that still asks for a tool."""
    from ...scripted.scripts import call, text
    if t == 0:
        return {"role": "assistant", "content": "Let me list the files first.",
                "tool_calls": [call("c1", "list_files", {})]}
    if t == 1:
        return {"role": "assistant", "content": "Now the error log.",
                "tool_calls": [call("c2", "read_file", {"path": "errors.log"})]}
    return text("errors.log mentions a timeout.")


served.OWN.update(narrates=narrates)


# -- the cases ------------------------------------------------------------------------------------------------
def _case(script: str, point: str, under_way: bool = False) -> Case:
    # the script's name stays English: a value of the message, or alone a template no catalogue has, so that `_()`
    # shows it as it is (`answer` is a message: a field's label)
    name = Text(N_("{script}, a transcript under way") if under_way else "{script}", script=script)
    return Case(name, point, {"script": script, "under_way": under_way})


CASES = (  # the first case that fails is the one explained
    _case("plan", N_("the chapter's run: 3 turns, 2 tool runs, 815 tokens in (204, 269, 342), 70 out")),
    _case("answer", N_("a reply that asks for nothing ends the loop: its content is the answer")),
    _case("direct", N_("each call's result goes into the transcript under its call id, then the model is asked again")),
    _case("repeat", N_("a call asked for twice is run twice: the loop runs whatever a reply asks for")),
    _case("two_at_once", N_("a reply may ask for several calls: the loop runs every one, in order, each result under "
             "its own call id")),
    _case("narrates", N_("a reply that says something and asks for a tool is not an answer: only a reply without "
             "tool calls ends the loop")),
    _case("plan", N_("the loop grows the transcript it is given: the model reads its turn off it, so a transcript "
             "under way is continued, not started again"), under_way=True),
    _case("slow", N_("a slow tool is awaited like any other")),
)


async def _messages(case: Case) -> list[dict]:
    """The case's transcript to start from: the system prompt and the task, and, under way, plan's first turn and
    its result (``list_files`` run on a copy of the workspace)."""
    messages = start()
    if case.args["under_way"]:
        from ...scripted.scripts import plan
        messages.append(plan(0, ""))
        messages += await answered(SimpleNamespace(messages=messages), workspace().tools())
    return messages


def _url(case: Case, url: str) -> str:
    return served.url("01-loop", case.name) if case.args["script"] in served.OWN else url


async def yours(pieces: dict, case: Case, url: str) -> dict:
    messages = await _messages(case)
    got = await pieces["agent_loop"](_url(case, url), case.args["script"], messages, workspace().tools(**QUICK_SCAN))
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], dict)):
        raise Shape(Text(N_("`agent_loop` returned {kind}: return the answer and the tally, "
                            "`return reply[\"message\"][\"content\"], tally`"), kind=type(got).__name__))
    answer, tally = got
    missing = [k for k in ("turns", "tool_runs", "in", "out", "prompts") if k not in tally]
    if missing:
        raise Shape(Text(N_("the tally `agent_loop` returned has no {keys}"), keys=", ".join(repr(k) for k in missing)))
    return {"answer": answer, **{k: tally[k] for k in ("turns", "tool_runs", "in", "out", "prompts")},
            "messages": messages}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    state = new_run(SYSTEM_PROMPT, TASK, case.args["script"])
    state.messages = await _messages(case)
    state = await run(state, workspace().tools(**QUICK_SCAN), Options(base_url=_url(case, url), max_turns=50))
    return {"answer": state.output, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "prompts": [t["prompt_tokens"] for t in state.per_turn],
            "messages": state.messages}


# TRANSLATORS: "prompts 204, 269, 342": each request's prompt tokens, in a check's table
PROMPTS = Field("prompts", show=lambda p: _("prompts {tokens}").format(tokens=", ".join(number(n) for n in p))
                if isinstance(p, list) and all(isinstance(n, int) for n in p) else _("prompts") + f"={p!r}",
                label=N_("each request's prompt tokens"))


def _calls(messages) -> list:
    return [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


def _results(messages) -> list:
    return [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]


HINTS = (
    Hint(N_("your loop never ended: append each reply to `messages` (the scripted model counts its turns from the "
            "assistant messages there), and return once a reply asks for no tool"), lambda c, e, y: y.get("hung")),
    Hint(N_("the loop must grow the list it is given: append to `messages` itself, not to a copy or a list of "
            "your own (the caller reads the transcript from it)"),
         lambda c, e, y: len(y["messages"]) == len(start()) + 2 * c.args["under_way"]),
    Hint(N_("append the model's reply to `messages` as it came, before running its calls: the transcript is the "
            "whole conversation, and the model reads its turn off it"),
         lambda c, e, y: not any(m.get("role") == "assistant" for m in y["messages"][len(start()):])),
    Hint(N_("only a reply without tool calls ends the loop (`if not calls: return ...`): a reply may say something "
            "and ask for a tool in the same message"), lambda c, e, y: c.args["script"] == "narrates"
         and y["turns"] < e["turns"]),
    Hint(N_("run every call a reply asks for, `for call in calls`, each result appended under its own "
            "`tool_call_id`"), lambda c, e, y: len(_results(y["messages"])) < len(_calls(y["messages"]))
         or y["tool_runs"] < e["tool_runs"]),
    Hint(N_("each tool result is a message `{\"role\": \"tool\", \"tool_call_id\": call[\"id\"], \"name\": ..., "
            "\"content\": result}`: the call id is how the model matches a result to its call"),
         lambda c, e, y: [(m.get("tool_call_id"), m.get("name"), m.get("content")) for m in _results(y["messages"])]
         != [(m["tool_call_id"], m["name"], m["content"]) for m in _results(e["messages"])]),
    Hint(N_("the answer is the content of the reply that asked for nothing, returned with the tally: "
            "`return reply[\"message\"][\"content\"], tally`"), lambda c, e, y: y["answer"] != e["answer"]
         and y["turns"] == e["turns"]),
    Hint(N_("`in` and `out` add up every turn's usage (`prompt_tokens`, `completion_tokens` of each reply), and "
            "`prompts` keeps each request's prompt tokens, one a turn"), lambda c, e, y: y["turns"] == e["turns"]
         and (y["in"], y["out"], y["prompts"]) != (e["in"], e["out"], e["prompts"])),
    Hint(N_("a turn is one request to the model, counted once however many calls its reply asks for; a tool run is "
            "one call run"), lambda c, e, y: (y["turns"], y["tool_runs"]) != (e["turns"], e["tool_runs"])),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('turns', 'tool_runs', 'in', 'out', 'prompts', 'role', 'tool_call_id', 'name', 'content')
CHECK = Check("01-loop", ("agent_loop",), CASES, (ANSWER, TURNS, TOOL_RUNS, IN, OUT, PROMPTS, TRANSCRIPT), yours,
              expected, HINTS)


async def check(agent_loop, url: str | None = None):
    """Run your ``agent_loop`` on every case of section 1 beside ``harness_lib``: a table, ``N of M cases pass``,
    and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop)
