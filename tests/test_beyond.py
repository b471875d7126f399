"""The chapter layer's experiments beyond the chapter (issue 12, parts 2-4): each measured beside the
chapter's own behaviour, which must not move."""

import asyncio

import pytest

from harness_lib.chapter import plots
from harness_lib.chapter import s02_turn_cap as s02
from harness_lib.chapter import s05_tool_errors as s05
from harness_lib.chapter import s14_libraries as s14


def go(coro):
    return asyncio.run(coro)


@pytest.mark.slow
def test_permanent_errors_beside_the_chapters_run(url):
    perm = go(s05.permanent_errors(url))
    table, m = perm.table, perm.measured
    # the chapter's run, untouched by default
    assert (m["perm.chapter.status"], m["perm.chapter.turns"], f'{m["perm.chapter.cost"]:.6f}') == \
        ("max_turns_exceeded", 12, "0.018622")
    # ended by its reason, after a turn or two, as failed
    assert (m["perm.marked.status"], m["perm.marked.turns"]) == ("failed", 1)
    assert (m["perm.repeated.status"], m["perm.repeated.turns"]) == ("failed", 2)
    assert "permission denied: /etc/shadow" in table.loc["tool marks it permanent + permanent_error()", "why it ended"]
    # cheaper than the chapter's run and than the run that recovered
    assert m["perm.marked.cost"] < m["perm.repeated.cost"] < m["perm.recover.cost"] < m["perm.chapter.cost"]
    assert (m["perm.recover.status"], m["perm.recover.turns"]) == ("completed", 4)
    assert plots.png(s05.permanent_plot(table))[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cap_forecast_on_the_runaway(url):
    fc = go(s02.cap_forecast(url))
    table, curve, m = fc.table, fc.curve, fc.measured
    assert m["forecast.k3.max_error_pct"] < 1  # the bar; in fact 0
    assert (table.loc[3, "predicted_in"] == table.loc[3, "measured_in"]).all()
    assert list(table.loc[3, "measured_in"]) == [3431, 16259, 88649, 337299]  # the chapter's caps, as run
    assert 0 < m["forecast.k2.max_error_pct"] < 2  # two turns see the first, dearer, addition
    assert len(curve) == 100 and curve["predicted_usd"].is_monotonic_increasing


@pytest.mark.slow
def test_forecast_breaks_where_its_assumption_does(url):
    result = go(s02.forecast_breaks(url))
    breaks, m = result.table, result.measured
    assert m["forecast.breaks.runaway"] == 0
    assert 1 < m["forecast.breaks.replies"] < 50  # replies that vary: off by some percent, either way
    errors = breaks.loc["replies of varying length", "cost_error_pct"]
    assert (errors < 0).any() and (errors > 0).any()
    # a run that answers before the cap: the forecast is the cap's worst case, far above what it cost
    for run in ("plan (answers at turn 3)", "recover (answers at turn 4)"):
        assert (breaks.loc[run, "status"] == "completed").all() and (breaks.loc[run, "cost_error_pct"] > 100).all()
    fc = go(s02.cap_forecast(url))
    assert plots.png(s02.forecast_plot(fc.table, fc.curve, breaks))[:4] == b"\x89PNG"


def test_new_stop_conditions_table(url):
    table = go(s14.new_stop_conditions(url))
    row = table.loc["repeated_call(3)"]
    assert (row.status, row.interruption, row.turns) == ("interrupted", "stop_condition", 3)
    assert "condition=repeated_call(3)" in row["trace says"]
    assert table.loc["no_progress(3, progress=files_read)", "turns"] == 3
    assert table.loc["no_progress(2, progress=files_read)", "status"] == "completed"
    assert table.loc["any_of(max_budget(0.01), repeated_call(5))", "turns"] == 5
    assert table.loc["all_of(repeated_call(2), turn_cost_above(0.001))", "turns"] == 4
    assert set(table.loc[["repeated_failure(2)", "permanent_error(), read_file marks it"], "status"]) == {"failed"}


def test_a_condition_is_told_apart_from_a_users_stop(url):
    table = go(s14.condition_or_stop(url))
    assert table.loc["user presses Stop", "interruption"] == {"type": "cancelled", "reason": "user pressed Stop"}
    assert table.loc["a condition: when(turns >= 1)", "interruption"]["type"] == "stop_condition"
    assert table["resumable"].all()


# -- notebook 14: what sits under every library ------------------------------------------------------------------
def test_the_peer_libraries_as_recorded_when_the_bench_extra_is_not_here(tmp_path):
    recorded = s14.recorded_peers()
    assert recorded.source.startswith("recorded: benchmarks/RESULTS.md (20") and "at 50 model calls" in recorded.source
    table = recorded.table
    assert table.loc["openai-agents (chat-completions model, tracing off)", "at its cap"] == "raises MaxTurnsExceeded"
    assert table.loc["this harness, trace file on", "at its cap"] == "status max_turns_exceeded"
    assert table.loc["this harness, trace file on", "model calls / tool runs"] == "50 / 49"  # the last call pending
    assert len(table) == len(s14.PEERS) and table["version"].iloc[:3].str.match(r"\d").all()
    missing = s14.recorded_peers(tmp_path / "RESULTS.md")
    assert missing.table.empty and list(missing.table.columns) == s14.PEER_COLUMNS
    assert missing.source.startswith("neither the bench extra nor benchmarks/RESULTS.md is here")


@pytest.mark.slow
@pytest.mark.skipif(not s14.bench_installed(), reason="needs the bench extra (make bench)")
def test_the_peer_libraries_run_here_with_the_bench_extra(url):
    peers = go(s14.peers(url, cap=4))
    assert peers.source.startswith("measured here, just now") and "at 4 model calls" in peers.source
    assert peers.table["model calls / tool runs"].str.startswith("4 / ").all()
    assert peers.table.loc["this harness, trace file on", "at its cap"] == "status max_turns_exceeded"
    assert peers.table.loc["LangGraph prebuilt ReAct agent", "at its cap"] == "raises GraphRecursionError"
