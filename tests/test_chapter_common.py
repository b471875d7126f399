"""What the notebooks' own code leans on: the chapter's ``call_model``, the library's source shown from the
installed module, two runs side by side, a notebook's parameters declared once, and a Stop that ends a loop of
runs (``stop_button.each``)."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

import pytest

from harness_lib import loop
from harness_lib.chapter import common, params
from harness_lib.chapter.stop_button import STOP_REASON, Stopped, each
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def test_call_model_is_one_turn_billed_as_the_harness_bills_it(url):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    schemas = [t.schema() for t in Workspace.copy_of().tools()]
    reply = asyncio.run(common.call_model(url, "plan", messages, schemas))
    assert reply["finish_reason"] == "tool_calls" and reply["usage"]["prompt_tokens"] == 204
    assert reply["message"]["tool_calls"][0]["function"]["name"] == "list_files"
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of().tools(),
                            Options(base_url=url, max_turns=1)))
    assert state.messages[2] == reply["message"] and state.per_turn[0]["completion_tokens"] == 23


def test_call_model_builds_no_tls_context_per_turn(url, monkeypatch):
    """A client per call is what keeps call_model ten lines; a TLS context per client cost ~45 ms a turn (a
    100-turn loop in notebook 15 took 6 s, the library's own 0.7 s). The context is built once a process."""
    import ssl

    built, real = [], ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(1) or real(*a, **k))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    for _ in range(5):
        asyncio.run(common.call_model(url, "plan", messages, []))
    assert len(built) <= 1, f"{len(built)} TLS contexts for 5 turns"


def test_show_source_reads_the_installed_code_and_excerpts_it():
    whole = common.show_source(loop.Call.parse)
    assert repr(whole).startswith("# harness_lib/loop.py, Call.parse\n@classmethod")
    part = common.show_source(loop.run, start="async def execute", end="return await run_tool")
    lines = repr(part).splitlines()
    assert lines[1].startswith("async def execute(call: Call)")
    assert lines[-1].strip() == "return await run_tool(call, tool, rerun)"
    assert "<span" in part._repr_html_() and part._repr_html_() == part._repr_html_()  # deterministic for nbval
    with pytest.raises(ValueError, match="'no such line' is not in the source of run"):
        common.show_source(loop.run, start="no such line")
    with pytest.raises(ValueError, match="does not follow"):
        common.show_source(loop.run, start="async def execute", end="no such end")


def test_side_by_side_says_where_two_runs_differ(url, capsys):
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of().tools(), Options(base_url=url)))
    same = {"status": "completed", "turns": 3, "tool_runs": 2, "in": 815, "out": 70, "cost_usd": 0.00247}
    common.side_by_side({"mine": same, "library": state})
    assert capsys.readouterr().out.startswith("they agree on status, turns, tool_runs, in, out, cost_usd")

    @dataclass
    class Mine:  # a notebook may keep its run as a dataclass, and not keep every field
        status: str
        turns: int

    common.side_by_side({"mine": Mine("completed", 4), "library": state})
    assert capsys.readouterr().out.startswith("they DIFFER on turns")
    assert common.as_row(Mine("completed", 4))["in"] is None


def test_side_by_side_cases_judges_each_case_alone(url, capsys):
    states = {s: asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, s), Workspace.copy_of().tools(), Options(base_url=url)))
              for s in ("plan", "direct")}
    mine = {s: common.as_row(states[s]) for s in states}  # the cases differ from each other, not within
    common.side_by_side_cases({s: {"mine": mine[s], "library": states[s]} for s in states})
    assert capsys.readouterr().out.startswith("in every case they agree on status, turns, tool_runs, in, out, cost_usd")
    mine["direct"] = {**mine["direct"], "turns": 3}
    common.side_by_side_cases({s: {"mine": mine[s], "library": states[s]} for s in states})
    assert capsys.readouterr().out.startswith("they DIFFER: direct on turns\n")


SPECS = {"WHOLE": params.Whole(1, 500, several=True), "ONE": params.Whole(0, 3),
         "DOLLARS": params.Number(0, 1.0), "MS": params.Number(0, 2000, closed=True, unit=" ms", several=True),
         "MODE": params.OneOf(("off", "read-only", "all")), "WORDS": params.Words(), "MAYBE": params.Words(empty=True)}


@pytest.mark.parametrize("name", SPECS)
def test_a_spec_accepts_its_inside_and_refuses_its_outside_in_one_line(name):
    spec = SPECS[name]
    for value in spec.inside():
        spec.check(name, value)
    for value in spec.outside():
        with pytest.raises(params.ParameterError) as info:
            spec.check(name, value)
        (line,) = info.value._render_traceback_()
        assert line.startswith(f"ParameterError: {name} accepts ") and "\n" not in line


def test_check_names_a_parameter_the_cell_and_the_spec_do_not_share():
    assert params.check({"A": params.Whole(1, 3)}, A=2) == {"A": 2}
    with pytest.raises(params.ParameterError, match="not declared: B; not given: A"):
        params.check({"A": params.Whole(1, 3)}, B=2)


def test_each_is_a_plain_loop_outside_an_event_loop():
    assert list(each([1, 2, 3])) == [1, 2, 3]


def test_stop_during_a_loop_of_runs_ends_the_run_and_then_the_loop(url):
    """SIGINT (the toolbar's Stop) during the second of three runs: that run ends interrupted with the
    chapter's reason, the loop ends with Stopped instead of starting the third, and SIGINT is ours no more."""
    before = signal.getsignal(signal.SIGINT)
    states = []

    async def sweep():
        for n in each([1, 2, 3]):
            if n == 2:
                asyncio.get_running_loop().call_later(0.3, os.kill, os.getpid(), signal.SIGINT)
            states.append(await run(new_run(SYSTEM_PROMPT, "scan", "slow"), Workspace.copy_of().tools(),
                                    Options(base_url=url)) if n == 2 else None)

    with pytest.raises(Stopped):
        asyncio.run(sweep())
    assert len(states) == 2 and states[1].status == "interrupted"
    assert states[1].interruption == {"type": "cancelled", "reason": STOP_REASON}
    assert signal.getsignal(signal.SIGINT) is before


# -- Stop pressed at an event of the run --------------------------------------------------------------------
def test_stop_after_counts_from_the_tools_start_not_from_the_runs():
    """The first model call takes 400 ms here; Stop 200 ms after the tool starts still lands inside the scan (one
    turn paid, before its first progress event at 500 ms), where a Stop counted from the run's start would land in
    that model call (no turn at all). Both timers live on the run's own loop, so this holds on any machine."""
    from harness_lib.scripted import ScriptedProvider

    with ScriptedProvider(latency_ms=400) as slow:
        stop = common.StopAfter(0.2)
        state = asyncio.run(stop.run(run(new_run(SYSTEM_PROMPT, TASK, "slow"), Workspace.copy_of().tools(),
                                         Options(base_url=slow.base_url, on_progress=stop.progress,
                                                 trace=stop.trace()))))
    assert state.status == "interrupted" and state.interruption == {"type": "cancelled", "reason": STOP_REASON}
    assert (state.turns, state.tool_runs, stop.timeline) == (1, 0, [])
    assert stop.pressed is not None and stop.ms(stop.pressed) >= 200 and stop.ended >= stop.pressed


def test_stop_after_never_presses_once_the_run_has_ended_or_when_told_not_to(url):
    for seconds in (None, 30.0):  # 30 s: the timer is dropped when the run ends, not left to fire later
        stop = common.StopAfter(seconds, tool="list_files")
        state = asyncio.run(stop.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of().tools(),
                                         Options(base_url=url, trace=stop.trace()))))
        assert state.status == "completed" and stop.pressed is None and stop.started is not None
        assert stop._timer is None or stop._timer.cancelled()
