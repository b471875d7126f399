"""Notebook 06's loop (a turn cap, errors as text, and the dedupe gate), as the notebook writes it, beside
``harness_lib.run`` with ``Options(dedupe=...)``, under every cache, on every script it can run.

The notebook's loop has no approval gate: it runs ``delete_file`` as if a person said yes each time, so the
library's run is approved at every stop (as the notebook's ``run_approving`` does). ``delegate`` needs notebook
13's subagent tool; ``slow`` runs with a scan of 50 ms instead of 3 s (the same tool, given to both). Both must
agree on status, turns, tool runs (a cached answer is not one), tokens, dollars, the answer, the transcript, and
on every path ``delete_file`` ran on."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.dedupe import DEDUPE
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import approve, new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

SCRIPTS = {"plan": 20, "runaway": 8, "recover": 20, "destructive": 20, "direct": 20, "repeat": 20,
           "delete_twice": 20, "forbidden": 8, "slow": 20, "answer": 20}  # script: cap
FAST_SCAN = {"seconds": 0.05, "every": 400}


@pytest.fixture(scope="module")
def built():
    return load("06-dedupe")


async def approving(url, script, mode, cap, workspace):
    options = Options(base_url=url, dedupe=mode, max_turns=cap)
    state = await run(new_run(SYSTEM_PROMPT, TASK, script), workspace.tools(**FAST_SCAN), options)
    while state.status == "interrupted" and state.interruption["type"] == "approval":
        approve(state, state.interruption["callId"])
        state = await run(state, workspace.tools(**FAST_SCAN), options)
    return state


@pytest.mark.parametrize("mode", DEDUPE)
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_notebooks_gate_and_the_library_agree(built, url, script, mode):
    cap, mine_ws, lib_ws = SCRIPTS[script], Workspace.copy_of(), Workspace.copy_of()
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(built["agent_loop"](url, script, messages, mine_ws.tools(**FAST_SCAN), mode, max_turns=cap))
    state = asyncio.run(approving(url, script, mode, cap, lib_ws))
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["cost_usd"] == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert mine["cost_usd"] == pytest.approx(CHAPTER_PRICES.cost(mine["in"], mine["out"]), abs=1e-12)
    assert mine["answer"] == (state.output or "") and messages == state.messages
    assert mine_ws.delete_runs == lib_ws.delete_runs and mine_ws.deleted == lib_ws.deleted


def test_the_notebooks_loop_gives_the_chapters_figures(built, url):
    def mine(script, mode):
        workspace = Workspace.copy_of()
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
        return asyncio.run(built["agent_loop"](url, script, messages, workspace.tools(), mode)), workspace

    (base, _), (again, _), (cached, _) = mine("direct", "off"), mine("repeat", "off"), mine("repeat", "read-only")
    extra = again["cost_usd"] - base["cost_usd"]
    assert (f"{extra:.6f}", round(100 * extra / base["cost_usd"]), f'{again["cost_usd"] - cached["cost_usd"]:.6f}') \
        == ("0.001050", 75, "0.000000")
    assert (again["tool_runs"], cached["tool_runs"]) == (2, 1)
    (naive, naive_ws), (gate, gate_ws) = mine("delete_twice", "all"), mine("delete_twice", "read-only")
    assert (naive["turns"], naive["tool_runs"], naive_ws.delete_runs) == (3, 1, ["access.log"])
    assert (gate["turns"], gate["tool_runs"], gate_ws.delete_runs) == (3, 2, ["access.log", "access.log"])


def test_the_checks_signature_case_shows_its_verdicts_alone():
    """A case of pairs of calls has no run: its row shows the four verdicts, not a run's fields."""
    from checked import report

    got = report("06-dedupe")
    assert got.ok and got.frame().loc["signature of 4 pairs", "expected"] == "same, same, different, different"
    assert got.frame().loc["repeat, read-only", "expected"].startswith("completed, 3 turns, 1 tool run, ran read_file")
