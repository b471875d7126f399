"""Notebook 13's research tool, as the notebook writes it, beside ``harness_lib.subagent.research_tool``.

The parent is the ``delegate`` script, run by ``harness_lib.run`` with one tool or the other; the child runs every
script (each one is a possible child: a child that answers, runs away, recovers, stops for approval, fails, scans
slowly, or asks for a tool it does not have), under the chapter's limits and under tighter ones, and a slow child
is stopped at an event of the run (its scan's k-th progress line, seen in the parent's trace). Both trees must
agree on the parent's status and interruption, turns, tool runs, tokens, own and total dollars and transcript, and
on the child's status, turns, spend and window."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib import subagent
from harness_lib.loop import Options, run
from harness_lib.scripted.scripts import SCRIPTS
from harness_lib.state import new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FAST = 0.06  # the scan's three seconds, shortened alike on both sides
CASES = [(child, {}, None) for child in SCRIPTS] + [
    ("runaway", {"max_turns": 2}, None), ("runaway", {"max_budget_usd": 0.003}, None),
    ("plan", {"max_budget_usd": 0.001}, None), ("slow", {}, 1), ("slow", {}, 6)]


@pytest.fixture(scope="module")
def built():
    return load("13-subagent")


def tree(url, make_research, child, limits, stop_at_progress):
    """The delegate parent with the research tool ``make_research`` builds; Stop at the child's k-th progress."""
    ws = Workspace.copy_of()
    child_tools = ws.tools(seconds=FAST)
    research = make_research(child_tools, url, child, **limits)

    async def go():
        seen = []

        def on_event(event):
            if event["type"] == "tool_progress":
                seen.append(event)
                if len(seen) == stop_at_progress:
                    task.cancel("user pressed Stop")

        task = asyncio.ensure_future(run(new_run(SYSTEM_PROMPT, TASK, "delegate"), [research, *child_tools],
                                         Options(base_url=url, trace=Trace(timestamps=False, on_event=on_event))))
        return await task
    return asyncio.run(go())


@pytest.mark.parametrize("child, limits, stop_at", CASES,
                         ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={w}" for k, w in v.items())
                         if isinstance(v, dict) else f"stop{v}")
def test_the_notebooks_research_tool_and_the_librarys_agree(built, url, child, limits, stop_at):
    mine = tree(url, built["research_tool"], child, limits, stop_at)
    state = tree(url, lambda tools, u, model, **kw: subagent.research_tool(tools, u, model, **kw), child, limits,
                 stop_at)
    assert (mine.status, mine.interruption, mine.turns, mine.tool_runs, mine.prompt_tokens, mine.completion_tokens) \
        == (state.status, state.interruption, state.turns, state.tool_runs, state.prompt_tokens,
            state.completion_tokens)
    assert (mine.own_cost_usd, mine.total_cost_usd) == (state.own_cost_usd, state.total_cost_usd)
    assert mine.messages == state.messages
    (a,), (b,) = mine.subruns, state.subruns
    assert {k: v for k, v in a.items() if k != "runId"} == {k: v for k, v in b.items() if k != "runId"}
    if stop_at is not None:
        assert (state.status, a["status"]) == ("interrupted", "interrupted")  # one Stop ended the tree
        assert state.interruption == {"type": "cancelled", "reason": "user pressed Stop"}


def test_the_notebooks_child_has_its_own_limits(built, url):
    """The chapter's limits: a runaway child stops at its own cap of 6; the parent pays for it and completes."""
    state = tree(url, built["research_tool"], "runaway", {}, None)
    (child,) = state.subruns
    assert (child["status"], child["turns"], state.status) == ("max_turns_exceeded", 6, "completed")
    assert state.total_cost_usd == pytest.approx(state.own_cost_usd + child["costUsd"])
    assert "no result: the research run ended max_turns_exceeded" in [m["content"] for m in state.messages]
