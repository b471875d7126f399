"""Notebook 07's gate, ``approve`` and ``reject``, as the notebook writes them, beside ``harness_lib``'s loop and
``harness_lib.state.approve`` / ``reject``: at every stop, under every sequence of verdicts, on every script.

The scripts that ask to delete (``destructive``, ``delete_twice``) stop for each delete, and each stop gets the
next verdict of the case (approve; reject with or without a reason; reject silently), on both sides; every other
script must go through the gate untouched, and a cap must end a run before its gate (the stop conditions come
first, in the library as in the notebook). At every stop and at the end both must agree on status, the
interruption, turns, tool runs, tokens, dollars, the transcript, the answer and the files deleted. ``delegate``
needs notebook 13's subagent tool; ``slow`` runs with a 50 ms scan (the same tool, given to both)."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

import harness_lib.state as hs
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FAST_SCAN = {"seconds": 0.05, "every": 400}
REASON = "I only asked which file mentions a timeout; do not delete anything."
APPROVE, REJECT, NO_REASON, SILENT = "approve", "reject", "reject, no reason", "reject silently"
CASES = [("destructive", 20, [APPROVE]), ("destructive", 20, [REJECT]), ("destructive", 20, [NO_REASON]),
         ("destructive", 20, [SILENT]), ("destructive", 2, []), ("destructive", 1, []),
         ("delete_twice", 20, [APPROVE, APPROVE]), ("delete_twice", 20, [REJECT, SILENT]),
         ("delete_twice", 20, [APPROVE, REJECT]), ("delete_twice", 20, [NO_REASON, APPROVE]),
         ("plan", 20, []), ("runaway", 8, []), ("recover", 20, []), ("direct", 20, []), ("repeat", 20, []),
         ("forbidden", 8, []), ("slow", 20, []), ("answer", 20, [])]


@pytest.fixture(scope="module")
def built():
    return load("07-approval")


def decide(approve, reject, state, call_id, verdict):
    if verdict == APPROVE:
        approve(state, call_id)
    else:
        reject(state, call_id, **({"reason": REASON} if verdict == REJECT else {"silent": True} if verdict == SILENT
                                  else {}))


def agree(mine, mine_ws, state, lib_ws):
    assert (mine["status"], mine["interruption"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.interruption, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["cost_usd"] == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert mine["cost_usd"] == pytest.approx(CHAPTER_PRICES.cost(mine["in"], mine["out"]), abs=1e-12)
    assert mine["messages"] == state.messages and mine["answer"] == (state.output or "")
    assert mine_ws.deleted == lib_ws.deleted and mine_ws.delete_runs == lib_ws.delete_runs


@pytest.mark.parametrize("script, cap, verdicts", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_the_notebooks_gate_and_the_library_agree_at_every_stop(built, url, script, cap, verdicts):
    mine_ws, lib_ws = Workspace.copy_of(), Workspace.copy_of()
    options = Options(base_url=url, max_turns=cap)
    mine = asyncio.run(built["agent_loop"](url, built["new_state"](script, TASK), mine_ws.tools(**FAST_SCAN), cap))
    state = asyncio.run(run(hs.new_run(SYSTEM_PROMPT, TASK, script), lib_ws.tools(**FAST_SCAN), options))
    agree(mine, mine_ws, state, lib_ws)
    left = list(verdicts)
    while state.status == "interrupted":
        assert state.interruption["type"] == "approval" and left, "a stop the case has no verdict for"
        assert [c["id"] for c in built["owed"](mine["messages"])] == [c["id"] for c in hs.pending(state)]
        verdict = left.pop(0)
        decide(built["approve"], built["reject"], mine, mine["interruption"]["callId"], verdict)
        decide(hs.approve, hs.reject, state, state.interruption["callId"], verdict)
        mine = asyncio.run(built["agent_loop"](url, mine, mine_ws.tools(**FAST_SCAN), cap))
        state = asyncio.run(run(state, lib_ws.tools(**FAST_SCAN), options))
        agree(mine, mine_ws, state, lib_ws)
    assert left == [], "verdicts the run never asked for"


def test_the_notebooks_verdicts_give_the_chapters_lines(built, url):
    told = {}
    for verdict in (APPROVE, REJECT, SILENT):
        workspace = Workspace.copy_of()
        state = asyncio.run(built["agent_loop"](url, built["new_state"]("destructive", TASK), workspace.tools()))
        asked = {"type": "approval", "callId": "c2", "toolName": "delete_file", "args": {"path": "access.log"}}
        assert (state["turns"], state["interruption"]) == (2, asked)
        assert workspace.deleted == []
        decide(built["approve"], built["reject"], state, "c2", verdict)
        state = asyncio.run(built["agent_loop"](url, state, workspace.tools()))
        told[verdict] = (state["turns"], workspace.deleted, state["answer"])
    assert told == {APPROVE: (3, ["access.log"], "Deleted access.log to free space."),
                    REJECT: (3, [], "I did not delete anything: you declined the deletion."),
                    SILENT: (3, [], "Deleted access.log to free space.")}
