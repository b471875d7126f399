"""Notebook 05's loop (01's, with a turn cap and the chapter's catch block), as the notebook writes it, beside
``harness_lib.run`` with ``Options(tool_errors=...)``, under every policy, on every script it can run.

The notebook's loop has no approval gate (``destructive`` and ``delete_twice`` would delete without asking),
no subagent tool (``delegate``), and ``slow`` is notebook 09's; every other script runs under the three policies
and several caps. Both must agree on status, turns, tool runs, tokens, dollars, the error and the answer, and on
the transcript: under ``fatal`` the library also writes the error into the call's slot, which the chapter's loop
(and the notebook's) leaves empty, and that one message is the only difference."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.loop import Options, run
from harness_lib.policy import POLICIES
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

# Scripts where no tool fails run under one policy (the policy has nothing to decide there); the two whose tool
# fails run under each, at caps around where they stop.
CASES = [("plan", "descriptive", 20), ("direct", "descriptive", 20), ("repeat", "descriptive", 20),
         ("answer", "descriptive", 20), ("runaway", "descriptive", 8)] + \
        [("recover", policy, cap) for policy in POLICIES for cap in (1, 2, 3, 20)] + \
        [("forbidden", policy, cap) for policy in POLICIES for cap in (1, 2, 12)]


@pytest.fixture(scope="module")
def built():
    return load("05-tool-errors")


def both(built, url, script, policy, cap):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(built["agent_loop"](url, script, messages, Workspace.copy_of().tools(), policy, max_turns=cap))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, script), Workspace.copy_of().tools(),
                            Options(base_url=url, tool_errors=policy, max_turns=cap)))
    return mine, messages, state


@pytest.mark.parametrize("script, policy, cap", CASES)
def test_the_notebooks_catch_block_and_the_library_agree(built, url, script, policy, cap):
    mine, messages, state = both(built, url, script, policy, cap)
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["cost_usd"] == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert mine["cost_usd"] == pytest.approx(CHAPTER_PRICES.cost(mine["in"], mine["out"]), abs=1e-12)
    assert (mine["error"], mine["answer"]) == (state.error, state.output or "")
    if state.status == "failed":  # fatal: the library fills the slot of the call that ended the run
        assert state.messages[:-1] == messages and state.messages[-1]["content"].startswith("Error: ")
    else:
        assert state.messages == messages


def test_the_notebooks_loop_gives_the_chapters_figures(built, url):
    runs = {policy: both(built, url, "recover", policy, 20)[0] for policy in POLICIES}
    assert [p for p in POLICIES if runs[p]["answer"] == "errors.log mentions a timeout."] == ["descriptive"]
    assert f'{runs["descriptive"]["cost_usd"] / runs["fatal"]["cost_usd"]:.1f}' == "4.7"
    stuck = both(built, url, "forbidden", "descriptive", 12)[0]
    assert (stuck["turns"], stuck["tool_runs"], stuck["in"], f'{stuck["cost_usd"]:.6f}', stuck["status"]) == \
        (12, 11, 7079, "0.018622", "max_turns_exceeded")
    assert f'{stuck["cost_usd"] / runs["descriptive"]["cost_usd"]:.1f}' == "5.2"


FATAL = '                    return {**run, "status": "failed", "error": f"{tool.name}: {error}"}\n'
FILLED = ('                    messages.append({"role": "tool", "tool_call_id": call["id"], "name": tool.name,\n'
          '                                     "content": f"Error: {error}"})\n' + FATAL)


@pytest.mark.slow
def test_its_check_takes_a_fatal_slot_left_empty_or_filled_as_the_library_fills_it():
    from checked import report

    assert report("05-tool-errors").ok
    filled = report("05-tool-errors", namespace=load("05-tool-errors", edits=((FATAL, FILLED),)))
    assert filled.ok, filled.lines()
    other = report("05-tool-errors", namespace=load("05-tool-errors", edits=((FATAL, FILLED.replace(
        'f"Error: {error}"', '"failed"')),)))
    assert not other.ok and "may leave its slot empty, as the chapter's loop does, or fill it" in other.lines()[-1]
