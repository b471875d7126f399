"""Every figure issue 3 lists, measured by real runs against the scripted provider.

The numbers on the right-hand side are the chapter's; the left-hand side always comes from a run.
"""

import asyncio

import pandas as pd
import pytest

from harness_lib.chapter import common
from harness_lib.chapter import s01_loop as s01
from harness_lib.chapter import s02_turn_cap as s02
from harness_lib.chapter import s03_budget as s03
from harness_lib.chapter import s05_tool_errors as s05
from harness_lib.chapter import s06_dedupe as s06
from harness_lib.chapter import s07_approval as s07
from harness_lib.chapter import s08_resume as s08
from harness_lib.chapter import s09_cancellation as s09
from harness_lib.chapter import s10_trace as s10
from harness_lib.chapter import s11_latency as s11
from harness_lib.chapter.figures import DIFFERS, OFFLINE, OTHER_MACHINE, chapter_figures, compare, tally
from harness_lib.trace import read


def go(coro):
    return asyncio.run(coro)


def test_plan(url):
    plan = go(s01.loop_plan(url))
    out, m = plan.outcome, plan.measured
    assert (m["plan.turns"], m["plan.tools"], m["plan.in"], m["plan.out"]) == (3, 2, 815, 70)
    assert f'{m["plan.cost"]:.6f}' == "0.002470"
    assert m["plan.prompts"] == [204, 269, 342]
    assert [t["completion_tokens"] for t in out.state.per_turn] == [23, 29, 18]
    assert m["plan.answer"] == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    assert list(plan.transcript.role) == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


@pytest.mark.slow
def test_turn_cap(url):
    capped = go(s02.cap_table(url))
    table, m = capped.table, capped.measured
    assert (m["cap.in8"], m["cap.in50"], m["cap.in100"]) == (3431, 88649, 337299)
    assert f'{m["cap.cost20"]:.3f}' == "0.038"
    assert f'{m["cap.cost_ratio"]:.1f}' == "3.7" and f'{m["cap.in_ratio"]:.1f}' == "3.8"
    assert set(table.status) == {"max_turns_exceeded"}
    assert list(table.tool_runs) == [7, 19, 49, 99]  # the last turn's call is left pending


@pytest.mark.slow
def test_cost_vs_cap_prefix_sums_equal_separate_runs(url):
    table = go(s02.cap_table(url, caps=(8, 20))).table
    long = go(common.scenario(url, "runaway", max_turns=30))
    prefix = common.prefix_costs(long.state)
    for cap in (8, 20):
        assert prefix.loc[cap, "input_tokens"] == table.loc[cap, "in"]
        assert prefix.loc[cap, "cost_usd"] == pytest.approx(table.loc[cap, "cost_usd"], abs=1e-9)
    a, b, c = s02.quadratic_fit(prefix)
    assert a == pytest.approx(32, abs=0.5)  # half of the 64 tokens each turn adds


def test_budget(url):
    budget = go(s03.budget_table(url))
    table, m = budget.table, budget.measured
    assert f'{m["budget.spent"]:.6f}' == "0.010780" and m["budget.turns"] == 9
    assert table.overshoot_within_one_turn.all() and (table.overshoot_usd >= 0).all()
    assert table.turns.is_monotonic_increasing


def test_tool_error_policies_and_permanent_error(url):
    errors = go(s05.tool_errors(url))
    table, m = errors.table, errors.measured
    assert f'{m["errors.ratio"]:.1f}' == "4.7"
    assert m["errors.answers"] == "descriptive"
    assert table.loc["fatal", "status"] == "failed" and table.loc["descriptive", "status"] == "completed"
    assert (m["perm.turns"], m["perm.toolruns"], m["perm.in"]) == (12, 11, 7079)
    assert f'{m["perm.cost"]:.6f}' == "0.018622" and m["perm.status"] == "max_turns_exceeded"
    assert m["perm.answer"] is None
    assert f'{m["perm.ratio"]:.1f}' == "5.2"


def test_repeats_and_dedupe(url):
    repeats = go(s06.dedupe(url))
    table, m = repeats.table, repeats.measured
    assert f'{m["repeat.extra"]:.6f}' == "0.001050" and m["repeat.increase"] == 75
    assert m["repeat.cache_saves"] == 0
    assert table.loc["repeated read, read-only cache", "tool_runs"] == 1
    assert (m["naive.turns"], m["naive.runs"], m["naive.deleted"]) == (3, 1, ["access.log"])
    assert (m["gate.turns"], m["gate.runs"], m["gate.deleted"]) == (3, 2, ["access.log", "access.log"])


def test_approval(url):
    m = go(s07.approval(url)).measured
    assert m["approval.stop"] == 'turn 2: interrupted / approval -> delete_file({"path":"access.log"})'
    assert m["approval.deleted_before"] == []
    assert (m["approve.turns"], m["approve.deleted"]) == (3, ["access.log"])
    assert m["approve.answer"] == "Deleted access.log to free space."
    assert (m["reject.turns"], m["reject.deleted"]) == (3, [])
    assert m["reject.answer"] == "I did not delete anything: you declined the deletion."
    assert m["silent.deleted"] == [] and m["silent.answer"] == "Deleted access.log to free space."


@pytest.mark.slow
def test_resume_after_sigkill(url, tmp_path):
    resume = go(s08.resume_after_kill(url, tmp_path))
    table, m = resume.table, resume.measured
    assert (m["resume.restored_turns"], m["resume.restored_messages"], m["resume.restored_status"]) == (2, 6, "running")
    assert f'{m["resume.restored_cost"]:.6f}' == "0.001570"
    assert (m["resume.turns"], m["resume.status"]) == (3, "completed")
    assert f'{m["resume.cost"]:.6f}' == "0.002470"
    assert m["resume.tool_runs"] == "list_files, read_file:errors.log"  # each tool ran once, across both
    assert table.index[0].endswith("exit -9)")


@pytest.mark.slow
def test_cancellation(url):
    scans = go(s09.cancellation(url))
    table, m = scans.table, scans.measured
    # The chapter's own times (a tick every 500 ms, a 3 s scan): the figures themselves, so absolute, a little
    # wider than the chapter's tolerance (data/chapter_figures.csv); a sleep is never early, only late.
    assert 450 <= m["cancel.progress1"] <= 600 and 950 <= m["cancel.progress2"] <= 1100
    assert 2950 <= m["cancel.full"] <= 3300 and m["cancel.full_status"] == "completed"
    assert (m["cancel.stop_status"], m["cancel.reason"]) == ("interrupted", "user pressed Stop")
    deaf = table.loc["Stop at 1.2 s, tool deaf to Stop"]
    assert deaf.status == "interrupted" and deaf.stopped_after_ms >= 2900
    # Click to stop, against the same Stop measured in the same experiment with a tool deaf to it (~1.8 s):
    # under a tenth of it. A Stop that waited even for the scan's next tick (300 ms away) could not.
    assert m["cancel.click_to_stop"] < deaf.stop_to_end_ms / 10, (m["cancel.click_to_stop"], deaf.stop_to_end_ms)


def test_trace_equals_the_chapter(url, tmp_path):
    demo = go(s10.trace_demo(url, tmp_path))
    events, diff, m = demo.events, demo.diff, demo.measured
    assert m["trace.lines"] == 6, diff[~diff.same]
    assert len({e["runId"] for e in events}) == 1 and events == read(tmp_path / "trace.jsonl")


def test_comparison_has_no_differences_on_what_these_tests_measure(url):
    m = go(s01.loop_plan(url)).measured
    table = compare(m, section="01-loop")
    assert len(table) == 9 and not (table.match == DIFFERS).any()


def test_a_streamed_run_is_the_same_run_with_its_answer_in_pieces(url):
    """Notebook 11's streaming cell: the same three turns, tokens and dollars as the plain run; the answer
    arrives one text token a piece, and one step line per turn and per tool call comes before it."""
    pieces, steps = [], []
    out = go(s11.streamed(url, "plan", on_step=steps.append, on_text=pieces.append, max_turns=20))
    s = out.state
    assert (s.status, s.turns, s.tool_runs, s.prompt_tokens, s.completion_tokens) == ("completed", 3, 2, 815, 70)
    assert round(s.own_cost_usd, 6) == 0.00247
    assert "".join(pieces) == s.output == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    # one piece a token of the text: 17, and the 18th token billed is the empty tool_calls array, "[]"
    assert len(pieces) == s.per_turn[-1]["completion_tokens"] - 1 == 17
    assert [line.split(":")[0] for line in steps if line.startswith("step")] == ["step 1", "step 2", "step 3"]
    assert sum(line.startswith("   ") for line in steps) == 2


# -- what "match" means, by kind (issue 19 items 2 and 3) ---------------------------------------------------
def test_times_of_another_machine_are_measured_here_never_within_tolerance():
    """The plan run's wall time and the harness's overhead are figures of the chapter's machine and runtime:
    ours is shown beside them with the reason, whatever it is, and never counted as reproduced."""
    for ours in (9, 89, 15, 5000):
        table = pd.concat([compare({"plan.ms": ours}, section="01-loop"),
                           compare({"latency.overhead": ours}, section="11-latency")]).set_index("id")
        assert set(table.match) == {OTHER_MACHINE}, table.match
        assert table.loc["plan.ms", "ours"] == f"{ours} ms" and table.loc["plan.ms", "chapter"] == "89 ms"
        assert "Node 22" in table.loc["plan.ms", "tolerance"] and "CPython" in table.loc["plan.ms", "tolerance"]
        line = tally(table.reset_index())
        assert line.startswith("0 of 2 chapter figures reproduced exactly, 0 within tolerance, "
                               "2 measured here on another machine, ") and line.endswith(", 0 differ"), line


def test_only_the_times_the_design_sets_keep_a_tolerance():
    """A tolerance is a claim that the figure is ours to reproduce: the scan's ticks (500, 1000 ms), its length
    (3 s), a Stop at 1.2 s and a Stop that waits for nothing are set by the tool and the experiment, not by
    the machine. Nothing else is judged within a tolerance."""
    figures = chapter_figures()
    assert set(figures.id[figures.kind == "time"]) == {"cancel.progress1", "cancel.progress2", "cancel.full",
                                                        "cancel.stop", "cancel.click_to_stop"}
    assert set(figures.id[figures.kind == "machine"]) == {"plan.ms", "latency.overhead"}
    assert (figures.tolerance[figures.kind == "machine"] == "").all()


LIBRARIES = {"libs.ai_versions": "945", "libs.ai_majors": "from 5 to 7", "libs.ai_agent_class": "Experimental_Agent",
             "libs.langchain_versions": "132", "libs.openai_agents_versions": "83", "libs.openai_agents_major": "0.x",
             "libs.ai_exit": "stopWhen (a list of stop predicates)"}


def test_section_14s_registry_figures_are_listed_and_counted_even_when_nothing_is_measured():
    """Notebook 14 measures none of them (they are a registry's history): its comparison still names all
    seven, and every tally counts them, never leaving them out."""
    table = compare({}, section="14-libraries")
    assert dict(zip(table.id, table.chapter)) == LIBRARIES
    assert set(table.match) == {OFFLINE} and (table.ours == "").all()
    assert tally(table) == ("0 of 7 chapter figures reproduced exactly, 0 within tolerance, 0 not reproducible "
                            "here, 7 not reproducible offline, 0 differ")
    everything = compare({})
    assert set(LIBRARIES) <= set(everything.id) and tally(everything).endswith("7 not reproducible offline, 0 differ")


def test_a_figure_the_chapter_prints_twice_is_counted_as_a_repeat():
    """Section 15 prints three figures of sections 01 and 02 again: each repeat names the figure it repeats,
    with the same value, and the tally says how many of the exact ones are repeats."""
    figures = chapter_figures().set_index("id")
    again = figures[figures.tolerance.str.startswith("repeats ")]
    assert sorted(again.index) == ["left.in100", "left.in8", "left.prompts"]
    for figure_id, row in again.iterrows():
        first = row.tolerance.removeprefix("repeats ")
        assert figures.loc[first, "value"] == row.value and figures.loc[first, "kind"] == row.kind, figure_id
    measured = {"left.in8": 3431, "left.in100": 337299, "left.prompts": [204, 269, 342], "cap.in8": 3431}
    assert tally(compare(measured)).startswith("4 of 15 chapter figures reproduced exactly (3 of them repeats "
                                               "of earlier figures), 0 within tolerance, ")
    assert tally(compare({**measured, "left.in8": 3430})).startswith("3 of 15 chapter figures reproduced "
                                                                     "exactly (2 of them repeats")
    assert "(" not in tally(compare({"cap.in8": 3431}, section="02-turn-cap"))
