"""Notebook 12's loop, as the notebook writes it, beside ``harness_lib.run`` on every script its exits cover.

The notebook's loop is notebook 01's with a turn cap, a stop before a call that needs approval, and a tool's
failure handed back as ``Error: <message>``: the exits a real model makes necessary. On each script that ends
in one of those (an answer, the cap, the approval gate, a tool error the model reads) both must agree on status,
turns, tool runs, tokens and dollars, and on the transcript."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

SCRIPTS = ("plan", "direct", "repeat", "answer", "recover", "runaway", "forbidden", "destructive", "delete_twice")
CAP = 6


@pytest.fixture(scope="module")
def built():
    return load("12-local-model")


@pytest.mark.parametrize("scenario", SCRIPTS)
def test_the_notebooks_loop_and_the_library_agree(built, url, scenario):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools(), max_turns=CAP))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(),
                            Options(base_url=url, max_turns=CAP)))
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert messages == state.messages
    if state.status == "completed":
        assert mine["answer"] == state.output


def test_the_scripts_cover_every_exit_of_the_notebooks_loop(built, url):
    seen = set()
    for scenario in SCRIPTS:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
        seen.add(asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools(),
                                                 max_turns=CAP))["status"])
    assert seen == {"completed", "max_turns_exceeded", "interrupted"}
