"""Properties of the loop over random scripted models (hypothesis).

A model here is a random script: per turn, a text answer or one to three tool calls, each of them a good
read, a tool that raises, an unknown tool, malformed arguments, a write that needs approval, a tool that
returns something other than text, or a tool during which the user presses Stop; the model call itself
may be cancelled too. The run is driven the way a person would drive it: approve or reject (with or
without words) when it asks, continue after a Stop, from the state saved on disk each time. No HTTP: a
``FakeModel`` hands the loop chat-completion dicts, with usage counted the scripted provider's way.

Whatever the script, after every call of ``run``:
* exactly one terminal status, and exactly one ``run_stopped`` line saying it;
* every tool call answered by exactly one tool message before the next assistant message (only the
  last turn's calls may still be owed, and only by a run that stopped before answering them);
* cost = sum of the turn costs = what the model billed = what the trace's turn lines say;
* a budget is overshot by less than one turn, and a turn cap never;
* no tool call ran twice, and a write ran only if approved.
"""

import asyncio
import builtins
import math
import re
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness_lib import numbers
from harness_lib.loop import Options, run
from harness_lib.numbers import MAX_USD
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.state import approve, load, new_run, pending, reject
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import Tool, string_params
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK

EXITS = {"completed", "failed", "max_turns_exceeded", "budget_exceeded", "interrupted"}
KINDS = ["ok", "fail", "unknown", "malformed", "write", "nontext", "stop"]
DECISIONS = ["approve", "reject", "reject with words", "reject silently"]
ERRORS = ["ValueError", "KeyError", "RuntimeError", "OSError", "ZeroDivisionError", "SystemExit", "TimeoutError"]

turn = st.one_of(
    st.text(max_size=30).map(lambda t: ("text", t)),
    st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(ERRORS)), min_size=1, max_size=3)
      .map(lambda calls: ("calls", calls)),
)


def script_replies(script) -> list[dict]:
    replies = []
    for t, (kind, body) in enumerate(script):
        if kind == "text":
            replies.append({"role": "assistant", "content": body})
            continue
        calls = []
        for i, (what, error) in enumerate(body):
            cid = f"t{t}c{i}"
            calls.append({"ok": call(cid, "echo", {"text": cid}),
                          "fail": call(cid, "fail", {"error": error}),
                          "unknown": call(cid, "nope", {}),
                          "malformed": call(cid, "echo", '{"text": '),
                          "write": call(cid, "write", {"text": cid}),
                          "nontext": call(cid, "nontext", {}),
                          "stop": call(cid, "slow", {})}[what])
        replies.append(asks(*calls))
    return replies


class Tools:
    """The tools, counting every time each call id actually ran."""

    def __init__(self):
        self.runs: dict[str, int] = {}
        self.stopped: set[str] = set()

    def ran(self, ctx):
        self.runs[ctx.call_id] = self.runs.get(ctx.call_id, 0) + 1

    def list(self) -> list[Tool]:
        async def echo(args, ctx):
            self.ran(ctx)
            return f"echo {args.get('text')}"

        async def fail(args, ctx):
            self.ran(ctx)
            raise getattr(builtins, args["error"])("it broke")

        async def write(args, ctx):
            self.ran(ctx)
            return f"wrote {args['text']} (key {ctx.idempotency_key})"

        async def nontext(args, ctx):
            self.ran(ctx)
            return {"rows": [1, 2, None], "ok": True}

        async def slow(args, ctx):
            if ctx.call_id not in self.stopped:  # the user presses Stop while it runs, once
                self.stopped.add(ctx.call_id)
                asyncio.current_task().cancel("user pressed Stop")
                await asyncio.sleep(5)
            self.ran(ctx)
            return "slow work done"

        return [Tool("echo", "Echo.", echo, string_params("text"), read_only=True),
                Tool("fail", "Fails.", fail, string_params("error")),
                Tool("write", "Writes. Needs approval.", write, string_params("text"), needs_approval=True),
                Tool("nontext", "Returns a dict.", nontext),
                Tool("slow", "Slow.", slow, read_only=True)]


def check_transcript(messages: list[dict], may_owe: bool):
    """Each assistant message's calls are answered, each exactly once, before the next assistant message."""
    i, answered_total = 0, 0
    while i < len(messages):
        m = messages[i]
        i += 1
        if m["role"] != "assistant" or not m.get("tool_calls"):
            assert m["role"] != "tool", f"a tool message with no call before it at {i - 1}"
            continue
        ids = [c["id"] for c in m["tool_calls"]]
        answers = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answers.append(messages[i]["tool_call_id"])
            i += 1
        answered_total += len(answers)
        assert len(answers) == len(set(answers)) and set(answers) <= set(ids), (ids, answers)
        if i < len(messages) or not may_owe:
            assert sorted(answers) == sorted(ids), f"calls {ids} answered by {answers}"
    assert answered_total == sum(1 for m in messages if m["role"] == "tool")


def cost(usage: dict) -> float:
    return CHAPTER_PRICES.cost(usage["prompt_tokens"], usage["completion_tokens"])


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(turn, max_size=7),
       cancel_model_at=st.sets(st.integers(0, 7), max_size=2),
       decisions=st.lists(st.sampled_from(DECISIONS), min_size=12, max_size=12),
       max_turns=st.one_of(st.none(), st.integers(1, 8)),
       budget=st.one_of(st.none(), st.floats(min_value=0.0003, max_value=0.006)))
def test_random_models_keep_the_loops_promises(script, cancel_model_at, decisions, max_turns, budget):
    keeps_the_loops_promises(script, cancel_model_at, decisions, max_turns, budget, note=event)


def keeps_the_loops_promises(script, cancel_model_at, decisions, max_turns, budget, note=lambda what: None):
    tools = Tools()
    cancelled_turns: set[int] = set()

    def before_reply(turn_index: int):
        if turn_index in cancel_model_at and turn_index not in cancelled_turns:
            cancelled_turns.add(turn_index)
            asyncio.current_task().cancel("user pressed Stop")

    model = FakeModel(script_replies(script), before=before_reply)
    trace = Trace(timestamps=False)
    approved, rejected = set(), set()

    with tempfile.TemporaryDirectory() as state_dir:
        opts = Options(client=model, trace=trace, state_dir=state_dir, max_turns=max_turns, max_budget_usd=budget)
        state = new_run(SYSTEM_PROMPT, TASK, "random")
        for attempt in range(len(decisions)):
            lines = len(trace.events)
            state = asyncio.run(_in_a_task(run(state, tools.list(), opts)))

            # exactly one terminal status, said once
            stops = [e for e in trace.events[lines:] if e["type"] == "run_stopped"]
            assert state.status in EXITS and len(stops) == 1 and stops[0]["status"] == state.status
            check_transcript(state.messages, may_owe=state.status != "completed")
            assert load(state_dir, state.run_id) == state  # what is on disk is what was returned

            # what the model billed = the turns = the trace
            assert len(model.bills) == state.turns == len(state.per_turn)
            assert state.own_cost_usd == pytest.approx(sum(cost(b) for b in model.bills), abs=1e-12)
            assert state.own_cost_usd == pytest.approx(sum(t["cost_usd"] for t in state.per_turn), abs=1e-12)
            turn_lines = [e for e in trace.events if e["type"] == "turn"]
            assert state.own_cost_usd == pytest.approx(sum(cost(e) for e in turn_lines), abs=1e-12)
            assert state.prompt_tokens == sum(b["prompt_tokens"] for b in model.bills)
            if turn_lines:
                assert turn_lines[-1]["costUsd"] == round(state.total_cost_usd, 6)

            # limits: at most one turn over budget, never over the cap
            if budget is not None and state.turns:
                assert state.own_cost_usd - state.per_turn[-1]["cost_usd"] < budget
            if max_turns is not None:
                assert state.turns <= max_turns

            # no call ran twice; a write only if approved
            assert all(n == 1 for n in tools.runs.values()), tools.runs
            writes = {c["id"] for m in state.messages if m["role"] == "assistant"
                      for c in m.get("tool_calls") or [] if c["function"]["name"] == "write"}
            assert {cid for cid in tools.runs if cid in writes} <= approved

            # a person's next step
            interruption = state.interruption or {}
            note(f"stopped: {state.status} {interruption.get('type', '')}".strip())  # hypothesis's statistics
            if state.status != "interrupted":
                break
            state = load(state_dir, state.run_id)  # every continuation starts from disk
            if interruption["type"] == "approval":
                choice, cid = decisions[attempt], interruption["callId"]
                if choice == "approve":
                    approve(state, cid)
                    approved.add(cid)
                else:
                    reject(state, cid, "not now" if choice == "reject with words" else None,
                           silent=choice == "reject silently")
                    rejected.add(cid)
        if state.status == "completed":
            assert pending(state) == [] and state.output is not None
        assert not rejected & set(tools.runs)


async def _in_a_task(coro):
    """Run ``coro`` in its own task, so a Stop pressed inside it cancels that task and nothing else."""
    return await asyncio.ensure_future(coro)


# -- the same promises on the cases that found bugs: fast, in `make check` ------------------------------------
def calls(*kinds: str) -> tuple:
    return ("calls", [(k, "ValueError" if k != "fail" else "SystemExit") for k in kinds])


def spend_after(script, turns: int) -> float:
    """What the first ``turns`` turns of ``script`` cost (a script of reads: nothing asks a person)."""
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "random"), Tools().list(),
                            Options(client=FakeModel(script_replies(script)), max_turns=turns)))
    assert state.turns == turns
    return state.own_cost_usd


READS = [calls("ok"), calls("ok", "ok"), calls("ok"), calls("ok"), ("text", "done")]
CASES = {  # name: (script, Stops pressed in the model call at these turns, the person's decisions, cap, budget)
    # (a budget to be worked out is a function: it runs when the test does, not when the file is collected)
    "a write after a rejected write asks again": ([calls("write"), calls("write"), ("text", "done")], set(),
                                                  ["reject", "approve"], None, None),
    "a write after an approved one asks again": ([calls("write", "ok"), calls("ok", "write"), ("text", "ok")],
                                                 set(), ["approve", "reject silently"], None, None),
    "the cap equal to the turns the script asks for": (READS[:3], set(), [], 3, None),
    "the budget equal to the spend after two turns": (READS, set(), [], None, lambda: spend_after(READS, 2)),
    "Stop pressed in two model calls": (READS, {0, 2}, [], 6, None),
    "Stop inside a tool, beside a write": ([calls("stop", "write"), calls("write"), ("text", "done")], set(),
                                           ["approve", "reject with words"], None, None),
    "every kind of failure": ([calls("fail", "unknown", "malformed"), calls("nontext", "fail"), ("text", "")],
                              {1}, [], 4, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_cases_that_found_bugs_keep_the_loops_promises(name):
    """The property on scripts that make each rule act at its edge: approval after a decision either way, a
    cap and a budget reached exactly, Stops in a model call and in a tool, every kind of failure. Of the bugs
    they find, the slow random search finds a write run unapproved after a rejection on some draws only, and
    the budget's boundary never (a random budget does not equal a spend), and only in `make test` (issue 25)."""
    script, cancel_model_at, decisions, max_turns, budget = CASES[name]
    budget = budget() if callable(budget) else budget
    keeps_the_loops_promises(script, cancel_model_at, decisions + ["approve"] * (12 - len(decisions)), max_turns,
                             budget)


# -- a few properties of the pieces, where hypothesis finds edge cases faster than examples --------
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=3)))
def test_limits_that_make_no_sense_are_rejected_up_front(value):
    ok_turns = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ok_budget = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                 and 0 < value <= MAX_USD)  # above a billion dollars: a typo (numbers.py)
    for name, ok in (("max_turns", ok_turns), ("max_budget_usd", ok_budget)):
        if value is None:
            continue
        try:
            Options(base_url="http://127.0.0.1:9/v1", **{name: value})
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == ok, (name, value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=3)), st.integers(0, 2), st.one_of(st.none(), st.integers(0, 65535)))
def test_a_whole_number_is_an_int_within_its_bounds_and_nothing_else(value, least, most):
    """numbers.whole, the one check every count goes through (a cap, retries, a port, tokens)."""
    ok = type(value) is int and value >= least and (most is None or value <= most)
    assert numbers.whole(value, least, most) == ok
    if ok:
        assert numbers.check_whole("n", value, least=least, most=most) == value
    else:
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        with pytest.raises(ValueError, match=re.escape(f"n must be a whole number {bounds}, got {value!r}")):
            numbers.check_whole("n", value, least=least, most=most)
