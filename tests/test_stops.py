"""Stop conditions beyond the chapter (issue 12, parts 2 and 4), each against real runs of the scripted
provider: repeated_call, no_progress, any_of / all_of, a condition's own interruption, errors no message
can fix (permanent marks, repeated failures), and the hostile cases."""

import asyncio

import pytest

from harness_lib import stops
from harness_lib.loop import Options, run
from harness_lib.state import load, new_run
from harness_lib.stops import Stop
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import PermanentToolError, Tool, is_permanent, permanent, permanent_errors, string_params
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def go(provider, scenario, tools=None, state=None, **options):
    ws = Workspace.copy_of()
    trace = Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, TASK, scenario)
    out = asyncio.run(run(state, tools if tools is not None else ws.tools(),
                          Options(base_url=provider.base_url, trace=trace, **options)))
    return out, trace.events


def stopped_line(events):
    [line] = [e for e in events if e["type"] == "run_stopped"]
    return line


def marked_tools(*types):
    ws = Workspace.copy_of()
    return [permanent_errors(t, *types) if t.name == "read_file" else t for t in ws.tools()]


# -- the chapter's run is untouched by default ----------------------------------------------------------
def test_forbidden_run_is_the_chapters_by_default(provider):
    s, events = go(provider, "forbidden", max_turns=12)
    assert (s.status, s.turns, s.tool_runs, s.prompt_tokens) == ("max_turns_exceeded", 12, 11, 7079)
    assert f"{s.own_cost_usd:.6f}" == "0.018622"
    assert not any(r.get("permanent") for r in s.tool_log)  # the workspace marks nothing by itself


def test_marked_tool_alone_changes_nothing_but_the_record(provider):
    s, events = go(provider, "forbidden", tools=marked_tools(PermissionError), max_turns=12)
    assert (s.status, s.turns, f"{s.own_cost_usd:.6f}") == ("max_turns_exceeded", 12, "0.018622")
    assert all(r["permanent"] for r in s.tool_log)
    assert all(e.get("permanent") is True for e in events if e["type"] == "tool_result")


# -- errors no message can fix --------------------------------------------------------------------------
def test_permanent_error_stops_after_one_turn_as_failed(provider):
    s, events = go(provider, "forbidden", tools=marked_tools(PermissionError), max_turns=12,
                   stops=[stops.permanent_error()])
    assert (s.status, s.turns, s.tool_runs, s.prompt_tokens) == ("failed", 1, 1, 204)
    assert not s.resumable and s.interruption is None
    assert s.error.startswith("permanent_error: read_file") and "permission denied: /etc/shadow" in s.error
    line = stopped_line(events)
    assert line["status"] == "failed" and line["error"] == s.error
    assert s.own_cost_usd < 0.018622 / 10


def test_repeated_failure_needs_no_mark(provider):
    s, events = go(provider, "forbidden", max_turns=12, stops=[stops.repeated_failure(2)])
    assert (s.status, s.turns, s.tool_runs) == ("failed", 2, 2)
    assert "failed the same way 2 times" in s.error and "permission denied" in s.error
    assert stopped_line(events)["error"] == s.error
    s3, _ = go(provider, "forbidden", max_turns=12, stops=[stops.repeated_failure(3)])
    assert (s3.status, s3.turns) == ("failed", 3)


def test_repeated_failure_leaves_a_recovered_run_alone(provider):
    s, _ = go(provider, "recover", max_turns=20, stops=[stops.repeated_failure(2), stops.permanent_error()])
    assert s.status == "completed" and s.turns == 4  # one failure, fixed: not a repeat, not permanent


def test_an_unmarked_failure_is_not_permanent(provider):
    # recover's failure (no such file) is fixable: permanent_error must not fire on it
    s, _ = go(provider, "recover", tools=marked_tools(PermissionError), max_turns=20,
              stops=[stops.permanent_error()])
    assert s.status == "completed"


def test_permanent_marks():
    assert is_permanent(PermanentToolError("quota gone"))
    e = PermissionError("denied")
    assert not is_permanent(e) and permanent(e) is e and is_permanent(e) and isinstance(e, PermissionError)
    assert not is_permanent(ValueError("x"))
    with pytest.raises(TypeError):
        permanent("not an exception")
    tool = Workspace.copy_of().tools()[1]
    for bad in ((), (42,), ("PermissionError",)):
        with pytest.raises(TypeError):
            permanent_errors(tool, *bad)
    with pytest.raises(TypeError):
        permanent_errors(lambda a, c: None, PermissionError)


def test_a_tool_raising_permanent_error_itself(provider):
    async def quota(args, ctx):
        raise PermanentToolError("the monthly quota is spent; it resets on the 1st")
    tools = [Tool("list_files", "List the files in the workspace.", quota, read_only=True)]
    s, _ = go(provider, "runaway", tools=tools, max_turns=10, stops=[stops.permanent_error()])
    assert (s.status, s.turns) == ("failed", 1) and "quota is spent" in s.error


# -- repeated_call ---------------------------------------------------------------------------------------
def test_repeated_call_stops_before_the_nth_repeat_runs(provider):
    s, events = go(provider, "runaway", stops=[stops.repeated_call(3)])
    assert (s.status, s.turns, s.tool_runs) == ("interrupted", 3, 2)  # the third list_files is left pending
    assert s.interruption == {"type": "stop_condition", "name": "repeated_call(3)",
                              "reason": "the same call asked for 3 times: list_files({})"}
    line = stopped_line(events)
    assert (line["reason"], line["condition"], line["why"]) == ("stop_condition", "repeated_call(3)",
                                                                s.interruption["reason"])
    assert s.resumable


def test_repeated_call_counts_arguments_not_ids(provider):
    s, _ = go(provider, "repeat", stops=[stops.repeated_call(2)])
    assert (s.status, s.turns) == ("interrupted", 2) and "read_file" in s.interruption["reason"]
    s, _ = go(provider, "plan", stops=[stops.repeated_call(2)])  # two different calls: never fires
    assert s.status == "completed"


# -- no_progress -----------------------------------------------------------------------------------------
def files_read(state):
    return sorted({r["args"] for r in state.tool_log if r["toolName"] == "read_file" and r["ok"]})


def test_no_progress_stops_a_run_getting_nowhere(provider):
    s, events = go(provider, "runaway", max_turns=50, stops=[stops.no_progress(3, progress=files_read)])
    assert (s.status, s.turns) == ("interrupted", 3)
    assert s.interruption["type"] == "stop_condition" and "no progress in 3 turns" in s.interruption["reason"]
    assert "files_read" in s.interruption["reason"]
    assert stopped_line(events)["condition"] == "no_progress(3)"


def test_no_progress_leaves_a_progressing_run_alone(provider):
    s, _ = go(provider, "plan", max_turns=20, stops=[stops.no_progress(2, progress=files_read)])
    assert s.status == "completed"  # list (no progress), read (progress), answer


def test_no_progress_snapshots_a_value_the_state_mutates(provider):
    # progress returns the live tool_log: without a copy it would always equal itself and stop at once
    s, _ = go(provider, "runaway", max_turns=6, stops=[stops.no_progress(2, progress=lambda st: st.tool_log)])
    assert s.status == "max_turns_exceeded"


def test_one_no_progress_condition_serves_several_runs(provider):
    cond = stops.no_progress(3, progress=files_read)
    a, _ = go(provider, "runaway", max_turns=50, stops=[cond])
    b, _ = go(provider, "runaway", max_turns=50, stops=[cond])
    assert a.turns == b.turns == 3  # memory is per run, so the second run is not stopped early


def test_progress_that_raises_fails_the_run_with_its_name(provider, tmp_path):
    def broken(state):
        raise KeyError("facts")
    s, events = go(provider, "runaway", max_turns=5, state_dir=tmp_path,
                   stops=[stops.no_progress(2, progress=broken)])
    assert s.status == "failed" and s.turns == 0
    assert "no_progress(2, progress=broken) raised KeyError" in s.error
    assert load(tmp_path, s.run_id).status == "failed"  # never left running on disk


# -- composition -----------------------------------------------------------------------------------------
def test_any_of_is_the_first_that_fires(provider):
    s, _ = go(provider, "runaway", stops=[stops.any_of(stops.max_turns(50), stops.repeated_call(4))])
    assert (s.status, s.turns) == ("interrupted", 4) and s.interruption["name"] == "repeated_call(4)"
    s, _ = go(provider, "runaway", stops=[stops.any_of(stops.max_turns(2), stops.repeated_call(4))])
    assert (s.status, s.interruption) == ("max_turns_exceeded", {"type": "max_turns"})


def test_all_of_waits_for_every_condition(provider):
    both = stops.all_of(stops.repeated_call(2), stops.turn_cost_above(0.001))
    s, events = go(provider, "runaway", max_turns=50, stops=[both])
    # repeated_call(2) holds from turn 2 on; a turn costs more than $0.001 from turn 4 (397 prompt tokens,
    # $0.001070; turn 3 cost $0.000942)
    assert (s.status, s.turns) == ("interrupted", 4)
    assert s.interruption["name"] == "all_of(repeated_call(2), turn_cost_above(0.001))"
    assert " and " in s.interruption["reason"] and "a turn cost more than $0.001000" in s.interruption["reason"]
    assert stopped_line(events)["condition"] == s.interruption["name"]


def test_all_of_feeds_every_condition_every_time(provider):
    # no_progress inside all_of must see every check, even while the first condition says no
    both = stops.all_of(stops.max_turns(5), stops.no_progress(2, progress=files_read))
    s, _ = go(provider, "runaway", max_turns=50, stops=[both])
    assert (s.status, s.turns) == ("interrupted", 5)


def test_all_of_says_failed_when_a_member_does(provider):
    both = stops.all_of(stops.repeated_failure(2), stops.max_turns(1))
    s, _ = go(provider, "forbidden", max_turns=12, stops=[both])
    assert (s.status, s.turns) == ("failed", 2) and s.error.startswith("all_of(")


# -- a condition is not a Stop ----------------------------------------------------------------------------
def test_when_has_its_own_interruption_not_cancelled(provider):
    s, _ = go(provider, "runaway", stops=[stops.when(lambda st: st.turns >= 2, "two turns are enough")])
    assert s.interruption == {"type": "stop_condition", "name": "when", "reason": "two turns are enough"}


# -- hostile cases -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: stops.repeated_call(0), lambda: stops.repeated_call(-1), lambda: stops.repeated_call(2.0),
    lambda: stops.repeated_call(True), lambda: stops.no_progress(0, progress=len),
    lambda: stops.repeated_failure(0), lambda: stops.turn_cost_above(float("nan")),
    lambda: stops.turn_cost_above(0), lambda: stops.any_of(), lambda: stops.all_of(),
    lambda: stops.when(lambda s: True, ""), lambda: stops.tool_called(""),
    lambda: stops.max_turns(0), lambda: stops.max_budget(float("inf")),
])
def test_nonsense_limits_are_refused(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("make", [
    lambda: stops.no_progress(3, progress="files"), lambda: stops.no_progress(3, progress=None),
    lambda: stops.any_of(stops.max_turns(3), 7), lambda: stops.all_of("max_turns"),
    lambda: stops.when(True, "always"),
])
def test_things_that_are_not_conditions_are_refused(make):
    with pytest.raises(TypeError):
        make()


def test_options_refuse_a_stops_list_that_is_not_one():
    with pytest.raises(TypeError, match="stops must be a list"):
        Options(base_url="http://127.0.0.1:1", stops=stops.max_turns(3))
    with pytest.raises(TypeError, match=r"stops\[1\]"):
        Options(base_url="http://127.0.0.1:1", stops=[stops.max_turns(3), "max_turns"])


@pytest.mark.parametrize("answer", [True, "stop", {"type": "max_turns"}, 1])
def test_a_condition_answering_something_else_fails_the_run(provider, answer, tmp_path):
    def sloppy(state):
        return answer
    s, events = go(provider, "runaway", max_turns=5, state_dir=tmp_path, stops=[sloppy])
    assert s.status == "failed" and s.turns == 0 and "stop condition sloppy returned" in s.error
    assert stopped_line(events)["status"] == "failed" and load(tmp_path, s.run_id).status == "failed"


def test_a_condition_that_raises_fails_the_run(provider):
    s, _ = go(provider, "runaway", max_turns=5, stops=[stops.when(lambda st: 1 / 0, "never")])
    assert s.status == "failed" and "raised ZeroDivisionError" in s.error


def test_a_stop_must_say_how_it_ends():
    with pytest.raises(ValueError):
        Stop("completed")
    with pytest.raises(ValueError):
        Stop("running")
    with pytest.raises(ValueError):
        Stop("interrupted")  # with no interruption to say why
    assert Stop("failed", error="x").why == "x"


def test_an_exception_whose_attributes_raise_is_not_permanent(provider):
    class Hostile(Exception):
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

    async def tool(args, ctx):
        raise Hostile("odd")
    assert not is_permanent(Hostile("odd"))
    tools = [Tool("list_files", "List the files in the workspace.", tool, read_only=True)]
    s, _ = go(provider, "runaway", tools=tools, max_turns=2, stops=[stops.permanent_error()])
    assert s.status == "max_turns_exceeded" and s.tool_log[0]["ok"] is False


# -- at the edges: what mutation testing found untested (issue 25, docs/mutation.md) -------------------------
TURN_1, TURN_2 = 0.000684, 0.000814  # runaway's first two turns at the chapter's prices


def played(replies, tools, **options):
    s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), tools, Options(client=FakeModel(replies), **options)))
    return s


def failing(text="Error: it broke"):
    """A tool that always fails with the same words, whatever its arguments."""
    async def fails(args, ctx):
        raise RuntimeError(text.removeprefix("Error: "))
    return Tool("fails", "Fails.", fails, string_params("path"))


def test_turn_cost_above_is_strictly_above(provider):
    s, _ = go(provider, "runaway", max_turns=10, stops=[stops.turn_cost_above(TURN_1)])
    assert (s.status, s.turns) == ("interrupted", 2)  # turn 1 cost exactly the bound: not above it
    assert s.interruption["reason"] == "stop condition: a turn cost more than $0.000684"


def test_no_progress_counts_its_turns_from_the_last_change(provider):
    """Progress changes at turns 0 and 1 (the counter below), then never: no_progress(2) stops 2 turns after
    the last change, at turn 3, not before."""
    def reads(state):
        return min(state.turns, 1)
    s, _ = go(provider, "runaway", max_turns=10, stops=[stops.no_progress(2, progress=reads)])
    assert (s.status, s.turns) == ("interrupted", 3)
    assert s.interruption["reason"] == "no progress in 2 turns (reads unchanged since turn 1)"
    assert s.interruption["name"] == "no_progress(2)"


def test_no_progress_copies_the_whole_value_not_its_outer_layer(provider):
    # a dict around the live tool_log: a copy of the dict alone would still share the list, and stop at once
    s, _ = go(provider, "runaway", max_turns=5, stops=[stops.no_progress(2, progress=lambda st: {"log": st.tool_log})])
    assert s.status == "max_turns_exceeded"


def test_a_progress_function_without_a_name_is_called_progress(provider):
    class Counter:
        def __call__(self, state):
            return 0
    s, _ = go(provider, "runaway", max_turns=10, stops=[stops.no_progress(2, progress=Counter())])
    assert s.interruption["reason"] == "no progress in 2 turns (progress unchanged since turn 0)"


def test_when_is_named_after_its_function_or_when(provider):
    def two_turns(state):
        return state.turns >= 2

    class Callable:
        def __call__(self, state):
            return state.turns >= 2
    for predicate, name in ((two_turns, "two_turns"), (lambda st: st.turns >= 2, "when"), (Callable(), "when")):
        s, _ = go(provider, "runaway", max_turns=10, stops=[stops.when(predicate, "enough")])
        assert s.interruption == {"type": "stop_condition", "name": name, "reason": "enough"}


def test_a_condition_without_a_name_is_named_by_its_type(provider):
    class Sloppy:
        def __call__(self, state):
            return "stop"
    s, _ = go(provider, "runaway", max_turns=5, stops=[Sloppy()])
    assert s.status == "failed" and s.error.startswith("stop condition Sloppy returned 'stop'")


def test_composition_says_each_member_and_each_reason(provider):
    both = stops.all_of(stops.repeated_call(2), stops.when(lambda st: st.turns >= 3, "three turns"))
    s, _ = go(provider, "runaway", max_turns=10, stops=[stops.any_of(both, stops.max_turns(9))])
    assert s.interruption == {"type": "stop_condition", "name": "all_of(repeated_call(2), when)",
                              "reason": "the same call asked for 2 times: list_files({}) and three turns"}
    assert stops.any_of(stops.max_turns(3), stops.repeated_call(2)).__name__ == "any_of(max_turns(3), repeated_call(2))"
    failed = stops.all_of(stops.repeated_failure(2), stops.permanent_error())
    s, _ = go(provider, "forbidden", tools=marked_tools(PermissionError), max_turns=12, stops=[failed])
    assert s.error == ("all_of(repeated_failure(2), permanent_error()): " + "; ".join((
        'repeated_failure(2): read_file({"path":"/etc/shadow"}) failed the same way 2 times: '
        "Error: permission denied: /etc/shadow",
        'permanent_error: read_file({"path":"/etc/shadow"}) failed in a way no retry can fix: '
        "Error: permission denied: /etc/shadow")))


def test_an_error_names_the_call_that_failed_with_its_arguments(provider):
    s, _ = go(provider, "forbidden", tools=marked_tools(PermissionError), max_turns=12,
              stops=[stops.permanent_error()])
    assert s.error.startswith('permanent_error: read_file({"path":"/etc/shadow"}) failed in a way')


def test_repeated_failure_counts_one_call_failing_the_same_way():
    """Not two different calls failing with the same words, not a rejection or an unknown outcome twice;
    the same call with its arguments in another order is the same call."""
    two_paths = [asks(call("a", "fails", {"path": "x"})), asks(call("b", "fails", {"path": "y"}))]
    s = played(two_paths, [failing()], max_turns=2, stops=[stops.repeated_failure(2)])
    assert s.status == "max_turns_exceeded"
    same_call = [asks(call("a", "fails", '{"path":"x","n":1}')), asks(call("b", "fails", '{"n":1,"path":"x"}'))]
    s = played(same_call, [failing()], max_turns=3, stops=[stops.repeated_failure(2)])
    assert s.status == "failed" and s.error.startswith('repeated_failure(2): fails({"n":1,"path":"x"}) failed')


def test_rejections_and_unknown_outcomes_are_not_failures():
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages += [asks(call("a", "w", {})), {"role": "tool", "tool_call_id": "a", "content": "no"},
                       asks(call("b", "w", {})), {"role": "tool", "tool_call_id": "b", "content": "no"}]
    for flag in ("rejected", "unknownOutcome"):
        state.tool_log = [{"callId": c, "toolName": "w", "args": "{}", "signature": "w:{}", "ok": False, flag: True,
                           "permanent": True} for c in "ab"]
        assert stops.repeated_failure(2)(state) is None and stops.permanent_error()(state) is None
    state.tool_log = [{k: v for k, v in r.items() if k != "unknownOutcome"} for r in state.tool_log]
    assert stops.repeated_failure(2)(state).status == "failed" and stops.permanent_error()(state).status == "failed"


def test_repeated_failure_reads_a_record_without_a_signature():
    """A tool log saved before records carried their signature: the tool and its raw arguments stand in."""
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages += [asks(call("a", "w", {"p": 1})), {"role": "tool", "tool_call_id": "a", "content": "Error: x"},
                       asks(call("b", "w", {"p": 2})), {"role": "tool", "tool_call_id": "b", "content": "Error: x"}]
    state.tool_log = [{"callId": "a", "toolName": "w", "args": '{"p":1}', "ok": False},
                      {"callId": "b", "toolName": "w", "args": '{"p":2}', "ok": False}]
    assert stops.repeated_failure(2)(state) is None  # two calls
    state.tool_log[1]["args"] = '{"p":1}'
    assert stops.repeated_failure(2)(state).error == 'repeated_failure(2): w({"p":1}) failed the same way 2 times: ' \
                                                     "Error: x"


@pytest.mark.parametrize("make,name", [
    (lambda: stops.max_turns(0), "max_turns"), (lambda: stops.max_budget(0), "max_budget_usd"),
    (lambda: stops.repeated_call(0), "repeated_call"), (lambda: stops.no_progress(0, progress=len), "no_progress"),
    (lambda: stops.repeated_failure(0), "repeated_failure"), (lambda: stops.turn_cost_above(0), "turn_cost_above"),
    (lambda: stops.any_of(), r"any_of\(\)"), (lambda: stops.all_of(), r"all_of\(\)"),
])
def test_a_limit_refused_names_itself(make, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        make()


# -- found by make mutate (docs/mutation.md) ----------------------------------------------------------------
def test_a_call_that_succeeded_twice_is_not_a_repeated_failure():
    """Only failures count: the same read answered the same way twice is a run going well."""
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages += [asks(call("a", "r", {})), {"role": "tool", "tool_call_id": "a", "content": "same"},
                       asks(call("b", "r", {})), {"role": "tool", "tool_call_id": "b", "content": "same"}]
    state.tool_log = [{"callId": c, "toolName": "r", "args": "{}", "signature": "r:{}", "ok": True} for c in "ab"]
    assert stops.repeated_failure(2)(state) is None
    state.tool_log = [{**r, "ok": False} for r in state.tool_log]
    assert stops.repeated_failure(2)(state).status == "failed"


def test_repeated_failure_stops_at_the_second_failure_by_default():
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages += [asks(call("a", "w", {})), {"role": "tool", "tool_call_id": "a", "content": "Error: x"},
                       asks(call("b", "w", {})), {"role": "tool", "tool_call_id": "b", "content": "Error: x"}]
    state.tool_log = [{"callId": c, "toolName": "w", "args": "{}", "signature": "w:{}", "ok": False} for c in "ab"]
    condition = stops.repeated_failure()
    assert condition.__name__ == "repeated_failure(2)"
    assert condition(state).error == "repeated_failure(2): w({}) failed the same way 2 times: Error: x"


@pytest.mark.parametrize("make", [stops.max_budget, stops.turn_cost_above])
def test_a_dollar_limit_above_a_billion_is_refused(make):
    """A billion dollars is the most a limit may be (numbers.MAX_USD): more is a typo, not a limit."""
    assert make(1e9)
    with pytest.raises(ValueError, match=r"and at most 1e\+09, got 1100000000.0$"):
        make(1.1e9)
