"""Notebook 15's loop, as the notebook writes it, beside ``harness_lib.run``; and its window, beyond the chapter.

Without a window the notebook's loop (01's, with a turn cap and 05's error text) must be the library's on every
script it can run alone (no approval, no subagent): the same status, turns, tool runs, tokens (each request's
too), dollars, answer and transcript. With the window, what changes is only what each request sends: the
transcript the loop keeps is the same, every request is what the window made of it, and the difference is the
measurement the notebook shows (what it saves on the runaway, and the run it changes: ``recover``)."""

from __future__ import annotations

import asyncio
import copy

import pytest
from built_cells import load

from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run
from harness_lib.tokens import prompt_tokens
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

# script, turn cap: every script the loop applies to (destructive and delete_twice need approval, delegate a
# subagent), the runaway capped twice (the chapter's 8, and a cap that ends on a tool call), forbidden capped
CASES = [("plan", 20), ("runaway", 8), ("runaway", 13), ("recover", 20), ("direct", 20), ("repeat", 20),
         ("answer", 20), ("forbidden", 12), ("plan", 2), ("recover", 1)]


@pytest.fixture(scope="module")
def built():
    return load("15-what-is-left")


def task() -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]


def mine_and_library(built, url, scenario, cap, window=None):
    messages = task()
    mine = asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools(), cap, window))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(),
                            Options(base_url=url, max_turns=cap)))
    return mine, messages, state


def agree(mine, messages, state):
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["prompts"] == [t["prompt_tokens"] for t in state.per_turn]
    assert mine["cost_usd"] == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert mine["answer"] == state.output and messages == state.messages


@pytest.mark.parametrize("scenario, cap", CASES, ids=[f"{s}-cap{c}" for s, c in CASES])
def test_without_a_window_the_notebooks_loop_is_the_library(built, url, scenario, cap):
    agree(*mine_and_library(built, url, scenario, cap))


@pytest.mark.slow
def test_without_a_window_the_slow_scan_too(built, url):
    agree(*mine_and_library(built, url, "slow", 20))


@pytest.mark.parametrize("scenario, cap", [("runaway", 13), ("plan", 20), ("forbidden", 12)])
def test_the_window_changes_what_is_sent_and_nothing_else(built, url, scenario, cap):
    """Scripts that do not read what the window drops: the same run (transcript included), each request exactly
    the window's view of the transcript so far, and every request after the second smaller."""
    window = built["drop_old_tool_results"](1, "(dropped)")
    mine, messages, state = mine_and_library(built, url, scenario, cap, window)
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["out"], mine["answer"]) == \
        (state.status, state.turns, state.tool_runs, state.completion_tokens, state.output)
    assert messages == state.messages                       # the transcript kept is whole
    schemas = [t.schema() for t in Workspace.copy_of().tools()]
    asked = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert mine["prompts"] == [prompt_tokens(window(messages[:i]), schemas) for i in asked]
    full = [t["prompt_tokens"] for t in state.per_turn]
    assert mine["prompts"][:2] == full[:2] and all(w < f for w, f in zip(mine["prompts"][2:], full[2:]))
    assert mine["in"] < state.prompt_tokens and mine["cost_usd"] < state.own_cost_usd


def test_the_window_costs_recover_its_answer(built, url):
    """``recover`` acts on the first error's text; once that result is older than the newest, the window sends
    the placeholder instead and the model gives up: fewer tokens, no answer. Kept whole, it answers."""
    forgets = built["drop_old_tool_results"](1, "(dropped)")
    mine, _, state = mine_and_library(built, url, "recover", 20, forgets)
    assert (state.status, state.turns, state.output) == ("completed", 4, "errors.log mentions a timeout.")
    assert (mine["status"], mine["turns"], mine["answer"]) == \
        ("completed", 3, "I could not read the file, so I do not know.")
    assert mine["in"] < state.prompt_tokens
    keeps = built["drop_old_tool_results"](3, "(dropped)")   # recover never has more than three results
    agree(*mine_and_library(built, url, "recover", 20, keeps))


def test_the_window_policy_alone(built):
    window = built["drop_old_tool_results"]
    messages = task() + [{"role": "assistant", "content": None, "tool_calls": []},
                         {"role": "tool", "tool_call_id": "a", "name": "t", "content": "one"},
                         {"role": "tool", "tool_call_id": "b", "name": "t", "content": "two"},
                         {"role": "assistant", "content": "done"}]
    before = copy.deepcopy(messages)
    assert window(2, "x")(messages) == messages and window(3, "x")(messages) == messages
    assert [m["content"] for m in window(1, "x")(messages)][3:5] == ["x", "two"]
    assert [m["content"] for m in window(0, "")(messages)][3:5] == ["", ""]
    assert [m.get("tool_call_id") for m in window(0, "")(messages)] == [m.get("tool_call_id") for m in messages]
    assert messages == before                                # the transcript itself is never touched
