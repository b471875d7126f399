"""Notebook 14's stop predicates and loop (``ai``'s ``stopWhen``, in Python), as the notebook writes them, beside
``harness_lib``'s stop conditions.

The small loop has no error policy or approval gate: it applies to the scripts that run without those (runaway,
plan, direct, repeat, answer, slow with its scan sped up). Each of the notebook's predicates is run against its
library twin (``step_count_is`` and ``max_turns``, ``has_tool_call`` and ``tool_called``, ``called_at_least`` and
``when`` on the tool log) and the notebook's pair of them. Where the two orders of business agree (a predicate on
what has run, or a run that answers first) everything must be equal but the status's word; at a step count, the
same model calls, tokens and dollars, and the notebook's loop has run exactly the calls the library left pending."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib import stops
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run, pending
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

APPLIES = ("runaway", "plan", "direct", "repeat", "answer", "slow")


def listed(n):
    return stops.when(lambda s: sum(r["toolName"] == "list_files" for r in s.tool_log) >= n, f"list_files x{n}")


PAIRS = {  # label -> (the notebook's predicates, by name and arguments; the library's conditions)
    "step count 1": ([("step_count_is", 1)], [stops.max_turns(1)]),
    "step count 2": ([("step_count_is", 2)], [stops.max_turns(2)]),
    "step count 8": ([("step_count_is", 8)], [stops.max_turns(8)]),
    "read_file called": ([("has_tool_call", "read_file")], [stops.tool_called("read_file")]),
    "list_files called": ([("has_tool_call", "list_files")], [stops.tool_called("list_files")]),
    "list_files 3 times": ([("called_at_least", "list_files", 3)], [listed(3)]),
    "the notebook's pair": ([("step_count_is", 8), ("called_at_least", "list_files", 3)],
                            [stops.max_turns(8), listed(3)]),
}


CASES = [(scenario, pair) for scenario in APPLIES for pair in PAIRS
         if (scenario, pair) != ("runaway", "read_file called")]  # the runaway never reads: neither would stop


@pytest.fixture(scope="module")
def built():
    return load("14-libraries")


@pytest.mark.parametrize("scenario, pair", CASES)
def test_the_notebooks_predicates_and_the_librarys_conditions_agree(built, url, scenario, pair):
    predicates, conditions = PAIRS[pair]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    stop_when = [built[name](*args) for name, *args in predicates]
    mine = asyncio.run(built["agent_loop"](url, scenario, messages, Workspace.copy_of().tools(seconds=0.06), stop_when))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(seconds=0.06),
                            Options(base_url=url, stops=conditions)))
    assert (mine["turns"], mine["in"], mine["out"]) == (state.turns, state.prompt_tokens, state.completion_tokens)
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    left = pending(state)  # what the library did not run: only at its turn cap
    assert mine["tool_runs"] == state.tool_runs + len(left)
    assert messages[:len(state.messages)] == state.messages
    assert [m["tool_call_id"] for m in messages[len(state.messages):]] == [c["id"] for c in left]
    expected = {"completed": "completed", "max_turns_exceeded": "stopped", "interrupted": "stopped"}[state.status]
    assert mine["status"] == expected
    assert bool(left) == (state.status == "max_turns_exceeded")


def test_any_one_true_stops_the_notebooks_loop(built, url):
    """ai's semantics: the list is an or. The runaway stops after its first step with has_tool_call("list_files")
    beside a step count of 8, and at 3 with the notebook's own pair (MY_LIMIT = 3 fires before STEP_COUNT = 8)."""
    def go(stop_when):
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
        return asyncio.run(built["agent_loop"](url, "runaway", messages, Workspace.copy_of().tools(), stop_when))
    first = go([built["step_count_is"](8), built["has_tool_call"]("list_files")])
    assert (first["status"], first["turns"], first["tool_runs"]) == ("stopped", 1, 1)
    pair = go([built["step_count_is"](8), built["called_at_least"]("list_files", 3)])
    assert (pair["status"], pair["turns"], pair["tool_runs"], pair["in"], pair["out"]) == ("stopped", 3, 3, 806, 69)
