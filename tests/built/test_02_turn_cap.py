"""Notebook 02's capped loop, as the notebook writes it, beside ``harness_lib.run`` with ``Options(max_turns=cap)``.

The notebook's loop is 01's with the chapter's one-line cap and nothing else: no error handling, no approval. It
applies to every script that needs neither (plan, runaway, direct, repeat, answer, slow), at caps that stop each
one before, at and after its natural end. Both must agree on status, turns, tokens, dollars and transcript; on tool
runs they differ by exactly the calls the library leaves owed: it checks its stop conditions before running what
the last reply asked for, the notebook's loop (like the chapter's) after."""

from __future__ import annotations

import pytest
from built_cells import load, run_both

from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import pending

APPLIES = ("plan", "runaway", "direct", "repeat", "answer", "slow")
CAPS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def built():
    return load("02-turn-cap")


def both(built, url, scenario, cap):
    return run_both(built["capped_loop"], url, scenario, max_turns=cap)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("scenario", APPLIES)
def test_the_notebooks_capped_loop_and_the_library_agree(built, url, scenario, cap):
    mine, messages, state = both(built, url, scenario, cap)
    assert (mine["status"], mine["turns"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.prompt_tokens, state.completion_tokens)
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    owed = pending(state) if state.status == "max_turns_exceeded" else []
    assert mine["tool_runs"] == state.tool_runs + len(owed)
    assert messages[:len(state.messages)] == state.messages  # then, in the notebook's loop, the owed calls' results
    assert [m["tool_call_id"] for m in messages[len(state.messages):]] == [c["id"] for c in owed]


def test_the_notebooks_capped_loop_gives_the_chapters_cap_8(built, url):
    mine, _, state = both(built, url, "runaway", 8)
    assert (mine["status"], mine["turns"], mine["in"]) == ("max_turns_exceeded", 8, 3431)
    assert (mine["tool_runs"], state.tool_runs) == (8, 7)
