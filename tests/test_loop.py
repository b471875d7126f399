"""Unit tests of the loop: each exit, each policy, dedupe, approval, stop conditions, subagents."""

import asyncio
import math
import shutil
from pathlib import Path

import pytest

from harness_lib import stops
from harness_lib.loop import Options, run
from harness_lib.state import DecisionError, approve, load, new_run, pending, reject, save
from harness_lib.subagent import research_tool
from harness_lib.tools import Tool
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def go(provider, scenario, workspace=None, state=None, tools=None, **options):
    ws = workspace or Workspace.copy_of()
    state = state or new_run(SYSTEM_PROMPT, TASK, scenario)
    trace = options.pop("trace", Trace(timestamps=False))
    out = asyncio.run(run(state, tools if tools is not None else ws.tools(),
                          Options(base_url=provider.base_url, trace=trace, **options)))
    return out, ws, trace


# -- the five exits ----------------------------------------------------------------------------------
def test_completed(provider):
    s, _, _ = go(provider, "plan")
    assert s.status == "completed" and s.interruption is None and not s.resumable
    assert s.output.startswith("errors.log mentions a timeout")


def test_failed_on_fatal_tool_error_is_not_resumable(provider):
    s, _, _ = go(provider, "recover", tool_errors="fatal")
    assert s.status == "failed" and "no such file: timeout.log" in s.error and not s.resumable
    assert pending(s) == []  # even a failed run leaves a transcript a real API accepts


def test_failed_on_401(faulty):
    faulty.inject("401")
    s, _, _ = go(faulty, "plan")
    assert s.status == "failed" and "HTTP 401" in s.error and s.turns == 0


def test_max_turns_leaves_the_last_call_pending_and_resumes(provider):
    s, ws, _ = go(provider, "plan", max_turns=2)
    assert s.status == "max_turns_exceeded" and s.interruption == {"type": "max_turns"} and s.resumable
    assert [c["id"] for c in pending(s)] == ["c2"] and s.tool_runs == 1
    s, _, _ = go(provider, "plan", workspace=ws, state=s, max_turns=20)
    assert (s.status, s.turns, s.prompt_tokens, s.tool_runs) == ("completed", 3, 815, 2)


def test_budget_checked_before_the_call_overshoots_by_at_most_one_turn(provider):
    s, _, _ = go(provider, "runaway", max_budget_usd=0.002)
    assert s.status == "budget_exceeded" and s.interruption == {"type": "max_budget"}
    assert s.own_cost_usd >= 0.002 and s.own_cost_usd - 0.002 <= s.per_turn[-1]["cost_usd"]
    assert sum(t["cost_usd"] for t in s.per_turn) == pytest.approx(s.own_cost_usd, abs=1e-12)


def test_interrupted_for_approval_then_cancelled_by_stop(provider):
    s, _, _ = go(provider, "destructive")
    assert s.status == "interrupted" and s.interruption["type"] == "approval"
    assert s.interruption == {"type": "approval", "callId": "c2", "toolName": "delete_file",
                              "args": {"path": "access.log"}}

    async def stopped():
        ws = Workspace.copy_of()
        task = asyncio.ensure_future(run(new_run(SYSTEM_PROMPT, TASK, "slow"), ws.tools(),
                                         Options(base_url=provider.base_url)))
        asyncio.get_running_loop().call_later(0.2, task.cancel, "user pressed Stop")
        return await task
    s = asyncio.run(stopped())
    assert s.status == "interrupted" and s.interruption == {"type": "cancelled", "reason": "user pressed Stop"}


def test_stop_reaches_the_model_call(faulty):
    slow_s = 4.0  # the model's first byte waits this long: a run that waited for it would take that long
    faulty.inject(f"slow:{slow_s:g}")

    async def stopped():
        task = asyncio.ensure_future(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of().tools(),
                                         Options(base_url=faulty.base_url)))
        asyncio.get_running_loop().call_later(0.1, task.cancel, "user pressed Stop")
        t = asyncio.get_running_loop().time()
        s = await task
        return s, asyncio.get_running_loop().time() - t
    s, seconds = asyncio.run(stopped())
    # Relative to what Stop must not wait for: the run ends in under a quarter of the model call's delay
    # (about 0.1 s here), which a run waiting out the call (>= 4 s) cannot, however loaded the machine.
    assert s.status == "interrupted" and s.turns == 0 and seconds < slow_s / 4


# -- tool-error policies -------------------------------------------------------------------------------
@pytest.mark.parametrize("policy,turns,answer", [
    ("generic", 2, "I could not read the file, so I do not know."),
    ("descriptive", 4, "errors.log mentions a timeout."),
    (lambda e: f"Tool trouble: {e}. Call list_files.", 4, "errors.log mentions a timeout."),
])
def test_policies(provider, policy, turns, answer):
    s, _, _ = go(provider, "recover", tool_errors=policy)
    assert (s.status, s.turns, s.output) == ("completed", turns, answer)


def test_generic_policy_hides_the_message(provider):
    s, _, _ = go(provider, "recover", tool_errors="generic")
    assert s.messages[3]["content"] == "Error: the tool call failed."


# -- dedupe -----------------------------------------------------------------------------------------------
def test_dedupe_read_only_answers_the_repeat_from_cache_under_the_new_id(provider):
    s, _, trace = go(provider, "repeat", dedupe="read-only")
    tools = [m for m in s.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2"] and tools[0]["content"] == tools[1]["content"]
    assert s.tool_runs == 1 and [r.get("cached", False) for r in s.tool_log] == [False, True]
    assert sum(e["type"] == "tool_start" for e in trace.events) == 1


def test_dedupe_off_runs_both(provider):
    s, _, _ = go(provider, "repeat")
    assert s.tool_runs == 2


def test_bad_options_rejected_up_front():
    for bad in (dict(max_turns=0), dict(max_turns=-1), dict(max_budget_usd=math.nan), dict(max_budget_usd=-1),
                dict(tool_errors="loud"), dict(dedupe="some")):
        with pytest.raises(ValueError):
            Options(base_url="http://127.0.0.1:9/v1", **bad)


# -- approval ----------------------------------------------------------------------------------------------
def test_approve_and_reject_validate(provider):
    s, ws, _ = go(provider, "destructive")
    with pytest.raises(DecisionError):
        approve(s, "c1")  # answered already
    approve(s, "c2")
    with pytest.raises(DecisionError):
        approve(s, "c2")
    with pytest.raises(DecisionError):
        reject(s, "c2")
    s, _, _ = go(provider, "destructive", workspace=ws, state=s)
    assert s.status == "completed" and ws.deleted == ["access.log"]
    with pytest.raises(DecisionError):
        approve(s, "c2")


@pytest.mark.parametrize("kwargs,slot,answer", [
    ({"reason": "not today"}, "The user declined this call: not today", "I did not delete anything"),
    ({}, "The user declined this call.", "I did not delete anything"),
    ({"silent": True}, "", "Deleted access.log"),
])
def test_reject_writes_the_decision_in_words(provider, kwargs, slot, answer):
    s, ws, _ = go(provider, "destructive")
    reject(s, "c2", **kwargs)
    s, _, _ = go(provider, "destructive", workspace=ws, state=s)
    assert next(m["content"] for m in s.messages if m.get("tool_call_id") == "c2") == slot
    assert s.output.startswith(answer) and ws.deleted == [] and "access.log" in ws.files()


def test_approval_survives_save_and_load(provider, tmp_path):
    s, ws, _ = go(provider, "destructive", state_dir=tmp_path)
    restored = load(tmp_path, s.run_id)
    assert restored == s
    approve(restored, "c2")
    save(restored, tmp_path)
    s, _, _ = go(provider, "destructive", workspace=ws, state=load(tmp_path, s.run_id))
    assert s.status == "completed" and ws.deleted == ["access.log"]


# -- stop conditions -------------------------------------------------------------------------------------
def test_custom_stop_condition(provider):
    s, _, _ = go(provider, "plan", stops=[stops.tool_called("list_files")])
    assert s.status == "interrupted" and s.turns == 1
    # a condition's own interruption, not the "cancelled" a user's Stop gives
    assert s.interruption == {"type": "stop_condition", "name": "tool_called('list_files')",
                              "reason": "stop condition: list_files was called"}


def test_first_condition_wins(provider):
    s, _, _ = go(provider, "runaway", max_turns=5, max_budget_usd=1.0)
    assert s.status == "max_turns_exceeded" and s.turns == 5


# -- tools -------------------------------------------------------------------------------------------------
def test_non_text_results_are_serialised(provider):
    async def listing(args, ctx):
        return {"files": 3}
    tools = [Tool("list_files", "List the files in the workspace.", listing, read_only=True)]
    s, _, _ = go(provider, "runaway", tools=tools, max_turns=2)
    assert s.messages[3]["content"] == '{"files": 3}'


def test_progress_reaches_the_trace_and_the_callback(provider):
    labels = []
    ws = Workspace.copy_of()
    fast_scan = ws.scan_archive_tool(seconds=0.2, files=40, every=10)
    tools = [t for t in ws.tools() if t.name != "scan_archive"] + [fast_scan]
    s, _, trace = go(provider, "slow", workspace=ws, tools=tools, on_progress=labels.append)
    assert s.status == "completed" and labels == [f"scanned {n} of 40 files" for n in (10, 20, 30, 40)]
    assert [e["label"] for e in trace.events if e["type"] == "tool_progress"] == labels


# -- subagents --------------------------------------------------------------------------------------------------
def test_subagent_has_its_own_window_and_reports_its_cost(provider):
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), provider.base_url, "plan")
    s, _, trace = go(provider, "delegate", workspace=ws, tools=[research, *ws.tools()])
    assert s.status == "completed" and "worker 7 timed out" in s.output
    assert len(s.messages) == 5  # system, user, call, the child's summary, answer: not the child's reads
    (child,) = s.subruns
    assert child["status"] == "completed" and child["turns"] == 3 and child["messages"] == 7
    assert s.total_cost_usd == pytest.approx(s.own_cost_usd + child["costUsd"])
    assert {e["runId"] for e in trace.events} == {s.run_id, child["runId"]}


def test_a_subagent_asks_through_its_parents_client_and_a_readers_client_is_left_open(provider):
    """The client is built once per tree: every model call of parent and child goes through the client the
    parent was given (a reader's ChatModel), and the loop never closes a client it did not build."""
    from harness_lib.client import ModelClient

    class Counted:  # a reader's ChatModel: anything with complete()
        def __init__(self, inner):
            self.inner, self.models, self.closed = inner, [], False

        async def complete(self, model, messages, tools=None, **extra):
            self.models.append(model)
            return await self.inner.complete(model, messages, tools, **extra)

    async def go_shared():
        inner = ModelClient(provider.base_url)
        client = Counted(inner)
        ws = Workspace.copy_of()
        research = research_tool(ws.tools(), "http://127.0.0.1:9/v1", "plan")  # unused: the parent's client is
        s = await run(new_run(SYSTEM_PROMPT, TASK, "delegate"), [research, *ws.tools()], Options(client=client))
        still_open = not inner.http.is_closed
        await inner.aclose()
        return s, client, still_open

    s, client, still_open = asyncio.run(go_shared())
    (child,) = s.subruns
    assert s.status == "completed" and child["status"] == "completed"
    assert client.models == ["delegate"] + ["plan"] * child["turns"] + ["delegate"] * (s.turns - 1)
    assert still_open


def test_a_traces_on_event_sees_every_line_in_order(provider):
    seen = []
    s, _, trace = go(provider, "plan", trace=Trace(timestamps=False, on_event=seen.append))
    assert s.status == "completed" and seen == trace.events and seen[-1]["type"] == "run_stopped"


def test_a_child_without_a_price_runs_under_its_turn_cap_alone(provider):
    """The parent has no price (a real endpoint without one): the child's dollar budget could not act, so
    it is dropped (it was refused, and the tool failed), and the child's dollars are unknown (0), not $2/$12."""
    from harness_lib.pricing import UNPRICED
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), provider.base_url, "plan", pricing=UNPRICED)
    s, _, _ = go(provider, "delegate", workspace=ws, tools=[research, *ws.tools()], pricing=UNPRICED)
    (child,) = s.subruns
    assert s.status == "completed" and child["status"] == "completed" and child["costUsd"] == 0


def test_runaway_child_stops_at_its_own_cap(provider):
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), provider.base_url, "runaway", max_turns=6)
    s, _, _ = go(provider, "delegate", workspace=ws, tools=[research, *ws.tools()])
    assert s.subruns[0]["status"] == "max_turns_exceeded" and s.subruns[0]["turns"] == 6
    assert "no result" in s.output


def test_one_stop_cancels_the_tree(provider):
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), provider.base_url, "slow")

    async def stopped():
        task = asyncio.ensure_future(run(new_run(SYSTEM_PROMPT, TASK, "delegate"), [research, *ws.tools()],
                                         Options(base_url=provider.base_url)))
        asyncio.get_running_loop().call_later(0.5, task.cancel, "user pressed Stop")
        return await task
    s = asyncio.run(stopped())
    assert s.status == "interrupted" and s.interruption["reason"] == "user pressed Stop"


def test_temporary_workspaces_are_removed_unless_kept():
    import gc
    ws = Workspace.copy_of()
    parent = ws.root.parent
    assert (parent / "workspace" / "errors.log").exists()
    del ws
    gc.collect()
    assert not parent.exists()
    kept = Workspace.copy_of().keep()
    parent = kept.root.parent
    del kept
    gc.collect()
    assert parent.exists()
    shutil.rmtree(parent)


def test_save_writes_the_same_bytes_as_a_deep_copy_would(provider, tmp_path):
    """save() encodes the fields in place (no deep copy): the file must be what asdict would have given,
    for a run with every field filled, the run it was given left as it was, and a value that is not plain
    JSON must still fail loudly. (That it copies nothing is a matter of speed, not of behaviour: no test
    here reaches into state.py to look.)"""
    import copy
    import json

    state, _, _ = go(provider, "destructive")
    state = reject(state, state.interruption["callId"], "no")
    state.meta, state.config = {"k": [1, {"x": None}]}, {"max_turns": 5}
    messages, before = state.messages, copy.deepcopy(state)
    path = save(state, tmp_path)
    assert path.read_text() == json.dumps(state.to_dict(), separators=(",", ":"), allow_nan=False)  # asdict, file names
    assert load(tmp_path, state.run_id) == state == before
    assert state.messages is messages  # encoded where it is, not swapped for a copy
    state.meta = {"bad": {1, 2}}
    with pytest.raises(TypeError):
        save(state, tmp_path)
    assert load(tmp_path, state.run_id).meta == {"k": [1, {"x": None}]}  # the last good file is intact


def test_a_state_file_saved_before_own_cost_usd_loads_and_resumes_with_the_same_key(provider, tmp_path):
    """The Python attribute is ``own_cost_usd``; the file keeps ``cost_usd``. A file saved by the harness before
    the rename (commit e7c92e9: "plan" stopped at its cap of 2) loads with its spend, resumes to the chapter's
    figures, and is saved again under the old key only."""
    import json

    from harness_lib.state import RunState

    saved = Path(__file__).parent / "fixtures" / "states" / "saved-by-e7c92e9.json"
    shutil.copy(saved, tmp_path / saved.name)
    old = json.loads(saved.read_text())
    s = load(tmp_path, "saved-by-e7c92e9")
    assert (s.status, s.turns, s.own_cost_usd, s.total_cost_usd) == ("max_turns_exceeded", 2, 0.00157, 0.00157)
    assert RunState.from_dict(s.to_dict()) == s and set(s.to_dict()) == set(old)
    s, _, _ = go(provider, "plan", state=s, max_turns=20, state_dir=tmp_path)
    assert (s.status, s.turns, round(s.own_cost_usd, 6), s.tool_runs) == ("completed", 3, 0.00247, 2)
    again = json.loads((tmp_path / saved.name).read_text())
    assert set(again) == set(old) and round(again["cost_usd"], 6) == 0.00247 and "own_cost_usd" not in again
