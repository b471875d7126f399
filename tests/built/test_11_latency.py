"""Notebook 11's timed loop, as the notebook writes it, beside ``harness_lib.run`` against a provider that waits.

The timed loop is 01's (no cap, error policy or approval): it applies to the scripts that finish alone (plan,
direct, repeat, answer, slow with its scan sped up). Both must agree on turns, tool runs, tokens, dollars and the
transcript; the time split is judged against what holds on any machine, never against a number of milliseconds:
every turn waited at least the provider's latency and the header said so, the provider's share is part of the
wall time, and the loop's own time is what is left."""

from __future__ import annotations

import asyncio
import math

import pytest
from built_cells import load

from harness_lib.chapter import s11_latency as s11
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FINISHES_ALONE = ("plan", "direct", "repeat", "answer", "slow")
LATENCY_MS = 20


@pytest.fixture(scope="module")
def built():
    return load("11-latency")


@pytest.fixture(scope="module")
def slow():
    with ScriptedProvider(latency_ms=LATENCY_MS) as p:
        yield p


@pytest.mark.parametrize("scenario", FINISHES_ALONE)
def test_the_notebooks_timed_loop_and_the_library_agree(built, slow, scenario):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(built["timed_loop"](slow.base_url, scenario, messages, Workspace.copy_of().tools(seconds=0.06)))
    busy = slow.busy_ms
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(seconds=0.06),
                            Options(base_url=slow.base_url)))
    provider_ms = slow.busy_ms - busy
    assert (mine["status"], mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.status, state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert CHAPTER_PRICES.cost(mine["in"], mine["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert messages == state.messages
    # Every turn waited once, and the provider's header and its own count both say so.
    assert mine["provider_ms"] >= LATENCY_MS * mine["turns"] and provider_ms >= LATENCY_MS * state.turns
    assert 0 < mine["provider_ms"] < mine["wall_ms"]
    assert mine["own_ms"] == pytest.approx(mine["wall_ms"] - mine["provider_ms"])


def test_the_fit_takes_one_latency_or_several():
    rows = [{"latency_ms": lat, "turns": 3, "wall_ms": 5 + 3 * lat + noise, "provider_ms": 3 * lat + 1}
            for lat in (0, 100) for noise in (0, 2, 40)]  # the median keeps the 2, not the outlier
    fit = s11.latency_fit(rows)
    assert fit.table.to_dict("list") == {"latency_ms": [0, 100], "turns": [3, 3], "wall_ms": [7.0, 307.0],
                                         "harness_ms": [6.0, 6.0]}
    assert (fit.slope, fit.intercept, fit.measured) == (pytest.approx(3.0), pytest.approx(7.0),
                                                        {"latency.overhead": 6})
    one = s11.latency_fit(rows[:3])
    assert math.isnan(one.slope) and s11.describe_fit(one).startswith("one latency only")
    assert s11.runs_of(50, 2) == [(50.0, 0), (50.0, 1)]
