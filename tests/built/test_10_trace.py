"""Notebook 10's ``trace_to`` and traced loop, as the notebook writes them, beside ``harness_lib``'s ``Trace``.

The small loop has no error policy, cap or subagent tool, and stops at a call that needs approval: it applies to
the scripts that answer or stop for approval without those (plan, direct, repeat, answer, slow, destructive,
delete_twice). On each, both traces must hold the same events in the same order, every field of the notebook's
line in the library's with the same value (``ms`` aside: a time), the library adding only the call id on
``tool_result``; and the runs must agree on status, turns, tool runs, tokens and dollars. On the approval run the
notebook's file must be the chapter's six lines."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.chapter import s10_trace as s10
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

APPLIES = ("plan", "direct", "repeat", "answer", "slow", "destructive", "delete_twice")
ADDS = {"tool_result": {"callId"}}  # what the library writes beyond the chapter's fields


@pytest.fixture(scope="module")
def built():
    return load("10-trace")


def traced(built, url, scenario, tmp_path, run_id="n1"):
    path = tmp_path / "mine.jsonl"
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools(seconds=0.06),
                                           built["trace_to"](path), run_id))
    return mine, read(path), messages


@pytest.mark.parametrize("scenario", APPLIES)
def test_the_notebooks_trace_and_the_librarys_agree_line_by_line(built, url, scenario, tmp_path):
    mine, lines, messages = traced(built, url, scenario, tmp_path)
    trace = Trace(tmp_path / "library.jsonl", timestamps=False)
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario, run_id="n1"),
                            Workspace.copy_of().tools(seconds=0.06), Options(base_url=url, trace=trace)))
    events = read(tmp_path / "library.jsonl")
    assert [e["type"] for e in lines] == [e["type"] for e in events]
    for a, b in zip(lines, events):
        assert {k: v for k, v in a.items() if k != "ms"} == {k: v for k, v in b.items() if k in a and k != "ms"}
        assert set(b) - set(a) == ADDS.get(a["type"], set()), a["type"]
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert round(mine["cost_usd"], 6) == round(state.total_cost_usd, 6)
    assert messages == state.messages
    assert "tool_progress" in {e["type"] for e in lines} or scenario != "slow"


def test_the_notebooks_trace_of_the_approval_run_is_the_chapters(built, url, tmp_path):
    _, lines, _ = traced(built, url, "destructive", tmp_path)
    assert s10.trace_figures(lines) == {"trace.lines": 6}
    diff = s10.trace_diff(lines, s10.chapter_trace())
    assert diff["same"].all() and len(diff) == 30
