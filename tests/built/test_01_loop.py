"""Notebook 01's loop, as the notebook writes it, beside ``harness_lib.run`` on every script it can finish.

The notebook's loop has one way out (a reply that asks for nothing) and no error handling, cap or approval:
it applies to the scripts that answer without needing any of those. On each, both must agree on turns, tool
runs, tokens (per turn too) and dollars, and on the answer."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FINISHES_ALONE = ("plan", "direct", "repeat", "answer")


@pytest.fixture(scope="module")
def built():
    return load("01-loop")


@pytest.mark.parametrize("scenario", FINISHES_ALONE)
def test_the_notebooks_loop_and_the_library_agree(built, url, scenario):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    answer, mine = asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools()))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(),
                            Options(base_url=url, max_turns=50)))
    assert state.status == "completed"
    assert (mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["prompts"] == [t["prompt_tokens"] for t in state.per_turn]
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert answer == state.output and messages == state.messages


def test_the_notebooks_loop_gives_the_chapters_plan_run(built, url):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    answer, mine = asyncio.run(built["agent_loop"](url, "plan", messages, Workspace.copy_of().tools()))
    assert (mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == (3, 2, 815, 70)
    assert mine["prompts"] == [204, 269, 342]
    assert answer == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
