"""The check of notebook 05's piece, the catch block of ``agent_loop(url, model, messages, tools, policy,
max_turns)``: a tool that raises becomes, by ``policy``, the end of the run (``fatal``: ``failed``, the error
naming the tool), a slot that says only that the call failed (``generic``) or one that says what happened in the
error's own words (``descriptive``); Stop (``asyncio.CancelledError``, not an ``Exception``) goes through.

The cases: ``recover`` (a missing file, an error the model can act on) and ``forbidden`` (a read no message can
fix) under each policy, at the chapter's caps; Stop pressed while ``scan_archive`` runs; and the scripts whose
tools never fail (``plan``, ``direct``, ``repeat``, ``answer``, ``runaway`` at a cap of 8), under a policy each.
Expected is ``harness_lib.run`` with ``Options(tool_errors=policy, max_turns=cap)``, whose loop checks the cap where
the notebook's does, with two differences the notebook names: under ``fatal`` the library also writes the error
into the call's slot, which the chapter's loop leaves empty (either is taken); and a run stopped ends the library's
``interrupted``, where the notebook's loop lets ``CancelledError`` out (both are shown as "stopped", what each
sent and was billed read off the transcript and the provider, ``served``).
"""

from __future__ import annotations

import asyncio
import dataclasses

from ..checking import (
    ANSWER,
    COST,
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
    ending,
    returned,
    same,
    start,
    workspace,
)
from ..language import N_, Text, _
from . import served

GENERIC = "Error: the tool call failed."
STOPPED = "interrupted"   # a run Stop ended: the cancellation came out of the loop, or the library returned
NEVER_FAIL = ("plan", "direct", "repeat", "answer", "runaway")   # scripts whose tools never fail


def _case(script: str, policy: str, cap: int, point: str, stop: bool = False) -> Case:
    name = Text(N_("{script}, {policy}, cap {cap}, Stop during the scan") if stop else
                N_("{script}, {policy}, cap {cap}"), script=script, policy=policy, cap=cap)   # names stay English
    return Case(name, point, {"script": script, "policy": policy, "cap": cap, "stop": stop})


CASES = (  # the first case that fails is the one explained
    _case("recover", "fatal", 20,
          N_("under `fatal` the first failure ends the run, failed, before the model reads it")),
    _case("recover", "generic", 20, N_("under `generic` the slot says only that the call failed: told nothing it can "
             "act on, the model gives up politely")),
    _case("recover", "descriptive", 20, N_("under `descriptive` the slot is the error's own words: recover reads "
             "\"Call list_files\", does so, and answers (4.7 times the cost of fatal, the only answer)")),
    _case("forbidden", "descriptive", 12, N_("an error no message can fix is retried until the cap: 12 turns, 11 tool "
             "runs, $0.018622 and no answer")),
    _case("forbidden", "fatal", 12, N_("every exception a tool raises is the policy's: a read the process may not "
             "perform ends a fatal run as the missing file does")),
    _case("forbidden", "generic", 12, N_("under `generic` the forbidden read is retried to the cap too")),
    _case("slow", "descriptive", 20, N_("Stop arrives as `asyncio.CancelledError`, not an `Exception`: the catch block "
             "lets it through and the run ends there"), stop=True),
    _case("plan", "generic", 20, N_("a call that succeeds goes into the transcript as it is, whatever the policy")),
    _case("direct", "fatal", 20, N_("`fatal` ends a run only when a tool fails")),
    _case("repeat", "descriptive", 20,
          N_("a call that succeeds goes into the transcript as it is, whatever the policy")),
    _case("answer", "fatal", 20, N_("a run without tool calls has nothing to catch")),
    _case("runaway", "descriptive", 8, N_("the cap still ends a run whose tools never fail")),
)

KEYS = ("status", "turns", "tool_runs", "in", "out", "cost_usd", "answer", "error")


def either(chapter: list, filled: list) -> dict:
    """A fatal run's transcript, two ways right: the chapter's (the failed call's slot empty) and the library's (the
    slot says the error). Plain data, as everything a check compares."""
    return {"either": [chapter, filled]}


def _one(messages):
    """The chapter's way of a transcript that may be two ways right."""
    return messages["either"][0] if isinstance(messages, dict) and "either" in messages else messages


def _tools(case: Case, started: asyncio.Event | None):
    """The workspace's tools on a fresh copy; with ``started``, ``scan_archive`` sets it as it begins (and takes a
    second, so that Stop finds it running)."""
    tools = workspace().tools(**(QUICK_SCAN if started is None else {"seconds": 1.0, "every": 400}))
    if started is None:
        return tools

    def heard(tool):
        async def run(args, ctx):
            started.set()
            return await tool.run(args, ctx)
        return dataclasses.replace(tool, run=run)
    return [heard(t) if t.name == "scan_archive" else t for t in tools]


async def _stopped(job, started: asyncio.Event) -> tuple[bool, object]:
    """Run ``job`` as a task and cancel it once the scan has started, as the toolbar's Stop does. (True, None) if
    the cancellation came out of it, else (False, what it returned)."""
    task = asyncio.ensure_future(job)
    waiting = asyncio.ensure_future(started.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    task.cancel("user pressed Stop")
    try:
        return False, await task
    except asyncio.CancelledError:
        if ending():   # the check's own deadline, or the cell's Stop, not the case's
            raise
        return True, None


def _observed(messages: list, bills: list[dict], status: str) -> dict:
    """A stopped run's fields, read the same way on both sides: the turns and tokens the provider billed, the
    results the transcript holds."""
    from ...pricing import CHAPTER_PRICES

    p, c = sum(b["prompt_tokens"] for b in bills), sum(b["completion_tokens"] for b in bills)
    return {"status": status, "turns": len(bills), "in": p, "out": c, "cost_usd": CHAPTER_PRICES.cost(p, c),
            "tool_runs": sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool"),
            "answer": "", "error": None}


async def yours(pieces: dict, case: Case, url: str) -> dict:
    a, messages = case.args, start()
    address, started = served.url("05-tool-errors", case.name, "yours"), asyncio.Event() if a["stop"] else None
    job = pieces["agent_loop"](address, a["script"], messages, _tools(case, started), a["policy"],
                               max_turns=a["cap"])
    if not a["stop"]:
        return {**returned(await job, KEYS, "agent_loop"), "messages": messages}
    stopped, got = await _stopped(job, started)
    status = STOPPED if stopped else returned(got, KEYS, "agent_loop")["status"]
    return {**_observed(messages, served.billed(address), status), "messages": messages}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    a, address = case.args, served.url("05-tool-errors", case.name, "library")
    started = asyncio.Event() if a["stop"] else None
    job = run(new_run(SYSTEM_PROMPT, TASK, a["script"]), _tools(case, started),
              Options(base_url=address, tool_errors=a["policy"], max_turns=a["cap"]))
    if a["stop"]:
        state = (await _stopped(job, started))[1]
        return {**_observed(state.messages, served.billed(address), STOPPED), "messages": state.messages}
    state = await job
    messages = state.messages
    if state.status == "failed":   # the chapter's loop leaves the failed call's slot empty; the library fills it
        messages = either(state.messages[:-1], state.messages)
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.own_cost_usd, "answer": state.output or "",
            "error": state.error, "messages": messages}


def _either(e, y) -> bool:
    return any(same(y, one) for one in e["either"]) if isinstance(e, dict) and "either" in e else same(y, e)


ERROR = Field("error", show=lambda x: _("no error") if not x else _("error {error}").format(
    error=repr(x) if len(str(x)) <= 40 else f"{str(x)[:37]!r}..."), label=N_("error"))
EITHER = dataclasses.replace(TRANSCRIPT, same=_either, show=lambda m: TRANSCRIPT.show(_one(m)),
                             describe=lambda e, y: TRANSCRIPT.describe(_one(e), y))


def _results(messages) -> list:
    return [m.get("content") for m in _one(messages) if isinstance(m, dict) and m.get("role") == "tool"]


def _slots_differ(e: dict, y: dict) -> bool:
    return _results(y["messages"])[:1] != _results(e["messages"])[:1]


HINTS = (
    Hint(N_("your loop did not end: the catch block decides what one failed call becomes, then the loop goes on (or, "
            "under `fatal`, returns)"), lambda c, e, y: y.get("hung") and not c.args["stop"]),
    Hint(N_("under `fatal` the run ends, it does not raise: return it `failed`, its `error` saying which tool failed "
            "and why, `{**run, 'status': 'failed', 'error': f\"{tool.name}: {error}\"}`"),
         lambda c, e, y: c.args["policy"] == "fatal" and y.get("raised") and "CancelledError" not in y["raised"]
         and e["status"] == "failed"),
    Hint(N_("a tool's failure escaped your loop: catch every `Exception` a tool raises (`except Exception as error:`), "
            "not one kind of it, and let the policy decide what it becomes"),
         lambda c, e, y: y.get("raised") and "CancelledError" not in y["raised"]),
    Hint(N_("Stop arrives as `asyncio.CancelledError`, which is not an `Exception`: catch `Exception`, never "
            "everything (a bare `except:` or `except BaseException`), so that Stop ends the run instead of becoming a "
            "tool error"), lambda c, e, y: c.args["stop"] and y["status"] != e["status"]),
    Hint(N_("under `fatal` a failed call ends the run at once, `failed`, before the model reads anything"),
         lambda c, e, y: e["status"] == "failed" and y["status"] != "failed"),
    Hint(N_("under `fatal` the run's `error` says which tool failed and why, `f\"{tool.name}: {error}\"`, as "
            "harness_lib's `state.error` does"), lambda c, e, y: e["status"] == y["status"] == "failed"
         and e["error"] != y["error"]),
    Hint(N_("only `fatal` ends the run: under `generic` and `descriptive` the failure goes into the call's slot and "
            "the loop goes on"), lambda c, e, y: y["status"] == "failed" and e["status"] != "failed"),
    Hint(N_("under `generic` the slot says only that the call failed, `GENERIC`, not why: that is the policy the "
            "chapter measures, the model told nothing it can act on"),
         lambda c, e, y: c.args["policy"] == "generic" and _slots_differ(e, y)),
    Hint(N_("under `descriptive` the slot is the error's own words, `f\"Error: {error}\"`: recover reads \"Call "
            "list_files to see what exists\" there, and does so"), lambda c, e, y: c.args["policy"] == "descriptive"
         and _slots_differ(e, y)),
    Hint(N_("a fatal run's failed call may leave its slot empty, as the chapter's loop does, or fill it with the error "
            "in its own words, `f\"Error: {error}\"`, as harness_lib does: nothing else"), lambda c, e, y:
         e["status"] == y["status"] == "failed" and not _either(e["messages"], y["messages"])),
    Hint(N_("a call that succeeds goes into its slot as it is, whatever the policy: the policy is for failures"),
         lambda c, e, y: c.args["script"] in NEVER_FAIL and _results(y["messages"]) != _results(e["messages"])),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'answer', 'error', 'failed', 'fatal', 'generic',
            'descriptive', 'GENERIC')
CHECK = Check("05-tool-errors", ("agent_loop",), CASES, (STATUS, TURNS, TOOL_RUNS, IN, OUT, COST, ANSWER, ERROR,
                                                          EITHER), yours, expected, HINTS)


async def check(agent_loop, url: str | None = None):
    """Run your ``agent_loop``'s catch block on every case of section 5 beside ``harness_lib``: a table, ``N of M
    cases pass``, and for the first case that fails, what differs and what to change. (The runs go through a
    provider of the check's own, which bills each request: ``url`` is not used.)"""
    return await CHECK.run(url, agent_loop=agent_loop)
