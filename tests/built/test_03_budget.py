"""Notebook 03's cost of a turn and budgeted loop, as the notebook writes them, beside ``harness_lib.run`` with
``Options(max_budget_usd=...)``.

The notebook's loop is 01's with the chapter's budget check and nothing else (no cap, no error handling, no
approval): it applies to every script that needs none of those (plan, runaway, direct, repeat, answer, slow), at
budgets below the first turn's price, between turns, and above what the script spends. Both must agree on status,
turns, tokens, dollars (each turn's too) and transcript; on tool runs they differ by exactly the calls the library
leaves owed (it checks before running what the last reply asked for, as in notebook 02)."""

from __future__ import annotations

import pytest
from built_cells import load, run_both

from harness_lib.state import pending

APPLIES = ("plan", "runaway", "direct", "repeat", "answer", "slow")
BUDGETS = (0.0005, 0.001, 0.002, 0.004)  # below the first turn's $0.000684, between turns, past what plan spends
EXACT = (0.000684, 0.001498)              # exactly the runaway's spend after 1 and 2 turns: reached, so it stops
LONGER = (0.005, 0.03, 0.05)               # the runaway's longer runs, up to 24 turns a side


@pytest.fixture(scope="module")
def built():
    return load("03-budget")


def both(built, url, scenario, usd):
    return run_both(built["budgeted_loop"], url, scenario, max_budget_usd=usd)


def agree(built, mine, messages, state):
    assert (mine["status"], mine["turns"], mine["in"], mine["out"], mine["cost_usd"]) == \
        (state.status, state.turns, state.prompt_tokens, state.completion_tokens, state.own_cost_usd)
    turns = [m for m in messages if m["role"] == "assistant"]
    assert len(turns) == len(state.per_turn)
    assert mine["last_turn_usd"] == pytest.approx(state.per_turn[-1]["cost_usd"], abs=1e-12)
    owed = pending(state) if state.status == "budget_exceeded" else []
    assert mine["tool_runs"] == state.tool_runs + len(owed)
    assert messages[:len(state.messages)] == state.messages  # then, in the notebook's loop, the owed calls' results
    assert [m["tool_call_id"] for m in messages[len(state.messages):]] == [c["id"] for c in owed]


@pytest.mark.parametrize("usd", BUDGETS)
@pytest.mark.parametrize("scenario", APPLIES)
def test_the_notebooks_budgeted_loop_and_the_library_agree(built, url, scenario, usd):
    agree(built, *both(built, url, scenario, usd))


@pytest.mark.parametrize("usd", EXACT)
def test_a_budget_reached_exactly_stops_the_run(built, url, usd):
    mine, messages, state = both(built, url, "runaway", usd)
    assert mine["cost_usd"] == usd and mine["status"] == "budget_exceeded"
    agree(built, mine, messages, state)


@pytest.mark.slow
@pytest.mark.parametrize("usd", LONGER)
def test_on_the_runaway_at_longer_budgets(built, url, usd):
    agree(built, *both(built, url, "runaway", usd))


def test_the_cost_of_a_turn_is_the_librarys_price():
    from harness_lib.pricing import CHAPTER_PRICES

    cost = load("03-budget")["cost"]
    for p, c in ((204, 23), (269, 23), (342, 18), (1, 0), (0, 1), (123_456, 7_890)):
        assert cost({"prompt_tokens": p, "completion_tokens": c}) == pytest.approx(CHAPTER_PRICES.cost(p, c), abs=1e-12)


def test_the_notebooks_loop_gives_the_chapters_budget_run(built, url):
    mine, _, state = both(built, url, "runaway", 0.010)
    assert (mine["status"], mine["turns"], f"{mine['cost_usd']:.6f}") == ("budget_exceeded", 9, "0.010780")
    assert 0 < mine["cost_usd"] - 0.010 <= mine["last_turn_usd"]  # within one turn
    assert (mine["tool_runs"], state.tool_runs) == (9, 8)
