"""Each rule of the core at its edge, pinned by a direct, fast test of its own (issue 25).

Fifteen small bugs planted in the core got through, or were caught only by a slow test or by a figure
that happens to depend on them. Each test here fails with one of them put back (the commit that added it
says so); ``docs/mutation.md`` lists the mutants a tool found beside them, and which test kills each.

* a spend equal to the budget stops the run (``stops.max_budget``: ``>=``, not ``>``), and a turn count
  equal to the cap does (``stops.max_turns``), also on resume, before anything is paid;
* a Stop pressed without a message is ``{"type": "cancelled", "reason": "cancelled"}`` (``loop.run``);
* the dedupe gate never answers a write from the cache, under ``"read-only"`` (``dedupe.applies``);
* a write never runs without its own approval, whatever was rejected before it (``loop.run``);
* the command line holds the run's lock for as long as it runs the loop (``runs._owner``, ``lock.py``);
* the ledger refuses a state file that forgot its subagents' spend, and accepts one that kept it
  (``ledger.check``: the total with the children's, ``totalCostUsd``, not the run's own);
* the trace's ``costUsd`` on a turn line is the spend with that turn in it, children's included
  (``reply.record``), never one turn behind.
"""

import asyncio
import errno
import json
import os
import re
import sys

import pytest

from harness_lib import cli, dedupe, ledger, loop, policy, stops
from harness_lib.client import ModelError
from harness_lib.ledger import LedgerError
from harness_lib.lock import RunLock, RunLockError
from harness_lib.loop import Options, run
from harness_lib.pricing import UNPRICED
from harness_lib.state import approve, load, new_run, reject, save
from harness_lib.subagent import research_tool
from harness_lib.terminal import visible
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import Tool, permanent, string_params
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

TURN_1 = 0.000684  # what turn 1 of `plan` and of `runaway` costs at the chapter's prices
TURN_2_RUNAWAY = 0.000814


def scripted(provider, scenario, state=None, tools=None, **options):
    trace = Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, TASK, scenario)
    out = asyncio.run(run(state, tools if tools is not None else Workspace.copy_of().tools(),
                          Options(base_url=provider.base_url, trace=trace, **options)))
    return out, trace.events


def played(model, tools, state=None, **options):
    trace = Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, TASK, "fake")
    out = asyncio.run(_in_a_task(run(state, tools, Options(client=model, trace=trace, **options))))
    return out, trace.events


async def _in_a_task(coro):
    """Its own task, so a Stop pressed inside (``current_task().cancel()``) cancels the run and nothing else."""
    return await asyncio.ensure_future(coro)


class Counted:
    """Tools that count how often each call id really ran: ``write`` (a write that needs approval),
    ``store`` (a write that does not) and ``look`` (a read)."""

    def __init__(self):
        self.runs: dict[str, int] = {}

    def tools(self) -> list[Tool]:
        async def ran(args, ctx):
            self.runs[ctx.call_id] = self.runs.get(ctx.call_id, 0) + 1
            await asyncio.sleep(0.002)  # long enough to show in the record's milliseconds
            return f"did {args.get('text')} as {ctx.call_id}"
        return [Tool("write", "Writes; needs approval.", ran, string_params("text"), needs_approval=True),
                Tool("store", "Writes.", ran, string_params("text")),
                Tool("look", "Reads.", ran, string_params("text"), read_only=True)]


def delegated(provider):
    """The ``delegate`` run: a parent whose research subagent (``plan``) runs inside its first tool call."""
    ws = Workspace.copy_of()
    return scripted(provider, "delegate", tools=[research_tool(ws.tools(), provider.base_url, "plan"), *ws.tools()])


def stopped_line(events) -> dict:
    [line] = [e for e in events if e["type"] == "run_stopped"]
    return line


# -- the budget and the cap, at their edges -------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["plan", "runaway"])
def test_a_spend_equal_to_the_budget_stops_the_run(provider, scenario):
    s, events = scripted(provider, scenario, max_budget_usd=TURN_1)
    assert s.per_turn[0]["cost_usd"] == TURN_1 == s.own_cost_usd  # the spend is the budget, exactly
    assert (s.status, s.turns, s.interruption) == ("budget_exceeded", 1, {"type": "max_budget"})
    assert stopped_line(events)["costUsd"] == TURN_1


def test_a_spend_a_hair_under_the_budget_pays_for_one_more_turn(provider):
    s, _ = scripted(provider, "runaway", max_budget_usd=TURN_1 + 1e-9)
    assert (s.status, s.turns) == ("budget_exceeded", 2)
    s, _ = scripted(provider, "runaway", max_budget_usd=round(TURN_1 + TURN_2_RUNAWAY, 6))
    assert (s.status, s.turns, s.own_cost_usd) == ("budget_exceeded", 2, round(TURN_1 + TURN_2_RUNAWAY, 6))


def test_a_turn_count_equal_to_the_cap_stops_the_run_and_a_resume_at_the_cap_pays_nothing(provider):
    s, _ = scripted(provider, "runaway", max_turns=2)
    assert (s.status, s.turns, s.interruption) == ("max_turns_exceeded", 2, {"type": "max_turns"})
    requests = provider.requests
    for cap in (2, 1):  # at the cap, and a cap the run is already past: stop at once
        s, events = scripted(provider, "runaway", state=s, max_turns=cap)
        assert (s.status, s.turns) == ("max_turns_exceeded", 2) and provider.requests == requests
        assert [e["type"] for e in events if e["type"] == "turn"] == []
    s, _ = scripted(provider, "runaway", state=s, max_turns=3)  # one more turn, exactly
    assert (s.status, s.turns) == ("max_turns_exceeded", 3) and provider.requests == requests + 1


def test_a_resume_with_the_spend_at_the_budget_pays_nothing(provider):
    s, _ = scripted(provider, "runaway", max_turns=2)
    spent, requests = s.own_cost_usd, provider.requests
    s, _ = scripted(provider, "runaway", state=s, max_budget_usd=spent)
    assert (s.status, s.turns, s.own_cost_usd, provider.requests) == ("budget_exceeded", 2, spent, requests)


# -- Stop without a message -----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["model call", "tool"])
def test_a_stop_without_a_message_says_cancelled(where):
    async def stops_itself(args, ctx):
        asyncio.current_task().cancel()  # no message: what task.cancel() in a reader's code sends
        await asyncio.sleep(5)
        return "never"

    def before(turn):
        if where == "model call" and turn == 1:
            asyncio.current_task().cancel()
    model = FakeModel([asks(call("c1", "look", {"text": "a"})), asks(call("c2", "hang", {}))], before=before)
    tools = [*Counted().tools(), Tool("hang", "Hangs.", stops_itself, read_only=True)]
    s, events = played(model, tools)
    assert (s.status, s.interruption) == ("interrupted", {"type": "cancelled", "reason": "cancelled"})
    assert stopped_line(events)["reason"] == "cancelled" and s.turns == (1 if where == "model call" else 2)


# -- the dedupe gate ------------------------------------------------------------------------------------------
def test_the_dedupe_gate_lets_the_cache_answer_reads_only():
    assert [dedupe.applies(rule, read_only) for rule in ("off", "read-only", "all") for read_only in (True, False)] \
        == [False, False, True, False, True, True]


@pytest.mark.parametrize("rule,store_runs,look_runs", [("read-only", 2, 1), ("all", 1, 1), ("off", 2, 2)])
def test_a_repeated_write_runs_again_under_the_read_only_gate(rule, store_runs, look_runs):
    tools = Counted()
    model = FakeModel([asks(call("s1", "store", {"text": "x"}), call("l1", "look", {"text": "y"})),
                       asks(call("s2", "store", {"text": "x"}), call("l2", "look", {"text": "y"}))])
    s, events = played(model, tools.tools(), dedupe=rule)
    assert s.status == "completed"
    assert (sum(tools.runs.get(c, 0) for c in ("s1", "s2")), sum(tools.runs.get(c, 0) for c in ("l1", "l2"))) \
        == (store_runs, look_runs)
    cached = [r["callId"] for r in s.tool_log if r.get("cached")]
    assert cached == [c for c, n in (("s2", store_runs), ("l2", look_runs)) if n == 1]


def test_the_cache_a_resume_derives_holds_each_calls_first_successful_answer():
    """What the dedupe cache is after a resume: built from the transcript and the tool log (the loop keeps
    its own copy during a run, so only a resumed run reads this)."""
    messages = [asks(call("a", "look", {"text": "x"})), {"role": "tool", "tool_call_id": "a", "content": "first"},
                {"role": "tool", "tool_call_id": "b", "content": "failed"},
                {"role": "tool", "tool_call_id": "c", "content": "second"},
                {"role": "tool", "tool_call_id": "d", "content": "old record"},
                {"role": "user", "tool_call_id": "e", "content": "not a tool's"},
                {"role": "tool", "tool_call_id": "f", "content": [{"type": "text", "text": "not text"}]}]
    log = [{"callId": "a", "signature": "look:x", "ok": True}, {"callId": "b", "signature": "look:y", "ok": False},
           {"callId": "c", "signature": "look:x", "ok": True}, {"callId": "d", "ok": True},
           {"callId": "e", "signature": "look:e", "ok": True}, {"callId": "f", "signature": "look:f", "ok": True},
           {"callId": "g", "signature": "look:g", "ok": True}]  # g: a record whose slot is missing
    assert dedupe.cache(messages, log) == {"look:x": "first"}


def test_the_same_call_is_its_tool_and_arguments_key_order_aside():
    def sig(args, name="look"):
        return dedupe.signature({"id": "x", "function": {"name": name, "arguments": args}})
    assert sig('{"b": 1, "a": 2}') == sig('{"a":2,"b":1}') == 'look:{"a": 2, "b": 1}'
    assert sig('{"a": 1}') != sig('{"a": 2}') and sig('{"a": 1}') != sig('{"a": 1}', "store")
    assert sig("not json") == "look:not json"


def test_a_readers_error_policy_writes_the_sentence_from_the_exception():
    assert policy.error_text(lambda e: f"told: {type(e).__name__} {e}", ValueError("bad")) == "told: ValueError bad"
    assert policy.error_text("descriptive", ValueError("bad")) == policy.error_text("fatal", ValueError("bad")) \
        == "Error: bad"


# -- approval ---------------------------------------------------------------------------------------------------
def test_a_write_after_a_rejected_one_still_asks_for_its_own_approval(tmp_path):
    tools = Counted()
    model = FakeModel([asks(call("w1", "write", {"text": "first"})), asks(call("w2", "write", {"text": "second"})),
                       {"role": "assistant", "content": "done"}])
    s, _ = played(model, tools.tools(), state_dir=tmp_path)
    assert s.interruption["type"] == "approval" and s.interruption["callId"] == "w1"
    s, _ = played(model, tools.tools(), state=reject(load(tmp_path, s.run_id), "w1", "no"), state_dir=tmp_path)
    assert (s.status, s.interruption["type"], s.interruption["callId"]) == ("interrupted", "approval", "w2")
    assert tools.runs == {}  # neither the rejected write nor the one after it ran
    s, _ = played(model, tools.tools(), state=approve(load(tmp_path, s.run_id), "w2"), state_dir=tmp_path)
    assert s.status == "completed" and tools.runs == {"w2": 1}


def test_a_write_after_an_approved_one_still_asks_for_its_own_approval():
    tools = Counted()
    model = FakeModel([asks(call("w1", "write", {"text": "first"})), asks(call("w2", "write", {"text": "second"}))])
    s, _ = played(model, tools.tools())
    s, _ = played(model, tools.tools(), state=approve(s, "w1"))
    assert (s.status, s.interruption["callId"], tools.runs) == ("interrupted", "w2", {"w1": 1})


# -- the run's lock, held by the command line while it runs -----------------------------------------------------
def test_the_command_line_holds_the_runs_lock_while_the_loop_runs(provider, tmp_path, monkeypatch, capsys):
    """A second owner is refused for as long as ``run`` and ``resume`` run the loop (in-process: a second open
    of the lock file stands for another process), and the lock is free once they return. Fails if the lock
    is let go as soon as it is taken: the operator campaign's resume+resume race then pays turns twice."""
    held = []

    async def watched(state, tools, opts):
        try:
            RunLock(tmp_path, "r").__enter__().release()
            held.append(False)
        except RunLockError:
            held.append(True)
        return await real(state, tools, opts)
    real = loop.run
    monkeypatch.setattr(loop, "run", watched)  # runs.py imports it from the loop when a run starts
    common = ["--state-dir", str(tmp_path), "--base-url", provider.base_url, "--json"]
    assert cli.main(["run", "runaway", "--run-id", "r", "--max-turns", "1", *common]) == 0
    assert cli.main(["resume", "r", "--max-turns", "2", *common]) == 0
    assert held == [True, True]
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["turns"] == 2
    with RunLock(tmp_path, "r"):  # free again
        pass


def test_a_run_in_use_says_which_process_holds_it_and_since_when(tmp_path):
    with RunLock(tmp_path, "r1"):
        with pytest.raises(RunLockError) as e:
            RunLock(tmp_path, "r1").__enter__()
    command = " ".join(sys.argv)[:120]
    said = re.fullmatch(rf"run r1 is in use by process {os.getpid()} \((.*)\), since "
                        rf"(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ); wait for it to end .*", str(e.value))
    assert said and said.group(1) == visible(command)
    assert not (tmp_path / "r1.lock").exists()  # let go: the file removed


def test_a_holder_that_has_not_said_who_it_is_yet(tmp_path):
    with RunLock(tmp_path, "r1") as held:
        os.ftruncate(held.fd, 0)  # the moment between taking the lock and writing who holds it
        with pytest.raises(RunLockError, match=r"in use by another process \(it has not said which yet\);"):
            RunLock(tmp_path, "r1").__enter__()
        os.pwrite(held.fd, b'["not", "a", "description"]', 0)
        with pytest.raises(RunLockError, match=r"in use by another process \(it has not said which yet\);"):
            RunLock(tmp_path, "r1").__enter__()


def test_a_lock_not_taken_or_let_go_holds_nothing_and_lets_go_again(tmp_path):
    lock = RunLock(tmp_path, "r1")
    assert lock.lost() is None
    lock.release()  # never taken: nothing to let go
    with lock:
        pass
    assert lock.lost() is None
    lock.release()  # let go twice (a finally after an exit): nothing more
    with RunLock(tmp_path, "r1"):  # and the run is free for the next
        pass


# -- the ledger: the subagents' spend -------------------------------------------------------------------------
def test_the_ledger_counts_the_subagents_spend(provider, tmp_path):
    s, _ = delegated(provider)
    (child,) = s.subruns
    assert child["costUsd"] > 0 and s.total_cost_usd > s.own_cost_usd
    ledger.bind(tmp_path, s)
    ledger.append(tmp_path, s, "spent", turns=s.turns, costUsd=s.own_cost_usd, totalCostUsd=s.total_cost_usd)
    same = dict  # the options as saved (the command line puts them in their current form first)
    ledger.check(tmp_path, s, same)  # the state as this process left it: accepted
    save(s, tmp_path)
    forgot = load(tmp_path, s.run_id)
    forgot.subruns[0]["costUsd"] = 0.0  # the children's spend forgotten; the run's own left as it was
    with pytest.raises(LedgerError, match=r"with its subagents' runs, less than the \$0\.00"):
        ledger.check(tmp_path, forgot, same)


def bound_run(tmp_path, **config):
    """A run bound in its ledger as the command line binds one (``run``), its options ``config``."""
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    s.config = dict(config)
    ledger.bind(tmp_path, s)
    return s


def test_only_an_approve_decision_in_the_ledger_approves_a_call(tmp_path):
    s = bound_run(tmp_path)
    s.approved = ["w1"]
    with pytest.raises(LedgerError, match=r"lists w1 as approved, but no approval was given"):
        ledger.check(tmp_path, s, dict)
    ledger.append(tmp_path, s, "decision", callId="w1", verdict="reject")
    with pytest.raises(LedgerError, match=r"lists w1 as approved"):
        ledger.check(tmp_path, s, dict)
    ledger.check(tmp_path, s, dict, given="w1")  # the call this very command approves
    ledger.append(tmp_path, s, "decision", callId="w1", verdict="approve")
    ledger.check(tmp_path, s, dict)


@pytest.mark.parametrize("turns,cost", [(1, 0.002), (2, 0.001), (2, 0.002)])
def test_the_ledger_refuses_a_state_that_forgot_turns_or_money(tmp_path, turns, cost):
    s = bound_run(tmp_path)
    ledger.append(tmp_path, s, "spent", turns=2, costUsd=0.002, totalCostUsd=0.002)
    s.turns, s.own_cost_usd = turns, cost
    if (turns, cost) == (2, 0.002):
        ledger.check(tmp_path, s, dict)
        return
    with pytest.raises(LedgerError, match=rf"records {turns} turns and \$0\.00{cost * 1000:.0f}000, less than the 2 "
                                          rf"turns and \$0\.002000 already spent"):
        ledger.check(tmp_path, s, dict)


def test_an_edited_option_is_refused_naming_each_option_that_differs(tmp_path):
    s = bound_run(tmp_path, max_turns=5)
    ledger.append(tmp_path, s, "config", config={"max_turns": 5, "budget": 1.0})  # a resume that set a budget
    ledger.append(tmp_path, s, "spent", turns=0, costUsd=0, totalCostUsd=0)  # ... and saved the state after
    s.config = {"max_turns": 5}  # the budget the resume set, edited out of the file
    with pytest.raises(LedgerError, match=r"the state file's options \(budget\) differ from the latest"):
        ledger.check(tmp_path, s, dict)
    s.config = {"max_turns": 6, "dedupe": "all"}
    with pytest.raises(LedgerError, match=r"options \(budget, dedupe, max_turns\) differ"):
        ledger.check(tmp_path, s, dict)


def test_options_a_resume_recorded_but_never_saved_are_mended_only_when_nothing_came_after(tmp_path):
    s = bound_run(tmp_path, max_turns=5)
    for turns in (6, 7):
        ledger.append(tmp_path, s, "config", config={"max_turns": turns})
    s.config = {"max_turns": 6}  # the change before the latest: the resume that recorded 7 died before saving
    ledger.check(tmp_path, s, dict)
    assert s.config == {"max_turns": 7}
    s.config = {"max_turns": 5}  # two changes back: an edit
    with pytest.raises(LedgerError, match=r"options \(max_turns\) differ"):
        ledger.check(tmp_path, s, dict)


def test_a_changed_model_is_refused_saying_what_was_given(tmp_path):
    s = bound_run(tmp_path)
    given = s.model
    s.model, s.meta["scenario"] = "another", "delegate"
    with pytest.raises(LedgerError) as e:
        ledger.check(tmp_path, s, dict)
    assert f"(model 'another', given {given!r}, scenario 'delegate', given None)" in str(e.value)


def test_a_run_without_its_ledger_is_refused_unless_made_in_process(tmp_path):
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    with pytest.raises(LedgerError, match="ledger .* is missing"):
        ledger.check(tmp_path, s, dict)  # by default: the command line made it
    ledger.check(tmp_path, s, dict, saved_options=False)  # made in-process: bound now
    assert [e["type"] for e in ledger.read(ledger.ledger_path(tmp_path, s.run_id))] == ["run"]


def test_a_ledger_line_that_cannot_be_read_is_skipped_not_the_lines_after_it(tmp_path):
    path = tmp_path / "r.ledger.jsonl"
    path.write_bytes(b'\xff\xfe not json\n{"type": "run", "instance": "i"}\n{"type": "spent", "ins')
    assert ledger.read(path) == [{"type": "run", "instance": "i"}]


# -- the trace's running cost ---------------------------------------------------------------------------------------
def test_each_turn_line_says_the_spend_with_that_turn_in_it(provider):
    s, events = scripted(provider, "plan")
    running, spent = [e["costUsd"] for e in events if e["type"] == "turn"], 0.0
    expected = []
    for t in s.per_turn:
        spent += t["cost_usd"]
        expected.append(round(spent, 6))
    assert running == expected and running[0] == TURN_1 and running[-1] == round(s.total_cost_usd, 6)


def test_a_turn_line_after_a_subagent_counts_the_childs_spend(provider):
    s, events = delegated(provider)
    parent = [e for e in events if e["type"] == "turn" and e["runId"] == s.run_id]
    assert len(s.subruns) == 1 and s.subruns[0]["costUsd"] > 0
    assert [e["costUsd"] for e in parent] == [round(s.per_turn[0]["cost_usd"], 6), round(s.total_cost_usd, 6)]
    assert parent[-1]["costUsd"] > round(s.own_cost_usd, 6)  # with the child's spend, not the parent's own


# -- what the loop writes down: the trace's lines, the tool log's records, the saves ---------------------------
def without_ms(events):
    for e in events:
        if "ms" in e:
            assert isinstance(e["ms"], int) and e["ms"] >= 0, e
    return [{k: v for k, v in e.items() if k not in ("ms", "runId")} for e in events if e["type"] != "turn"]


def test_the_trace_says_each_step_with_the_chapters_fields(tmp_path):
    async def scan(args, ctx):
        ctx.progress("half way")
        return "scanned"
    tools = [*Counted().tools(), Tool("scan", "Scans.", scan, read_only=True)]
    model = FakeModel([asks(call("w1", "write", {"text": "a"}), call("s1", "scan", {})), asks(call("w2", "write", {})),
                       {"role": "assistant", "content": "done"}])
    s, first = played(model, tools, state_dir=tmp_path)
    s, second = played(model, tools, state=approve(load(tmp_path, s.run_id), "w1"), state_dir=tmp_path)
    s, third = played(model, tools, state=reject(load(tmp_path, s.run_id), "w2"), state_dir=tmp_path)
    assert without_ms(first) == [
        {"type": "approval_required", "toolName": "write", "args": '{"text":"a"}', "callId": "w1"},
        {"type": "run_stopped", "status": "interrupted", "reason": "approval", "turns": 1, "costUsd": s.per_turn[0]
         ["cost_usd"]}]
    assert without_ms(second) == [
        {"type": "tool_start", "toolName": "write", "args": '{"text":"a"}', "callId": "w1"},
        {"type": "tool_result", "toolName": "write", "ok": True, "callId": "w1"},
        {"type": "tool_start", "toolName": "scan", "args": "{}", "callId": "s1"},
        {"type": "tool_progress", "toolName": "scan", "label": "half way"},
        {"type": "tool_result", "toolName": "scan", "ok": True, "callId": "s1"},
        {"type": "approval_required", "toolName": "write", "args": "{}", "callId": "w2"},
        {"type": "run_stopped", "status": "interrupted", "reason": "approval", "turns": 2,
         "costUsd": round(s.per_turn[0]["cost_usd"] + s.per_turn[1]["cost_usd"], 6)}]
    assert without_ms(third)[0] == {"type": "tool_result", "toolName": "write", "ok": False, "callId": "w2",
                                    "rejected": True}
    assert without_ms(third)[-1] == {"type": "run_stopped", "status": "completed", "reason": "completed",
                                     "turns": 3, "costUsd": round(s.total_cost_usd, 6)}
    assert {e["runId"] for e in first + second + third} == {s.run_id}


def test_run_stopped_names_the_condition_or_the_error():
    model = FakeModel([asks(call("l1", "look", {"text": "a"}))] * 3)
    s, events = played(model, Counted().tools(), stops=[stops.when(lambda st: st.turns >= 1, "one is enough")])
    assert stopped_line(events) == {"runId": s.run_id, "type": "run_stopped", "status": "interrupted",
                                    "reason": "stop_condition", "turns": 1, "costUsd": round(s.total_cost_usd, 6),
                                    "condition": "when", "why": "one is enough"}
    s, events = played(FakeModel([asks(call("x", "nope", {}))]), Counted().tools(), tool_errors="fatal")
    assert stopped_line(events)["error"] == s.error == "nope: unknown tool 'nope'; the tools are: write, store, look"


def test_each_answer_is_recorded_with_what_it_was():
    """ok and the flags of each kind of answer: the stop conditions, the cache and tool_runs read them."""
    async def denied(args, ctx):
        await asyncio.sleep(0.002)
        raise permanent(PermissionError("denied"))
    tools = [*Counted().tools(), Tool("locked", "Fails for good.", denied, read_only=True),
             Tool("again", "A write that honours its key.", Counted().tools()[1].run, idempotent=True)]
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages.append(asks(call("u1", "store", {"text": "x"}), call("i1", "again", {})))
    state.started += ["u1", "i1"]  # writes begun by a process that died
    replies = [state.messages[-1],
               asks(call("l1", "look", {"text": "y"}), call("l2", "look", {"text": "y"}), call("p1", "locked", {})),
               asks(call("w1", "write", {"text": "z"})), asks(call("s1", "store", {"text": "x"}))]
    model = FakeModel(replies)
    s, events = played(model, tools, state=state, dedupe="all")
    s, _ = played(model, tools, state=reject(s, "w1"), dedupe="all")
    log = {r["callId"]: {k: v for k, v in r.items() if k not in ("callId", "toolName", "args", "signature")}
           for r in s.tool_log}
    ms = {c: r.pop("ms") for c, r in log.items()}  # what ran took its time (2 ms and more); what did not, none
    assert {c: 2 <= v < 5000 for c, v in ms.items()} == {"u1": False, "i1": True, "l1": True, "l2": False,
                                                         "p1": True, "w1": False, "s1": True}
    assert ms["u1"] == ms["l2"] == ms["w1"] == 0
    assert log == {"u1": {"ok": False, "unknownOutcome": True}, "i1": {"ok": True, "rerun": True},
                   "l1": {"ok": True}, "l2": {"ok": True, "cached": True}, "p1": {"ok": False, "permanent": True},
                   "w1": {"ok": False, "rejected": True}, "s1": {"ok": True}}  # s1: an unknown outcome is no answer
    assert s.started == ["u1", "i1", "s1"] and s.tool_runs == 5
    assert [e.get("rerun") for e in events if e["type"] == "tool_start"] == [True, None, None]


def test_a_call_with_empty_arguments_runs_with_none():
    tools = Counted()
    s, _ = played(FakeModel([asks(call("l1", "look", ""))]), tools.tools())
    assert s.status == "completed" and tools.runs == {"l1": 1} and s.tool_log[0]["ok"]


def test_every_paid_turn_and_every_write_begun_is_on_disk_before_the_run_goes_on(tmp_path, monkeypatch):
    """Synced, not only written: a power cut may lose a read's result, never a paid turn or a write's start."""
    synced, seen = [], []
    real = os.fsync

    def fsync(fd):
        synced.append(True)
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)

    async def store(args, ctx):
        seen.append(("write runs", bool(synced)))
        return "stored"

    def before(turn):
        seen.append((f"call {turn}", bool(synced)))
        synced.clear()
    model = FakeModel([asks(call("s1", "store", {})), asks(call("l1", "look", {"text": "a"}))], before=before)
    tools = [Tool("store", "Writes.", store), *Counted().tools()[2:]]
    s, _ = played(model, tools, state_dir=tmp_path)
    assert s.status == "completed"
    assert seen == [("call 0", True), ("write runs", True), ("call 1", True), ("call 2", True)]


def test_a_disk_that_fills_up_stops_the_run_and_says_so(tmp_path, monkeypatch):
    from harness_lib import loop
    saves = []

    def full(state, directory, sync=True):
        saves.append(state.turns)
        if len(saves) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(state, directory, sync=sync)
    real = loop.save
    monkeypatch.setattr(loop, "save", full)
    s, events = played(FakeModel([asks(call("l1", "look", {"text": "a"}))] * 5), Counted().tools(),
                       state_dir=tmp_path)
    assert (s.status, s.interruption) == ("interrupted", {"type": "cancelled", "reason": s.error})
    assert s.error == "cannot write the run's files: [Errno 28] No space left on device" and s.turns == 1
    assert load(tmp_path, s.run_id).turns == 1  # the paid turn was saved before the disk filled


def test_the_tool_log_keeps_a_calls_milliseconds_to_a_tenth_and_the_trace_to_a_whole_one(monkeypatch):
    class Clock:  # 12.3456 ms between any two readings
        now = 0.0

        def perf_counter(self):
            self.now += 0.0123456
            return self.now
    monkeypatch.setattr(loop, "time", Clock())
    s, events = played(FakeModel([asks(call("l1", "look", {"text": "a"}), call("x1", "nope", {}))]), Counted().tools())
    assert [(r["ok"], r["ms"]) for r in s.tool_log] == [(True, 12.3), (False, 12.3)]  # a failure timed alike
    assert [e["ms"] for e in events if e["type"] == "tool_result"] == [12, 12]


def test_a_reads_answer_is_saved_without_an_fsync(tmp_path, monkeypatch):
    """A read may simply run again, so the save of its answer waits for the next synced one (state.save)."""
    saves, real_save = [], loop.save

    def recorded(state, directory, *, sync=True):
        saves.append((len(state.tool_log), bool(sync)))
        return real_save(state, directory, sync=sync)
    monkeypatch.setattr(loop, "save", recorded)
    s, _ = played(FakeModel([asks(call("l1", "look", {"text": "a"}))]), Counted().tools(), state_dir=tmp_path)
    assert s.status == "completed" and saves[[n for n, _ in saves].index(1)] == (1, False)
    assert saves[-1] == (1, True)  # the run's end is on disk


def test_a_call_read_once_says_why_its_arguments_cannot_be_read_and_nothing_when_they_can():
    good = loop.Call.parse(call("l1", "look", {"text": "a"}))
    assert (good.args, good.bad_args) == ({"text": "a"}, None)
    bad = loop.Call.parse(call("l2", "look", "[1]"))
    assert (bad.args, bad.bad_args, bad.raw_args) == (None, "arguments must be a JSON object", "[1]")


def test_a_run_without_prices_ends_saying_no_dollars():
    s, events = played(FakeModel([{"role": "assistant", "content": "done"}]), Counted().tools(), pricing=UNPRICED)
    assert s.status == "completed" and events[-1]["type"] == "run_stopped" and events[-1]["costUsd"] is None



# -- how a run ends when something outside it fails (found by make mutate: loop.run's handlers) ----------------
def test_an_answer_without_text_completes_with_an_empty_output():
    for content in (None, ""):
        s, _ = played(FakeModel([{"role": "assistant", "content": content}]), [])
        assert (s.status, s.output, s.error) == ("completed", "", None)


def test_an_error_policy_that_raises_ends_the_run_failed_saying_so():
    def broken(e):
        raise KeyError("oops")
    s, events = played(FakeModel([asks(call("x1", "nope", {}))]), Counted().tools(), tool_errors=broken)
    said = ("the tool_errors function raised KeyError: 'oops', given the error: unknown tool 'nope'; "
            "the tools are: write, store, look")
    assert (s.status, s.error, s.interruption) == ("failed", said, None)
    assert (stopped_line(events)["status"], stopped_line(events)["error"]) == ("failed", said)


def test_a_provider_unreachable_after_its_retries_interrupts_the_run_resumably():
    def down(turn):
        raise ModelError("connection refused", unreachable=True)
    s, events = played(FakeModel([], before=down), Counted().tools())
    assert (s.status, s.error) == ("interrupted", "connection refused")
    assert s.interruption == {"type": "cancelled", "reason": "provider unreachable: connection refused"}
    assert stopped_line(events)["reason"] == "cancelled"


def test_a_hook_that_fails_at_the_last_line_leaves_the_runs_end_saying_so_after_its_own_error():
    def hook(event):
        if event["type"] == "run_stopped":
            raise RuntimeError("my view broke")

    def ended(model, **options):
        trace = Trace(timestamps=False, on_event=hook)
        return asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), Counted().tools(),
                               Options(client=model, trace=trace, **options)))
    s = ended(FakeModel([]))
    assert (s.status, s.error) == ("completed", "the trace's on_event hook raised RuntimeError: my view broke "
                                                "(at a run_stopped event)")
    s = ended(FakeModel([asks(call("x1", "nope", {}))]), tool_errors="fatal")  # the run's own error comes first
    assert (s.status, s.error) == ("failed", "nope: unknown tool 'nope'; the tools are: write, store, look")
