"""Notebook 00's provider, as the notebook writes it (the script's reply read off the transcript, the bill, served
in process as ``Options(client=...)``), beside the scripted provider over HTTP.

The piece is the provider, so it applies to every script: each is run by ``harness_lib.run`` once through the
notebook's provider and once through ``ScriptedProvider`` (capped where it never ends, approved where it stops for
approval), and the two runs must be the same run: status, turns, tool runs, tokens of every turn, dollars, answer
and the whole transcript. And the reader's own script must be what the chapter's are: a pure function of the
conversation."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load
from built_cells import quick_tools as tools

from harness_lib.loop import Options, run
from harness_lib.scripted import scripts
from harness_lib.state import approve, new_run
from harness_lib.tokens import usage
from harness_lib.workspace import SYSTEM_PROMPT, TASK


@pytest.fixture(scope="module")
def built():
    return load("00-scripted-provider")


async def approving(model, **options):
    """A run to its end, approving every call it stops for, on one workspace."""
    workspace = tools()
    state = await run(new_run(SYSTEM_PROMPT, TASK, model), workspace, Options(max_turns=6, **options))
    while state.status == "interrupted" and state.interruption["type"] == "approval":
        state = await run(approve(state, state.interruption["callId"]), workspace, Options(max_turns=6, **options))
    return state


@pytest.mark.parametrize("model", scripts.SCRIPTS)
def test_the_notebooks_provider_serves_every_script_as_the_real_one_does(built, url, model):
    mine = asyncio.run(approving(model, client=built["InProcess"](scripts.SCRIPTS)))
    real = asyncio.run(approving(model, base_url=url))
    assert (mine.status, mine.turns, mine.tool_runs, mine.output, mine.error) == \
        (real.status, real.turns, real.tool_runs, real.output, real.error)
    assert mine.per_turn == real.per_turn and mine.own_cost_usd == real.own_cost_usd  # each turn's bill
    assert mine.messages == real.messages
    for end in [i for i, m in enumerate(real.messages) if m["role"] == "assistant"]:  # request by request
        sent, reply = real.messages[:end], real.messages[end]
        assert built["reply_to"](scripts.SCRIPTS, model, sent) == scripts.next_message(model, sent) == reply
        schemas = [t.schema() for t in tools()]
        assert built["usage_of"](sent, schemas, reply) == usage(sent, schemas, reply)


def test_the_readers_own_script_is_a_pure_function_and_runs(built):
    skim = built["skim"]
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "skim"), tools(),
                            Options(client=built["InProcess"]({"skim": skim}), max_turns=20)))
    assert (state.status, state.turns, state.tool_runs) == ("completed", 3, 3)
    assert state.output == "[error] worker 7 timed out after 30000 ms"
    for end in [i for i, m in enumerate(state.messages) if m["role"] == "assistant"]:  # asked again: the same
        assert built["reply_to"]({"skim": skim}, "skim", state.messages[:end]) == state.messages[end]
