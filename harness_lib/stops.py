"""Stop conditions: the loop's exits other than "the model answered" are a list of predicates.

Each condition looks at the run before a model call and returns ``None`` (go on) or a ``Stop``.
The turn cap and the budget are two of them; a reader adds their own with ``when``. Like ``stopWhen``
in the ``ai`` package, stopping is plural; unlike it, every stop is recorded with its reason.

    max_turns(n), max_budget(usd)        the chapter's two limits (their own statuses)
    when(predicate, reason)              a reader's own condition
    tool_called(name), turn_cost_above(usd), repeated_call(n), no_progress(n, progress=...)
    any_of(...), all_of(...)             composition
    permanent_error(), repeated_failure(n)   errors no message can fix: these end the run as failed

A reader's condition ends the run as ``interrupted`` (resumable) with its own interruption,
``{"type": "stop_condition", "name": ..., "reason": ...}``, never the ``cancelled`` a user's Stop gives:
code that reacts to Stop (a subagent ending its parent's tree, say) must not react to a condition.
The run's ``run_stopped`` trace line names the condition and says why. Resuming such a run with the
same condition stops it again at once (the state has not changed): resume it with other conditions.

A condition that raises, or returns something other than ``None`` or a ``Stop``, ends the run as
``failed`` with an error naming it (see ``first_stop``): a run is never left ``running`` by a broken
condition, and never goes on ungoverned.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import numbers
from .dedupe import signature  # the same call, as the dedupe cache sees it
from .state import RunState, Status, pending

ENDING = ("failed", "max_turns_exceeded", "budget_exceeded", "interrupted")


@dataclass(frozen=True)
class Stop:
    status: Status
    interruption: dict | None = None
    error: str | None = None      # for status "failed": what went wrong, in words

    def __post_init__(self):
        if self.status not in ENDING:
            raise ValueError(f"a Stop's status must be one of {ENDING}, got {self.status!r}")
        if self.status == "interrupted" and not isinstance(self.interruption, dict):
            raise ValueError("an interrupted Stop needs an interruption (a dict with a 'type')")

    @property
    def why(self) -> str:
        """The reason in words: the interruption's reason, else the error, else its type or status."""
        i = self.interruption or {}
        return i.get("reason") or self.error or i.get("type") or self.status


StopCondition = Callable[[RunState], "Stop | None"]


def _name(condition) -> str:
    return getattr(condition, "__name__", None) or type(condition).__name__


def _named(check, name: str):
    check.__name__ = name
    return check


def _count(what: str, n) -> int:
    return numbers.check_whole(what, n, least=1)


def _usd(what: str, usd) -> float:
    return numbers.check(what, usd, above_zero=True, at_most=numbers.MAX_USD)


def condition_stop(name: str, reason: str) -> Stop:
    """How a reader's condition ends a run: interrupted (resumable), saying which condition and why."""
    return Stop("interrupted", {"type": "stop_condition", "name": name, "reason": reason})


def check_conditions(conditions) -> list[StopCondition]:
    """The list ``Options(stops=...)`` takes, checked now rather than at the first turn."""
    if callable(conditions) or isinstance(conditions, (str, bytes)):
        raise TypeError("stops must be a list of stop conditions, e.g. stops=[repeated_call(3)]")
    conditions = list(conditions)
    for i, c in enumerate(conditions):
        if not callable(c):
            raise TypeError(f"stops[{i}] is a {type(c).__name__}, not a stop condition (a function of the run)")
    return conditions


def first_stop(conditions: Sequence[StopCondition], state: RunState) -> Stop | None:
    """The first condition that fires, in order. A condition that raises or answers something other than
    None or a Stop ends the run as failed, with an error naming it."""
    for condition in conditions:
        try:
            hit = condition(state)
        except Exception as e:  # noqa: BLE001 - a reader's code: report it, never leave the run running
            return Stop("failed", error=f"stop condition {_name(condition)} raised {type(e).__name__}: {e}")
        if hit is None:
            continue
        if not isinstance(hit, Stop):
            return Stop("failed", error=f"stop condition {_name(condition)} returned {hit!r}, not a Stop or None "
                                        f"(wrap a yes/no function with stops.when)")
        return hit
    return None


# -- the chapter's limits ------------------------------------------------------------------------------
def max_turns(n: int) -> StopCondition:
    _count("max_turns", n)
    return _named(lambda state: Stop("max_turns_exceeded", {"type": "max_turns"}) if state.turns >= n else None,
                  f"max_turns({n})")


def max_budget(usd: float) -> StopCondition:
    """Stops once the spend (children's included) has reached ``usd``. Checked before each call, so
    the overshoot is at most the price of one turn: a turn's price is unknown until it ends."""
    _usd("max_budget_usd", usd)
    return _named(lambda state: Stop("budget_exceeded", {"type": "max_budget"})
                  if state.total_cost_usd >= usd else None, f"max_budget({usd})")


# -- a reader's own ------------------------------------------------------------------------------------
def when(predicate: Callable[[RunState], bool], reason: str, *, name: str | None = None) -> StopCondition:
    """A reader's own condition. It ends the run as interrupted (resumable), with ``reason``."""
    if not callable(predicate):
        raise TypeError(f"when() needs a function of the run state, got {type(predicate).__name__}")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"when() needs a reason in words, got {reason!r}")
    if name is None:
        name = getattr(predicate, "__name__", "") or "when"
        name = "when" if name == "<lambda>" else name
    return _named(lambda state: condition_stop(name, reason) if predicate(state) else None, name)


def tool_called(name: str) -> StopCondition:
    """Stop once the model has called ``name`` (the ``ai`` package's ``hasToolCall``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool_called() needs a tool name, got {name!r}")
    return when(lambda s: any(r["toolName"] == name for r in s.tool_log), f"stop condition: {name} was called",
                name=f"tool_called({name!r})")


def turn_cost_above(usd: float) -> StopCondition:
    """Stop when a single turn cost more than ``usd``: a transcript grown too heavy to keep resending."""
    _usd("turn_cost_above", usd)
    return when(lambda s: bool(s.per_turn) and s.per_turn[-1]["cost_usd"] > usd,
                f"stop condition: a turn cost more than ${usd:.6f}", name=f"turn_cost_above({usd})")


def _calls(state: RunState) -> list[dict]:
    """Every tool call the model asked for, in order (from the transcript, so it survives a resume)."""
    return [c for m in state.messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or [])]


def _shown(name: str, args) -> str:
    return f"{name}({args if isinstance(args, str) else ''})"


def repeated_call(n: int) -> StopCondition:
    """Stop once the model has asked for the same call (same tool, same arguments, key order aside) ``n``
    times in the run. Checked before the calls are run, so the ``n``-th is left pending: a resume would run it."""
    _count("repeated_call", n)

    def check(state: RunState):
        seen: dict[str, int] = {}
        for call in _calls(state):
            sig = signature(call)
            seen[sig] = seen.get(sig, 0) + 1
            if seen[sig] >= n:
                shown = _shown(call["function"]["name"], call["function"]["arguments"])
                return condition_stop(f"repeated_call({n})", f"the same call asked for {n} times: {shown}")
        return None
    return _named(check, f"repeated_call({n})")


def no_progress(n: int, progress: Callable[[RunState], Any]) -> StopCondition:
    """Stop when ``progress(state)`` has not changed for ``n`` model turns. Progress is the reader's to
    define: any value that changes when the run gets somewhere (the files read so far, the facts found).

    Judged before each model call, once the last turn's calls have run. The condition remembers, per
    run, the last value and the turn it changed at; it starts counting the first time it sees a run
    (after a resume in a new process, from there), so it never stops a run early. A progress function
    that raises ends the run as failed, naming it."""
    _count("no_progress", n)
    if not callable(progress):
        raise TypeError(f"no_progress() needs progress=a function of the run state, got {type(progress).__name__}")
    label = getattr(progress, "__name__", "") or "progress"
    memory: dict[str, tuple[Any, int]] = {}  # run id -> (last value, turn it was first seen at)

    def check(state: RunState):
        if pending(state):  # a turn's progress shows once its calls have run: judge it then
            return None
        value = progress(state)
        try:
            value = copy.deepcopy(value)  # a value the state goes on mutating would always equal itself
        except Exception:  # noqa: BLE001 - a value that cannot be copied is compared as it is
            pass
        last = memory.get(state.run_id)
        if last is None or not bool(last[0] == value) or state.turns < last[1]:
            memory[state.run_id] = (value, state.turns)
            return None
        if state.turns - last[1] >= n:
            return condition_stop(f"no_progress({n})",
                                  f"no progress in {n} turns ({label} unchanged since turn {last[1]})")
        return None
    return _named(check, f"no_progress({n}, progress={label})")


# -- composition -------------------------------------------------------------------------------------------
def _conditions(kind: str, conditions) -> list:
    if not conditions:
        raise ValueError(f"{kind}() needs at least one condition")
    return check_conditions(conditions)


def any_of(*conditions: StopCondition) -> StopCondition:
    """Stop as soon as one of ``conditions`` would: the first that fires ends the run as it says (what a
    list in ``Options(stops=[...])`` does; useful inside ``all_of``)."""
    checks = _conditions("any_of", conditions)
    return _named(lambda state: first_stop(checks, state), f"any_of({', '.join(_name(c) for c in checks)})")


def all_of(*conditions: StopCondition) -> StopCondition:
    """Stop only when every one of ``conditions`` would, at the same check. The run ends as a condition
    of its own (interrupted, naming every reason); as failed if any of them says failed."""
    checks = _conditions("all_of", conditions)
    name = f"all_of({', '.join(_name(c) for c in checks)})"

    def check(state: RunState):
        found = [first_stop([c], state) for c in checks]  # every one, every time: some keep memory
        hits = [h for h in found if h is not None]
        if len(hits) < len(found):
            return None
        failed = [h for h in hits if h.status == "failed"]
        if failed:
            return Stop("failed", error=f"{name}: " + "; ".join(h.why for h in failed))
        return condition_stop(name, " and ".join(h.why for h in hits))
    return _named(check, name)


# -- errors no message can fix ------------------------------------------------------------------------------
def _failures(state: RunState) -> list[tuple[dict, str]]:
    """Tool results that failed on their own (not a rejection, not an unknown outcome), with what the
    transcript slot says."""
    said = {m.get("tool_call_id"): m.get("content") for m in state.messages if m.get("role") == "tool"}
    return [(r, str(said.get(r.get("callId"), ""))) for r in state.tool_log
            if not r.get("ok") and not r.get("rejected") and not r.get("unknownOutcome")]


def permanent_error() -> StopCondition:
    """End the run as failed once a tool has marked a failure permanent (``tools.PermanentToolError`` or
    ``tools.permanent``): no message to the model can fix it, so another turn is money for nothing."""
    def check(state: RunState):
        for record, said in _failures(state):
            if record.get("permanent"):
                return Stop("failed", error=f"permanent_error: {_shown(record['toolName'], record.get('args'))} "
                                            f"failed in a way no retry can fix: {said}")
        return None
    return _named(check, "permanent_error()")


def repeated_failure(n: int = 2) -> StopCondition:
    """End the run as failed once the same call (same tool, same arguments) has failed the same way (the
    same text in its transcript slot) ``n`` times: the model was told, tried again, and nothing changed.
    Needs no mark from the tool."""
    _count("repeated_failure", n)

    def check(state: RunState):
        seen: dict[tuple, int] = {}
        for record, said in _failures(state):
            key = (record.get("signature") or f"{record['toolName']}:{record.get('args', '')}", said)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] >= n:
                return Stop("failed", error=f"repeated_failure({n}): {_shown(record['toolName'], record.get('args'))} "
                                            f"failed the same way {n} times: {said}")
        return None
    return _named(check, f"repeated_failure({n})")
