"""Stop conditions: the loop's exits other than "the model answered" are a list of predicates.

Each condition looks at the run before a model call and returns ``None`` (go on) or a ``Stop``.
The turn cap and the budget are two of them; a reader adds their own with ``when``. Like ``stopWhen``
in the ``ai`` package, stopping is plural; unlike it, every stop is recorded with its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .state import RunState


@dataclass(frozen=True)
class Stop:
    status: str
    interruption: dict


StopCondition = Callable[[RunState], "Stop | None"]


def max_turns(n: int) -> StopCondition:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_turns must be a whole number of at least 1, got {n!r}")

    def check(state: RunState):
        return Stop("max_turns_exceeded", {"type": "max_turns"}) if state.turns >= n else None
    check.__name__ = f"max_turns({n})"
    return check


def max_budget(usd: float) -> StopCondition:
    """Stops once the spend (children's included) has reached ``usd``. Checked before each call, so
    the overshoot is at most the price of one turn: a turn's price is unknown until it ends."""
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd <= 0:
        raise ValueError(f"max_budget_usd must be a finite number above 0, got {usd!r}")

    def check(state: RunState):
        return Stop("budget_exceeded", {"type": "max_budget"}) if state.total_cost_usd >= usd else None
    check.__name__ = f"max_budget({usd})"
    return check


def when(predicate: Callable[[RunState], bool], reason: str) -> StopCondition:
    """A reader's own condition. It ends the run as interrupted (resumable), with ``reason``."""
    def check(state: RunState):
        return Stop("interrupted", {"type": "cancelled", "reason": reason}) if predicate(state) else None
    check.__name__ = f"when({reason!r})"
    return check


def tool_called(name: str) -> StopCondition:
    """Stop once the model has called ``name`` (the ``ai`` package's ``hasToolCall``)."""
    return when(lambda s: any(r["toolName"] == name for r in s.tool_log), f"stop condition: {name} was called")


def turn_cost_above(usd: float) -> StopCondition:
    """Stop when a single turn cost more than ``usd``: a transcript grown too heavy to keep resending."""
    return when(lambda s: bool(s.per_turn) and s.per_turn[-1]["cost_usd"] > usd,
                f"stop condition: a turn cost more than ${usd:.6f}")
