"""Pricing a cap before raising it (issue 12, part 3): the forecast against runs of every cap, and what
it does with sources it cannot use."""

import asyncio
import json

import pytest

from harness_lib.forecast import ForecastError, forecast, turns_of
from harness_lib.loop import Options, run
from harness_lib.pricing import Pricing
from harness_lib.state import new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def go(provider, scenario, trace=None, **options):
    ws = Workspace.copy_of()
    trace = trace or Trace(timestamps=False)
    s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), ws.tools(),
                        Options(base_url=provider.base_url, trace=trace, **options)))
    return s, trace


@pytest.fixture(scope="module")
def runaway3(provider, tmp_path_factory):
    path = tmp_path_factory.mktemp("fc") / "trace.jsonl"
    s, trace = go(provider, "runaway", trace=Trace(path), max_turns=3)
    return s, trace, path


def test_runaway_from_three_turns_is_within_one_percent_of_every_cap(provider, runaway3):
    s, _, path = runaway3
    predicted = {f.cap: f for f in forecast(path, observed=3)}
    for cap in (8, 20, 50, 100):
        measured, _ = go(provider, "runaway", max_turns=cap)
        f = predicted[cap]
        assert f.extrapolated and f.observed_turns == 3
        assert abs(f.cost_usd - measured.own_cost_usd) / measured.own_cost_usd < 0.01
        assert abs(f.input_tokens - measured.prompt_tokens) / measured.prompt_tokens < 0.01
        # in fact exact: the growth is constant from the second addition on
        assert f.input_tokens == measured.prompt_tokens and f.output_tokens == measured.completion_tokens


def test_every_source_gives_the_same_forecast(runaway3):
    s, trace, path = runaway3
    by_path = forecast(path)
    assert forecast(trace.events) == by_path == forecast(s) == forecast(s.per_turn)
    assert [f.input_tokens for f in by_path] == [3431, 16259, 88649, 337299]  # the chapter's caps


def test_two_turns_see_the_first_dearer_addition(runaway3):
    s, _, _ = runaway3
    two = {f.cap: f for f in forecast(s, observed=2)}
    three = {f.cap: f for f in forecast(s, observed=3)}
    assert two[100].input_tokens > three[100].input_tokens  # +65 a turn instead of +64: an overestimate
    assert 0 < (two[100].input_tokens - three[100].input_tokens) / three[100].input_tokens < 0.02


def test_caps_within_the_observed_turns_are_sums_not_guesses(runaway3):
    s, _, _ = runaway3
    f1, f3 = forecast(s, observed=3, caps=(1, 3))
    assert (f1.extrapolated, f3.extrapolated) == (False, False)
    assert f3.input_tokens == s.prompt_tokens and f"{f3.cost_usd:.6f}" == f"{s.own_cost_usd:.6f}"


def test_the_model_breaks_on_a_run_that_answers(provider):
    # plan answers at turn 3: the forecast prices "more of the same", the worst case a cap allows
    s, _ = go(provider, "plan", max_turns=20)
    f = forecast(s, observed=3, caps=(8,))[0]
    assert s.status == "completed" and f.cost_usd > 3 * s.own_cost_usd


def test_pricing_is_the_readers(runaway3):
    s, _, _ = runaway3
    double = Pricing(usd_per_input_token=4e-6, usd_per_output_token=24e-6)
    a, b = forecast(s, caps=(20,))[0], forecast(s, caps=(20,), pricing=double)[0]
    assert b.cost_usd == pytest.approx(2 * a.cost_usd, abs=2e-6)


def test_shrinking_prompts_never_go_below_zero():
    rows = [{"prompt_tokens": 300, "completion_tokens": 10}, {"prompt_tokens": 200, "completion_tokens": 10}]
    f = forecast(rows, observed=2, caps=(10,))[0]
    assert f.input_tokens == 300 + 200 + 100  # then zero, not negative


# -- sources it cannot use ------------------------------------------------------------------------------
def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def turn(run_id, n, prompt, completion=23):
    return json.dumps({"runId": run_id, "type": "turn", "turn": n, "prompt_tokens": prompt,
                       "completion_tokens": completion})


def test_fewer_turns_than_needed(runaway3):
    s, _, _ = runaway3
    with pytest.raises(ForecastError, match="has 3 turn"):
        forecast(s, observed=5)
    with pytest.raises(ForecastError, match="at least 2"):
        forecast(s, observed=1)
    with pytest.raises(ForecastError, match="has 1 turn"):
        forecast(s.per_turn[:1], observed=None)
    with pytest.raises(ForecastError, match="has 0 turn"):
        forecast([], observed=2)


@pytest.mark.parametrize("caps", [(), (0,), (8, -1), (2.5,), (True,), ("8",), (10**7,)])
def test_caps_that_make_no_sense(runaway3, caps):
    with pytest.raises(ForecastError):
        forecast(runaway3[0], caps=caps)


def test_a_torn_last_line_is_skipped_and_foreign_lines_are_not_turns(tmp_path):
    path = write(tmp_path / "t.jsonl", [
        '{"level":"info","msg":"another program writes here too"}',
        turn("r", 1, 204), '{"runId":"r","type":"tool_result","ok":true}', turn("r", 2, 269),
        '{"type":"turn","turn":1,"prompt_tokens":9}',   # no runId: not one of ours
        turn("r", 3, 333)])
    with open(path, "a") as f:
        f.write('{"runId":"r","type":"turn","tu')      # the process died mid-line
    assert [r["prompt_tokens"] for r in turns_of(path)] == [204, 269, 333]
    assert forecast(path, caps=(8,))[0].input_tokens == 3431


def test_a_bad_line_in_the_middle_is_an_error(tmp_path):
    path = write(tmp_path / "t.jsonl", [turn("r", 1, 204), "not json at all", turn("r", 2, 269)])
    with pytest.raises(ForecastError, match="not a JSON line"):
        forecast(path, observed=2)


def test_several_runs_need_a_run_id(tmp_path):
    path = write(tmp_path / "t.jsonl", [turn("parent", 1, 204), turn("parent.c1", 1, 150),
                                        turn("parent", 2, 269), turn("parent.c1", 2, 180)])
    with pytest.raises(ForecastError, match="2 runs"):
        forecast(path, observed=2)
    assert forecast(path, observed=2, caps=(2,), run_id="parent.c1")[0].input_tokens == 330
    with pytest.raises(ForecastError, match="no turns of run 'nobody'"):
        forecast(path, run_id="nobody")


def test_missing_and_repeated_turns(tmp_path):
    gap = write(tmp_path / "gap.jsonl", [turn("r", 1, 204), turn("r", 3, 333)])
    with pytest.raises(ForecastError, match=r"missing turn\(s\) \[2\]"):
        forecast(gap, observed=2)
    # a turn paid by a process that died before saving it, then paid again: the later line counts
    again = write(tmp_path / "again.jsonl", [turn("r", 1, 204), turn("r", 2, 999), turn("r", 2, 269)])
    assert [r["prompt_tokens"] for r in turns_of(again)] == [204, 269]


@pytest.mark.parametrize("line", [
    '{"runId":"r","type":"turn","turn":2,"prompt_tokens":"269","completion_tokens":23}',
    '{"runId":"r","type":"turn","turn":2,"prompt_tokens":-1,"completion_tokens":23}',
    '{"runId":"r","type":"turn","turn":2,"completion_tokens":23}',
    '{"runId":"r","type":"turn","turn":"2","prompt_tokens":269,"completion_tokens":23}',
])
def test_malformed_turn_lines(tmp_path, line):
    path = write(tmp_path / "t.jsonl", [turn("r", 1, 204), line])
    with pytest.raises(ForecastError):
        forecast(path, observed=2)


@pytest.mark.parametrize("source", [42, None, {"prompt_tokens": 1}, [1, 2, 3], [{"prompt_tokens": 1}] * 3])
def test_sources_that_are_not_runs(source):
    with pytest.raises(ForecastError):
        forecast(source)


def test_a_missing_file(tmp_path):
    with pytest.raises(ForecastError, match="no such trace file"):
        forecast(tmp_path / "nope.jsonl")


# -- the command line ---------------------------------------------------------------------------------------
def test_command_line(runaway3, capsys):
    from harness_lib.forecast import main
    assert main([str(runaway3[2]), "--caps", "8,100"]) == 0
    out = capsys.readouterr().out
    assert "cap       8  in=       3,431" in out and "in=     337,299" in out and "$0.702198" in out


def test_command_line_errors_are_sentences(tmp_path, capsys):
    from harness_lib.forecast import main
    assert main([str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "no such trace file" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope.jsonl"), "--caps", "8,x"])
    assert e.value.code == 2


def test_a_run_without_a_price_is_forecast_in_tokens_and_unknown_dollars(provider, tmp_path, capsys):
    """A run against an endpoint with no price traces ``costUsd: null``: its forecast must not price it at
    the chapter's $2 / $12 (a made-up cost); given prices, it uses them."""
    from harness_lib.forecast import main
    from harness_lib.pricing import UNPRICED
    path = tmp_path / "t.jsonl"
    s, _ = go(provider, "runaway", trace=Trace(path), max_turns=3, pricing=UNPRICED)
    assert forecast(s, pricing=UNPRICED)[0].cost_usd is None
    assert main([str(path), "--caps", "8"]) == 0
    out = capsys.readouterr().out
    assert "cost=unknown" in out and "$" not in out and "in=       3,431" in out
    assert main([str(path), "--caps", "8", "--price-in", "2", "--price-out", "12"]) == 0
    assert "cost=$0.0" in capsys.readouterr().out


def test_the_forecast_is_a_command_of_the_one_command_line_too(runaway3, capsys):
    """``python -m harness_lib forecast`` and ``python -m harness_lib.forecast`` are one parser and one answer
    (before the first was refused: "invalid choice: 'forecast'")."""
    from harness_lib.cli import main as cli_main
    from harness_lib.forecast import main
    argv = [str(runaway3[2]), "--caps", "8,100", "--price-in", "2", "--price-out", "12"]
    assert main(argv) == 0
    alone = capsys.readouterr()
    assert cli_main(["forecast", *argv]) == 0
    assert capsys.readouterr() == alone and "$0.702198" in alone.out
    with pytest.raises(SystemExit) as e:
        cli_main(["forecast", str(runaway3[2]), "--price-in", "2"])
    assert e.value.code == 2 and "give both --price-in and --price-out" in capsys.readouterr().err
