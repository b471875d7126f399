"""Notebook 04's run as data and its loop of five exits, as the notebook writes them, beside ``harness_lib.run``.

The notebook's loop has the library's order (the limits, then the calls the transcript owes, stopping for an
approval, then the model) and returns every exit, Stop and a refused request included. It has no tool-error
policy: it applies to every script whose tools do not fail (plan, runaway, direct, repeat, answer, destructive,
delete_twice, slow; not recover, forbidden or delegate, whose tools fail or are missing). On each exit both must
agree on status, interruption (its details too), resumable, turns, tool runs, tokens, dollars, answer, whether
there is an error, and the whole transcript; and a resumable run handed back must go on the same way in both."""

from __future__ import annotations

import asyncio
import copy

import pytest
from built_cells import load
from built_cells import quick_tools as tools

from harness_lib.chapter import s04_five_exits as s04
from harness_lib.loop import Options, run
from harness_lib.state import approve, new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK

# label: (script, limits, press Stop once scan_archive starts)
EXITS = {
    "plan": ("plan", {"max_turns": 20}, False),
    "direct": ("direct", {}, False),
    "repeat": ("repeat", {}, False),
    "answer": ("answer", {"max_budget_usd": 0.01}, False),
    "slow, no Stop": ("slow", {}, False),
    "plan, cap 2": ("plan", {"max_turns": 2}, False),
    "plan, budget $0.001": ("plan", {"max_budget_usd": 0.001}, False),
    "runaway, cap 1": ("runaway", {"max_turns": 1}, False),
    "runaway, cap 8": ("runaway", {"max_turns": 8}, False),
    "runaway, budget $0.010": ("runaway", {"max_budget_usd": 0.010}, False),
    "runaway, cap 8 and budget $0.005": ("runaway", {"max_turns": 8, "max_budget_usd": 0.005}, False),
    "destructive": ("destructive", {"max_turns": 20}, False),
    "delete_twice": ("delete_twice", {}, False),
    "slow, Stop once the scan starts": ("slow", {}, True),
}


@pytest.fixture(scope="module")
def built():
    return load("04-five-exits")


def same(mine, state):
    assert s04.exit_row(mine) == s04.exit_row(state)
    assert (mine.interruption, mine.output, bool(mine.error)) == (state.interruption, state.output, bool(state.error))
    assert mine.messages == state.messages


def both(built, where, model, limits, stop):
    hook = built["stop_when_started"]("scan_archive") if stop else None
    mine = asyncio.run(built["agent"](where, built["Run"](model), tools(), on_event=hook, **limits))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, model), tools(),
                            Options(base_url=where, trace=Trace(timestamps=False, on_event=hook), **limits)))
    return mine, state


@pytest.mark.parametrize("label", EXITS)
def test_each_exit_is_the_same_in_the_notebooks_loop_and_the_library(built, url, label):
    model, limits, stop = EXITS[label]
    mine, state = both(built, url, model, limits, stop)
    same(mine, state)
    assert mine.resumable == (mine.status != "completed")


def test_a_refused_request_is_a_failed_run_in_both(built):
    mine, state = both(built, s04.refusing_url(), "plan", {}, False)
    same(mine, state)
    assert (mine.status, mine.turns, mine.resumable) == ("failed", 0, False)
    assert mine.error.startswith("HTTP 401") and state.error.startswith("HTTP 401")


def test_all_five_exits_and_the_stop_lands_after_the_scan_started(built, url):
    ended = {both(built, url, *EXITS[label])[0].status for label in
             ("plan", "runaway, cap 8", "runaway, budget $0.010", "destructive")}
    ended.add(both(built, s04.refusing_url(), "plan", {}, False)[0].status)
    assert ended == {"completed", "max_turns_exceeded", "budget_exceeded", "interrupted", "failed"}
    mine, state = both(built, url, *EXITS["slow, Stop once the scan starts"])
    for r in (mine, state):  # the chapter's row: the scan was asked for, it started, Stop ended it
        assert (r.turns, r.tool_runs, r.prompt_tokens, r.completion_tokens) == (1, 0, 204, 28)
        assert r.interruption == {"type": "cancelled", "reason": "user pressed Stop"}
    assert f"{state.own_cost_usd:.6f}" == "0.000744"


# label, then what continues it: new limits, and whether the call it waits for is approved
RESUMES = [("runaway, cap 8", {"max_turns": 10}, False), ("runaway, cap 8", {"max_turns": 5}, False),
           ("runaway, budget $0.010", {"max_budget_usd": 0.02}, False), ("plan, cap 2", {"max_turns": 20}, False),
           ("plan, budget $0.001", {"max_budget_usd": 0.01}, False), ("destructive", {}, True),
           ("delete_twice", {}, True), ("slow, Stop once the scan starts", {}, False)]


@pytest.mark.parametrize("label, limits, approved", RESUMES, ids=[f"{r[0]}, {r[1]}" for r in RESUMES])
def test_a_resumable_run_handed_back_goes_on_the_same_way(built, url, label, limits, approved):
    model, first, stop = EXITS[label]
    mine, state = both(built, url, model, first, stop)
    assert mine.resumable and state.resumable
    mine, state = copy.deepcopy(mine), copy.deepcopy(state)
    if approved:
        mine.approved.add(mine.interruption["callId"])
        approve(state, state.interruption["callId"])
    mine = asyncio.run(built["agent"](url, mine, tools(), **limits))
    state = asyncio.run(run(state, tools(), Options(base_url=url, **limits)))
    same(mine, state)


def test_a_tool_that_raises_fails_the_run_as_the_librarys_fatal_policy_does_less_the_slot_it_writes(built, url):
    """The notebook's loop has no tool-error policy (notebook 05): its last ``except`` ends the run ``failed`` as the
    tool raises, before the call has a result or counts as run. The library under ``tool_errors="fatal"`` ends it
    the same way after writing the error into the call's slot and counting the run (04's check expects this)."""
    mine = asyncio.run(built["agent"](url, built["Run"]("recover"), tools()))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "recover"), tools(),
                            Options(base_url=url, tool_errors="fatal")))
    assert (mine.status, mine.resumable, mine.interruption) == (state.status, state.resumable, None) == \
        ("failed", False, None)
    assert mine.messages == state.messages[:-1] and state.messages[-1]["role"] == "tool"
    assert (mine.turns, mine.tool_runs, mine.cost_usd) == (state.turns, state.tool_runs - 1, state.own_cost_usd) \
        == (1, 0, 0.000756)
    assert "timeout.log" in mine.error and "timeout.log" in state.error
