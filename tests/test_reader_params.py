"""A reader's hands on the notebooks: odd but reasonable parameters work, unreasonable ones get one line,
the provider outlives every cell, and the toolbar's Stop (SIGINT) is the chapter's Stop.

The chapter functions are tested directly with the values a reader types; two notebooks are executed
with injected parameters (as papermill does) to check the cells around those functions too."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient
from scan_ticks import ended_before_the_next_tick

from harness_lib.chapter import params
from harness_lib.chapter import s00_scripted_provider as s00
from harness_lib.chapter import s01_loop as s01
from harness_lib.chapter import s02_turn_cap as s02
from harness_lib.chapter import s03_budget as s03
from harness_lib.chapter import s05_tool_errors as s05
from harness_lib.chapter import s06_dedupe as s06
from harness_lib.chapter import s08_resume as s08
from harness_lib.chapter import s09_cancellation as s09
from harness_lib.chapter import s10_trace as s10
from harness_lib.chapter import s11_latency as s11
from harness_lib.chapter import s12_local_model as s12
from harness_lib.chapter import s13_subagent as s13
from harness_lib.chapter import s14_libraries as s14
from harness_lib.chapter.figures import NO_FIGURE, compare, relabel, tally
from harness_lib.chapter.stop_button import STOP_REASON, Stopped, stoppable, whole
from harness_lib.loop import Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

ROOT = Path(__file__).resolve().parents[1]


def arun(coro):
    return asyncio.run(coro)


def one_line(exc: params.ParameterError) -> str:
    (line,) = exc._render_traceback_()
    return line


# -- parameters a reader types --------------------------------------------------------------------------
def test_caps_without_the_chapters_values_are_compared_as_having_no_figure(url):
    table, measured = arun(s02.cap_table(url, caps=(5, 10, 30, 60)))
    assert table.index.tolist() == [5, 10, 30, 60]
    comparison = compare(measured, section="02-turn-cap")
    assert (comparison["match"] == NO_FIGURE).all() and len(comparison) == 4
    assert comparison["ours"].tolist() == [str(int(table.loc[c, "in"])) for c in (5, 10, 30, 60)]
    line = tally(comparison)
    assert line.startswith("0 of 0 chapter figures") and line.endswith("; 4 more measured, with no chapter figure")


def test_caps_beyond_the_long_run_leave_blanks_not_a_keyerror(url):
    table, measured = arun(s02.cap_table(url, caps=(10, 40)))
    prefix = arun(s02.runaway_prefix(url, long_cap=30))
    beside = s02.prefix_check(prefix, table)
    assert beside.loc[10, ("prefix of one long run", "input_tokens")] == table.loc[10, "in"]
    assert pd.isna(beside.loc[40, ("prefix of one long run", "input_tokens")])
    d = s02.doubling(prefix)
    assert (d["from"], d["to"]) == (15, 30) and d["in_ratio"] > 2  # quadratic: more than double
    assert "<table" in params.table(beside)._repr_html_()


def test_one_chapter_cap_among_others_is_compared_exactly(url):
    _, measured = arun(s02.cap_table(url, caps=[8, 9]))
    comparison = compare(measured, section="02-turn-cap").set_index("figure")
    assert comparison.loc["runaway, cap 8: input tokens", "match"] == "exact"
    assert comparison.loc["runaway, cap 9: input tokens", "match"] == NO_FIGURE


@pytest.mark.parametrize("budgets", [0.01, [0.01], (0.010, 0.02)])
def test_a_scalar_budget_or_any_tuple_works(url, budgets):
    table, measured = arun(s03.budget_table(url, budgets=budgets))
    comparison = compare(measured, section="03-budget")
    assert set(comparison.loc[comparison["id"] != "", "match"]) == {"exact"}
    assert len(table) == (1 if not isinstance(budgets, tuple) else 2)


def test_budgets_without_the_chapters_value_say_so(url):
    _, measured = arun(s03.budget_table(url, budgets=(0.02, 0.03)))
    comparison = compare(measured, section="03-budget")
    assert comparison["match"].tolist() == [NO_FIGURE, NO_FIGURE]
    assert "0 of 0" in tally(comparison)


def test_tally_of_an_empty_comparison_is_a_sentence():
    assert tally(compare({}, section="03-budget")).startswith("0 of 0 chapter figures")


def test_every_comparison_shows_its_tolerance():
    table = compare({"cancel.full": 3010, "plan.turns": 3, "latency.overhead": 9}).set_index("id")
    assert table.loc["cancel.full", "tolerance"] == "± 100 ms"
    assert table.loc["plan.turns", "tolerance"] == "exact"
    assert table.loc["latency.overhead", "tolerance"].startswith("none: another machine and runtime")
    assert table.loc["local.turns", "tolerance"] == "needs the chapter's machine"


def test_a_misspelt_figure_id_is_an_error_not_a_silent_row():
    with pytest.raises(KeyError, match="cap.in9"):
        compare({"cap.in9": 1})
    assert list(relabel({"cap.in8": 1}, "CAPS=(8,)")) == ["runaway, cap 8: input tokens (CAPS=(8,))"]


@pytest.mark.parametrize("call, name", [
    (lambda u: s02.cap_table(u, caps="many"), "CAPS"),
    (lambda u: s02.cap_table(u, caps=(0, 8)), "CAPS"),
    (lambda u: s02.cap_table(u, caps=()), "CAPS"),
    (lambda u: s02.cap_table(u, caps=(8.5,)), "CAPS"),
    (lambda u: s02.runaway_prefix(u, long_cap=True), "LONG_CAP"),
    (lambda u: s03.budget_table(u, budgets=-0.01), "BUDGETS"),
    (lambda u: s03.budget_table(u, budgets=float("nan")), "BUDGETS"),
    (lambda u: s03.budget_table(u, budgets=(0.01, "x")), "BUDGETS"),
    (lambda u: s01.loop_plan(u, max_turns=0), "MAX_TURNS"),
    (lambda u: s05.tool_errors(u, cap=-1), "CAP"),
    (lambda u: s08.resume_after_kill(u, kill_after_tool_results=3), "KILL_AFTER_TOOL_RESULTS"),
    (lambda u: s08.resume_after_kill(u, hold_ms=-5), "HOLD_MS"),
    (lambda u: s09.cancellation(u, stop_at=0), "STOP_AT"),
    (lambda u: s11.latency((), repeats=1), "LATENCIES_MS"),   # one latency is fine (no slope), none is not
    (lambda u: s11.latency((0, 400), repeats=1), "LATENCIES_MS"),
    (lambda u: s11.latency(0, repeats=6), "REPEATS"),
    (lambda u: s13.subagent(u, child_max_turns=0), "CHILD_MAX_TURNS"),
    (lambda u: s13.subagent(u, child_budget_usd="5"), "CHILD_BUDGET_USD"),
    (lambda u: s13.subagent(u, child_model="slow", stop_at=0), "STOP_AT"),
    (lambda u: s14.peers(u, cap="8"), "STEP_COUNT"),
    (lambda u: s00.switch_servers(u, "runaway"), "SCENARIO"),
    (lambda u: s06.try_dedupe(u, "repeat", "sometimes"), "TRY_DEDUPE"),
    (lambda u: s10.trace_demo(u, run_id=""), "RUN_ID"),
    (lambda u: s12.local_model(u, model="m", max_turns=0), "MAX_TURNS"),
    (lambda u: s12.arun_six(0), "LOCAL_MAX_TURNS"),
    (lambda u: s02.forecast_lines(u, observed=1), "OBSERVED"),
    (lambda u: s02.forecast_lines(u, caps=(0,)), "CAPS"),
    (lambda u: s02.cap_forecast(u, observed=(2, "3")), "OBSERVED"),
    (lambda u: s02.forecast_breaks(u, observed=2.5), "OBSERVED"),
    (lambda u: s02.forecast_breaks(u, caps="many"), "CAPS"),
    (lambda u: s05.permanent_errors(u, cap=0), "PERMANENT_CAP"),
    (lambda u: s05.permanent_errors(u, recover_cap=True), "CAP"),
    (lambda u: s03.strict_budgets(u, budgets=-0.01), "BUDGETS"),
    (lambda u: s03.strict_budgets(u, budgets=(0.01,), sweep=-1), "SWEEP"),
])
def test_an_unreasonable_value_gets_one_line_naming_the_parameter(url, call, name):
    with pytest.raises(params.ParameterError) as info:
        arun(call(url))
    line = one_line(info.value)
    assert line.startswith(f"ParameterError: {name} accepts ") and "\n" not in line


@pytest.mark.slow
def test_stop_later_than_the_scan_is_never_pressed(url):
    table, _, measured = arun(s09.cancellation(url, stop_at=3.6))
    assert table["stop"].iloc[1:].tolist() == ["never pressed: the run ended first"] * 2
    assert table["stop_to_end_ms"].isna().all() and (table["status"] == "completed").all()
    assert "cancel.click_to_stop" not in measured and "never pressed" in s09.cancel_story(table)
    assert all(not k.startswith("cancel.stop") for k in measured)  # relabelled: STOP_AT differs


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary directory of this test's own, so other processes' temp folders do not count."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    gc.collect()  # a workspace copy goes with its object
    assert sorted(p.name for p in folder.iterdir()) == []


@pytest.mark.slow
def test_the_kill_experiment_anywhere_and_leaves_no_folder(url, private_tmp):
    table, events, measured, *_ = arun(s08.resume_after_kill(url, kill_after_tool_results=1, hold_ms=400))
    assert table.index[0] == "child killed (SIGKILL, exit -9)"
    assert table["turns"].tolist() == [1, 3] and table["status"].tolist() == ["running", "completed"]
    assert all(" " in k for k in measured)  # killed elsewhere than the chapter: no chapter figure applies


@pytest.mark.slow
def test_trace_demo_and_the_two_process_run_leave_no_folder(url, private_tmp):
    _, events, _, measured = arun(s10.trace_demo(url, run_id="n1"))
    assert measured == {"trace.lines": 6}
    other = arun(s10.two_process_run(url, run_id="two"))
    stops = [(e["status"], e["reason"]) for e in other if e["type"] == "run_stopped"]
    assert stops == [("interrupted", "approval"), ("completed", "completed")]  # child process, then here
    assert {e["runId"] for e in other} == {"two"}


def test_the_prose_about_the_child_follows_its_cap(url):
    state, events, table = arun(s13.subagent(url, child_max_turns=2))
    story = s13.child_story(state, events)
    assert table.loc["child (research)", "turns"] == 2 and story.startswith("The child spent 2 turns")
    state, events, _ = arun(s13.subagent(url))
    assert s13.child_story(state, events).startswith("The child spent 3 turns and ran 2 tool calls")


def test_fatal_row_does_not_claim_the_model_read_the_error(url):
    table, _, _ = arun(s05.tool_errors(url))
    assert table.loc["fatal", "what the model read"].startswith("(nothing")
    assert table.loc["descriptive", "what the model read"].startswith("Error: no such file")


def test_recorded_local_model_data_is_labelled_on_its_plot():
    from harness_lib.chapter import plots

    results = s12.recorded_local_model().set_index("task")
    fig = plots.bars(results, ["wall_ms"], titles=["wall time per task (ms)"])
    assert "recorded" in fig.get_suptitle().lower()


# -- tables and text as a reader sees them ----------------------------------------------------------------
def test_table_aligns_text_left_keeps_line_breaks_and_is_deterministic():
    df = pd.DataFrame({"n": [1, 2], "what": ["a\nb", "<c>"]}, index=pd.Index(["x", "y"], name="k"))
    html = params.table(df)._repr_html_()
    assert html == params.table(df.copy())._repr_html_()
    assert '<td style="text-align: left; white-space: pre-wrap">a\nb</td>' in html and "&lt;c&gt;" in html
    assert "<td>1</td>" in html and repr(params.table(df)) == repr(df)


def test_text_scrolls_instead_of_wrapping():
    html = params.Text('{"ms":12,"a":"<"}')._repr_html_()
    assert "white-space: pre" in html and '"ms":12' in html and "&lt;" in html


# -- the provider lives as long as the kernel -------------------------------------------------------------
def test_shared_provider_is_one_per_process_and_restarts_if_stopped():
    a = ScriptedProvider.shared()
    assert ScriptedProvider.shared() is a
    state = arun(run(new_run(SYSTEM_PROMPT, TASK, "answer"), [], Options(base_url=a.base_url)))
    assert state.status == "completed"
    a.stop()
    b = ScriptedProvider.shared()
    assert b is not a and arun(run(new_run(SYSTEM_PROMPT, TASK, "answer"), [], Options(base_url=b.base_url))).status \
        == "completed"


# -- the Stop button (SIGINT), in plain asyncio --------------------------------------------------------------
def _interrupt_after(seconds):
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.slow
def test_sigint_is_the_chapters_stop_and_the_handler_is_restored(url):
    before = signal.getsignal(signal.SIGINT)
    ticks = []

    async def main():
        _interrupt_after(0.8)  # 0.3 s after the scan's first tick, 0.2 s before its second
        return await stoppable(run(new_run(SYSTEM_PROMPT, TASK, "slow"), Workspace.copy_of().tools(),
                                   Options(base_url=url, on_progress=lambda label: ticks.append(time.perf_counter()))))

    state, press = arun(main())
    assert state.status == "interrupted" and state.interruption == {"type": "cancelled", "reason": STOP_REASON}
    assert press.pressed and ended_before_the_next_tick(ticks, press.at, press.ended) is None, \
        ended_before_the_next_tick(ticks, press.at, press.ended)
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
def test_sigint_during_a_many_run_experiment_ends_it_with_one_line(url):
    ended_runs = []

    async def main():
        _interrupt_after(1.0)  # 1 s into the first of three scans of 3 s each
        return await s09.cancellation(url, progress=ended_runs.append)  # a line as each run ends

    started = time.monotonic()
    with pytest.raises(Stopped) as info:
        arun(main())
    took = time.monotonic() - started
    # It did not go on to the next runs (no run ended), nor wait for the scan under way: it ended before
    # that scan's 3 s were up (about 1 s in), where a Stop that waited for it could not.
    assert ended_runs == [] and took < 3.0, (ended_runs, took)
    assert info.value._render_traceback_()[0].startswith(f"Stopped: {STOP_REASON}")


def test_whole_returns_the_result_when_nobody_presses(url):
    assert arun(whole(asyncio.sleep(0, result=42))) == 42


# -- notebooks with injected parameters (as papermill does) --------------------------------------------------
def _execute_with(name: str, parameters: str, tmp_path: Path):
    path = next((ROOT / "notebooks").glob(f"{name}*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = nbformat.v4.new_code_cell(parameters, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(at + 1, injected)  # after the defaults, as papermill does: unnamed parameters keep them
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _outputs(nb, kind):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == kind]


@pytest.mark.slow
def test_notebook_02_with_other_caps_runs_clean(tmp_path):
    nb = _execute_with("02", "CAPS = (5, 10, 30, 60)\nLONG_CAP = 60", tmp_path)
    assert not _outputs(nb, "error")
    text = "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    assert "cap 30 -> 60" in text and "0 of 0 chapter figures" in text
    html = "".join(o.data.get("text/html", "") for o in _outputs(nb, "execute_result"))
    assert NO_FIGURE in html


@pytest.mark.slow
def test_notebook_03_with_a_scalar_budget_and_a_bad_one(tmp_path):
    nb = _execute_with("03", "BUDGETS = 0.01", tmp_path)
    assert not _outputs(nb, "error")
    assert "3 of 3 chapter figures reproduced exactly" in "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    nb = _execute_with("03", "BUDGETS = 'a lot'", tmp_path)
    # Every cell runs here (allow_errors), as the late cells of a Run All on a busy machine do: each cell after
    # the failed check is held and says the check's one line, none reaches library code with 'a lot'.
    errors = _outputs(nb, "error")
    assert len(errors) > 1 and all(e.traceback == ["ParameterError: BUDGETS accepts a number of dollars above 0 and "
                                                   "at most 1, or a tuple of them; got 'a lot'"] for e in errors)


def test_a_failed_check_holds_the_other_cells_until_a_check_passes():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        assert shell.run_cell("from harness_lib.chapter import params, s03_budget as s03\n"
                              "BUDGETS, SWEEP = 'a lot', 4").success
        check = "BUDGETS, SWEEP = params.check(s03.PARAMETERS, BUDGETS=BUDGETS, SWEEP=SWEEP).values()"
        assert isinstance(shell.run_cell(check).error_in_exec, params.ParameterError)
        held = shell.run_cell("ran = [b for b in BUDGETS]")
        assert isinstance(held.error_in_exec, params.ParameterError) and "ran" not in shell.user_ns
        assert isinstance(shell.run_cell("BUDGETS == 'a lot'").error_in_exec, params.ParameterError)  # reads it
        assert "got 'a lot'" in str(held.error_in_exec)
        assert shell.run_cell("BUDGETS = (0.01, 0.02)").success  # setting a parameter is never held
        assert isinstance(shell.run_cell("ran = 1").error_in_exec, params.ParameterError)  # until it is checked
        assert shell.run_cell(check).success
        assert shell.run_cell("ran = [b for b in BUDGETS]").success and shell.user_ns["ran"] == [0.01, 0.02]
    finally:
        params._hold(None, [])
        InteractiveShell.clear_instance()


@pytest.mark.slow
def test_notebook_05_with_other_caps_prints_its_ratio_from_the_runs(tmp_path):
    """Issue 19: any CAP but 20, or PERMANENT_CAP = 13, ended Run All in KeyError: 'perm.ratio'."""
    nb = _execute_with("05", "CAP = 30\nPERMANENT_CAP = 13", tmp_path)
    assert not _outputs(nb, "error")
    text = "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    assert "turns=13  toolruns=12  in=8,124  cost=$0.021084" in text
    assert "5.9 times the cost of the run that recovered" in text and "0 of 0 chapter figures" in text


@pytest.mark.slow
def test_notebook_14_says_in_one_line_why_it_refuses_a_limit_written_as_text(tmp_path):
    """MY_LIMIT = "3" used to reach the reader's condition, which raised comparing a count with a string, and the
    run printed status=failed turns=0 and nothing else; the setup cell now refuses it first, in one line."""
    nb = _execute_with("14", 'MY_LIMIT = "3"', tmp_path)
    first = _outputs(nb, "error")[0]
    assert first.traceback == ["ParameterError: MY_LIMIT accepts a whole number from 1 to 50; got '3'"]
    assert "status=failed" not in "".join(o.get("text", "") for o in _outputs(nb, "stream"))


def test_the_prose_about_the_policies_follows_the_cap(url):
    table, _, _ = arun(s05.tool_errors(url))
    assert s05.policy_story(table).startswith("Only `descriptive` got to an answer")
    table, _, _ = arun(s05.tool_errors(url, cap=2))
    story = s05.policy_story(table)
    assert story.startswith("No policy got to an answer") and "after 2 turns" in story
    assert " $" not in story  # dollars only inside code spans: a bare "$" starts a formula in Markdown


# -- the beyond-the-chapter cells with a reader's values ------------------------------------------------------
def test_forecast_and_caps_the_chapter_has_no_figure_for(url):
    lines = arun(s02.forecast_lines(url, observed=2, caps=[5, 60])).splitlines()
    assert [line.split(":")[0] for line in lines] == ["cap   5", "cap  60"]
    table, curve, _ = arun(s02.cap_forecast(url, observed=(2, 2), caps=(5, 60)))
    assert table.index.get_level_values("observed_turns").unique().tolist() == [2]  # OBSERVED=2: once
    assert curve.index.max() == 60
    breaks, _ = arun(s02.forecast_breaks(url, observed=4, caps=(5,)))
    assert breaks.index.get_level_values("cap").unique().tolist() == [5]
    # plan answers at turn 3: it is priced from the 3 turns it has, the others from the 4 asked for
    assert breaks["observed_turns"].tolist() == [4, 4, 3, 4]


@pytest.mark.parametrize("budgets", [0.01, (0.02, 0.007)])
def test_strict_budgets_take_one_budget_or_any_tuple_and_show_those_rows(url, budgets):
    table, measured = arun(s03.strict_budgets(url, budgets=budgets, sweep=0))
    rows = s03.budget_rows(table, budgets)
    wanted = sorted(budgets) if isinstance(budgets, tuple) else [budgets]
    assert table.index.get_level_values("budget_usd").unique().tolist() == wanted  # in budget order
    assert len(rows) == 2 * len(wanted) and measured["strict.over_budget_runs"] == 0
    swept, _ = arun(s03.strict_budgets(url, budgets=budgets, sweep=3))
    assert len(swept) == 2 * len(set(wanted) | {0.005, 0.0275, 0.05, 0.01})
