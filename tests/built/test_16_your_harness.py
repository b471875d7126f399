"""Notebook 16's harness, the capstone, as the notebook writes it, beside ``harness_lib.run``: on every scripted
scenario the harness can run, under caps, budgets, each error policy and each cache, approving every stop, both
must agree on status, turns, tool runs, tokens, dollars, each turn's prompt, the answer, the transcript and the
files deleted; through the capstone's driver both give the chapter's 60 exact figures."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.chapter import s16_your_harness as s16
from harness_lib.workspace import TASK, Workspace

CASES = [("plan", {"max_turns": 20}), ("plan", {"max_turns": 2}), ("runaway", {"max_turns": 8}),
         ("runaway", {"max_turns": None, "max_budget_usd": 0.004}), ("runaway", {"max_budget_usd": 0.000684}),
         ("recover", {"tool_errors": "fatal"}), ("recover", {"tool_errors": "generic"}),
         ("recover", {"tool_errors": "descriptive"}), ("forbidden", {"max_turns": 12}),
         ("direct", {}), ("repeat", {"dedupe": "off"}), ("repeat", {"dedupe": "read-only"}),
         ("delete_twice", {"dedupe": "all"}), ("delete_twice", {"dedupe": "read-only"}),
         ("destructive", {}), ("slow", {}), ("answer", {"max_turns": 1})]


@pytest.fixture(scope="module")
def kit():
    ns = load("16-your-harness")
    return type("Kit", (), {k: staticmethod(ns[k]) for k in s16.PIECES})


async def approving(kit, url, script, options):
    workspace = Workspace.copy_of()
    state = kit.new_state("both", script, TASK)
    while True:
        state = await kit.harness(url, state, workspace.tools(seconds=0.05, every=400), **options)
        seen = s16.view(state)
        if seen["status"] != "interrupted" or seen["interruption"]["type"] != "approval":
            return seen, workspace
        kit.approve(state, seen["interruption"]["callId"])


@pytest.mark.parametrize("script, options", CASES, ids=lambda v: v if isinstance(v, str) else
                         ",".join(f"{k}={v}" for k, v in v.items()))
def test_the_notebooks_harness_and_the_library_agree(kit, url, script, options):
    options = {"max_turns": 20, **options}
    mine, mine_ws = asyncio.run(approving(kit, url, script, options))
    theirs, their_ws = asyncio.run(approving(s16.LIBRARY, url, script, options))
    for key in ("status", "interruption", "turns", "tool_runs", "in", "out", "prompts", "answer", "messages"):
        assert mine[key] == theirs[key], key
    assert mine["cost_usd"] == pytest.approx(theirs["cost_usd"], abs=1e-12)
    assert (mine_ws.deleted, mine_ws.delete_runs) == (their_ws.deleted, their_ws.delete_runs)


@pytest.mark.slow
def test_through_the_capstone_both_give_the_chapters_60_exact_figures(kit, url):
    got = asyncio.run(s16.capstone(url, **{k: getattr(kit, k) for k in s16.PIECES}))
    assert (got.reproduced, got.library, got.total) == (60, 60, 60)
    assert got.lines() == ["your harness reproduces 60 of the 60 exact figures (the library: 60 of 60), and "
                           f"{len(got.runs)} of its {len(got.runs)} runs are the library's, field by field"]
    assert len(got.runs) >= 25 and got.ok
