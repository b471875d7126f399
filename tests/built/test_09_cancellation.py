"""Notebook 09's stoppable loop and slow tool, as the notebook writes them, beside ``harness_lib.run`` and the
workspace's ``scan_archive``.

Stop lands at an event of the run, never at a time: the k-th progress event of the scan, or the k-th tool start
(``task.cancel("user pressed Stop")`` from the callback that hears it), so both sides must end at the same point
on any machine, however loaded. Every script the small loop can run applies (it has no error policy, approval
gate or subagent tool: recover, forbidden, destructive, delete_twice and delegate need those), each without
Stop where it finishes alone and with Stop where Stop can land. Both must agree on the status and its reason,
turns, tool runs, tokens, dollars, progress events and the whole transcript. The scan is sped up (six pauses of
10 ms) on both sides alike."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FAST = 0.06  # the scan's three seconds, shortened alike on both sides

CASES = [  # (scenario, Stop at the k-th event of this kind, or None)
    ("slow", None), ("slow", ("progress", 1)), ("slow", ("progress", 3)), ("slow", ("progress", 6)),
    ("slow", ("tool_start", 1)),
    ("plan", None), ("plan", ("tool_start", 1)), ("plan", ("tool_start", 2)),
    ("runaway", ("tool_start", 1)), ("runaway", ("tool_start", 4)),
    ("direct", None), ("repeat", None), ("repeat", ("tool_start", 2)), ("answer", None),
]


@pytest.fixture(scope="module")
def built():
    return load("09-cancellation")


async def stopped_at(start, at):
    """Run ``start(seen)`` as a task; ``seen(kind)`` is called at each event, and presses Stop at ``at``."""
    counts = {"progress": 0, "tool_start": 0}
    task = None

    def seen(kind):
        counts[kind] += 1
        if at == (kind, counts[kind]):
            task.cancel("user pressed Stop")

    task = asyncio.ensure_future(start(seen))
    return await task, counts


def mine(built, url, scenario, at):
    tools = [built["scan_archive_tool"](seconds=FAST) if t.name == "scan_archive" else t
             for t in Workspace.copy_of().tools()]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    out, counts = asyncio.run(stopped_at(lambda seen: built["agent_loop"](
        url, scenario, messages, tools, on_progress=lambda label: seen("progress"),
        on_tool_start=lambda name: seen("tool_start")), at))
    return out, counts, messages


def library(url, scenario, at):
    trace = Trace(timestamps=False)
    state, counts = asyncio.run(stopped_at(lambda seen: run(
        new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of().tools(seconds=FAST),
        Options(base_url=url, on_progress=lambda label: seen("progress"), trace=Trace(
            timestamps=False, on_event=lambda e: (trace.events.append(e), seen("tool_start")
                                                  if e["type"] == "tool_start" else None)))), at))
    return state, counts, trace.events


@pytest.mark.parametrize("scenario, at", CASES, ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else v)
def test_the_notebooks_stoppable_loop_and_the_library_agree(built, url, scenario, at):
    out, my_counts, messages = mine(built, url, scenario, at)
    state, counts, events = library(url, scenario, at)
    assert state.status == ("completed" if at is None else "interrupted")
    assert (out["status"], out["reason"]) == (state.status, (state.interruption or {}).get("reason"))
    assert (out["turns"], out["tool_runs"], out["in"], out["out"]) == \
        (state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert CHAPTER_PRICES.cost(out["in"], out["out"]) == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert out["progress"] == my_counts["progress"] == counts["progress"] == \
        sum(e["type"] == "tool_progress" for e in events)
    assert my_counts["tool_start"] == counts["tool_start"]
    assert messages == state.messages and out.get("answer") == state.output


def test_stop_at_the_second_progress_event_is_the_chapters_stop_at_1_2_s(built, url):
    """The chapter's Stop at 1.2 s lands between the scan's second and third progress events (at 1.0 and 1.5 s):
    one turn, no tool run, two progress events, the reason the user gave."""
    out, counts, _ = mine(built, url, "slow", ("progress", 2))
    assert (out["status"], out["reason"], out["turns"], out["tool_runs"], out["progress"]) == \
        ("interrupted", "user pressed Stop", 1, 0, 2)
    assert (out["in"], out["out"]) == (204, 28)


@pytest.mark.slow
def test_the_check_stops_a_loop_that_swallows_stop_and_says_why(built):
    """A loop that catches Stop and goes on waiting never ends: the check stops it at its first Stop case."""
    from harness_lib.chapter.checks import s09_cancellation

    async def agent_loop(url, model, messages, tools, on_progress=print, on_tool_start=lambda name: None):
        if model != "slow":
            return await built["agent_loop"](url, model, messages, tools, on_progress, on_tool_start)
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    got = asyncio.run(s09_cancellation.check(agent_loop, scan_archive_tool=built["scan_archive_tool"]))
    assert got.passed == 3 and got.rows[-1].ran.hung and "your run did not end after Stop" in got.lines()[-1]
