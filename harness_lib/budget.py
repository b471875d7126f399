"""A budget that is never exceeded: ``Options(max_budget_usd=0.01, strict_budget=True)``.

The chapter's check compares the money already spent with the budget before each call, so a run ends at
most one turn over: "you cannot cap spend exactly; you can cap it to within one turn." With a local
tokenizer you can cap it exactly. Before each model call the strict budget:

1. counts the request's prompt tokens locally (``tokens.prompt_tokens``: the convention the scripted
   provider bills by), times ``1 + strict_margin``, rounded up;
2. refuses the call when that prompt alone would cross the budget, and when what is left after it buys
   not even one output token (a request cannot ask for 0: ``max_tokens`` is at least 1): the run ends
   ``budget_exceeded``, interruption ``{"type": "max_budget", "strict": True, "reason": "refused before
   paying: ..."}``, nothing paid;
3. otherwise sends ``max_tokens`` = the output tokens the remaining money buys (floor), so the turn's
   cost cannot cross the budget, whatever the model says.

After the reply (``settle``):

* a reply cut at that ``max_tokens`` (``finish_reason: "length"``) is a budget stop, not a failure: the
  turn is paid and recorded (turns, tokens, cost, its trace line), the run ends ``budget_exceeded`` with a
  reason, and the cut text is kept out of the transcript (it is in the interruption, ``cutReply``), so
  nothing presents it as an answer and a run resumed with more money asks the model again;
* a provider that billed more completion tokens than the ``max_tokens`` it was sent did not honour it:
  the guarantee rests on it, so the run ends ``failed`` saying so (whether or not this turn crossed); so
  does one whose usage is not a count of what was sent: a prompt or a reply billed at under half the
  tokens counted here (and 16 more), which no tokenizer explains, would let a reply far past
  ``max_tokens`` look honoured and the money spent look smaller than it was;
* a prompt billed above the local estimate that took the run over the budget ends it ``failed`` too,
  saying by how much the estimate was short (raise ``strict_margin``). Below the budget, the trace
  records the shortfall (``strict_budget`` lines carry the estimate beside the turn's billed count).

The guarantee is exact against the scripted provider (it counts with the same tokenizer and convention).
Against another server it holds as long as the server's prompt count is at most the local count times
``1 + strict_margin`` and the server honours ``max_tokens``; the second is checked, the first is measured
turn by turn (``margin_needed``). Money spent by a child run inside a tool is not priced before the call:
give a subagent its own strict budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import numbers, tokens
from .pricing import Pricing, add, dollars
from .stops import Stop

MAX_MARGIN = 10.0  # count at most 11 times the local tokenizer's prompt (Japanese on cl100k needed 0.342)


def check_strict(strict: bool, margin, budget_usd, ceiling=None) -> None:
    """Raise ``ValueError`` (at ``Limits(...)``, before any run) for strict-budget settings that could not act."""
    if not isinstance(strict, bool):
        raise ValueError(f"strict_budget must be True or False, got {strict!r}")
    if ceiling is not None:
        numbers.check_whole("strict_max_tokens", ceiling, least=1, hint=" (or None)")
    numbers.check("strict_margin", margin, at_most=MAX_MARGIN,
                  hint=" (0.05 = count 5 % more prompt tokens than the local tokenizer does)")
    if strict and budget_usd is None:
        raise ValueError("strict_budget needs a budget: give max_budget_usd (--budget USD)")


def check_options(strict: bool, margin, budget_usd, pricing: Pricing, ceiling=None) -> None:
    """``check_strict``, and the price a strict budget needs to turn dollars into tokens. (``Options`` asks
    every budget for a price before its ``Limits`` are made.)"""
    check_strict(strict, margin, budget_usd, ceiling)
    if strict and not pricing.known:
        raise ValueError("strict_budget needs a known price to turn the budget into tokens: give the prices per "
                         "million tokens (Pricing.per_million, --price-in / --price-out)")


@dataclass(frozen=True)
class Allowance:
    """What the strict budget allowed one call: its prompt as counted here, and the ``max_tokens`` sent
    (None when output is free and no ceiling is set: then no cap is needed)."""
    counted: int          # prompt tokens by the local count
    prompt: int           # ... times 1 + strict_margin, rounded up: what the check assumed
    max_tokens: int | None
    left_usd: float       # the budget minus the spend before the call
    bought: int | None = None  # the output tokens the money left buys (max_tokens unless the ceiling is lower)

    @property
    def budget_bound(self) -> bool:
        """max_tokens is what the budget bought (not the reader's ceiling): a cut there is a budget stop."""
        return self.max_tokens is not None and self.max_tokens == self.bought

    def request(self) -> dict:
        """The extra fields of the request."""
        return {} if self.max_tokens is None else {"max_tokens": self.max_tokens}


def spent_after(state, pricing: Pricing, prompt: int, completion: int) -> float:
    """The run's total spend once a turn of these tokens is recorded, with the same arithmetic as
    ``reply.record`` (exact, never below: ``pricing.add``), so "fits" here means "fits" once paid."""
    return add(add(state.own_cost_usd, pricing.cost(prompt, completion)), state.subrun_cost_usd)


def _most_output(state, pricing: Pricing, prompt: int, budget: float) -> int:
    """The largest completion that keeps the run within ``budget`` (0 when not even one token fits)."""
    left = budget - spent_after(state, pricing, prompt, 0)
    per_token = pricing.usd_per_output_token
    if not per_token:  # allow() never asks: output without a price, or free, needs no bound
        raise ValueError("the most output a budget buys needs a price above 0 per output token")
    guess = max(int(math.floor(left / per_token)), 0) + 2  # float rounding: a step or two over

    def fits(n: int) -> bool:
        return spent_after(state, pricing, prompt, n) <= budget
    if fits(guess):
        return guess
    low, high = 0, guess  # fits(low), not fits(high): bisect (a price near 0 can put the edge far from the guess)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _refuse(reason: str, **fields) -> Stop:
    return Stop("budget_exceeded", {"type": "max_budget", "strict": True, "reason": reason, **fields})


def allow(state, schemas: list[dict], opts, trace) -> Allowance | Stop:
    """Before a model call: the call's ``Allowance``, or the ``Stop`` that refuses it. ``opts``: the run's
    ``Options``: its ``pricing`` and ``limits`` (``max_budget_usd``, ``strict_margin``, and ``strict_max_tokens``,
    a ceiling on the output asked for: servers refuse a max_tokens above the model's limit, vLLM and OpenAI
    with a 400)."""
    limits, pricing = opts.limits, opts.pricing
    budget, margin, ceiling = limits.max_budget_usd, limits.strict_margin, limits.strict_max_tokens
    counted = tokens.prompt_tokens(state.messages, schemas)
    prompt = math.ceil(counted * (1 + margin))
    left = add(budget, -state.total_cost_usd)
    money = f"${dollars(left)} of the ${budget:g} budget left"
    hit: Allowance | Stop
    if spent_after(state, pricing, prompt, 0) > budget:
        hit = _refuse(f"refused before paying: the prompt alone ({prompt:,} tokens, "
                      f"${dollars(pricing.cost(prompt, 0))}) would cross the budget ({money})", prompt_tokens=prompt)
    elif pricing.usd_per_output_token == 0:
        hit = Allowance(counted, prompt, ceiling, left)
    elif (most := _most_output(state, pricing, prompt, budget)) < 1:
        hit = _refuse(f"refused before paying: after the prompt ({prompt:,} tokens) the money left buys no "
                      f"output token ({money})", prompt_tokens=prompt)
    else:
        hit = Allowance(counted, prompt, most if ceiling is None else min(most, ceiling), left, most)
    trace.emit(state.run_id, "strict_budget", turn=state.turns + 1, promptCounted=counted, promptAssumed=prompt,
               leftUsd=left, **({"maxTokens": hit.max_tokens} if isinstance(hit, Allowance) else {"refused": True}))
    return hit


def settle(state, turn, allowed: Allowance, opts) -> Stop | None:
    """After the reply, once it is recorded (paid): the stop the turn calls for, if any."""
    budget = opts.limits.max_budget_usd
    over = state.total_cost_usd > budget
    spent = f"${dollars(state.total_cost_usd)} spent of the ${budget:g} budget"
    if allowed.max_tokens is not None and turn.completion_tokens > allowed.max_tokens:
        return Stop("failed", error=f"the provider did not honour max_tokens: it was sent max_tokens="
                                    f"{allowed.max_tokens} and billed {turn.completion_tokens} completion tokens "
                                    f"({spent}{', over it' if over else ''}); the strict budget cannot be kept "
                                    f"against this provider")
    if not turn.estimated and (short := _underbilled(allowed.counted, turn)):
        return Stop("failed", error=f"the provider's usage does not count what was sent: it billed {short} "
                                    f"({spent}); a budget kept on such counts is not kept, so the strict budget "
                                    f"cannot be kept against this provider")
    if over:
        need = margin_for(allowed.counted, turn.prompt_tokens)
        return Stop("failed", error=f"the strict budget's prompt estimate was short: the server billed "
                                    f"{turn.prompt_tokens:,} prompt tokens where the local count was "
                                    f"{allowed.counted:,} (assumed {allowed.prompt:,}) ({spent}, over it); "
                                    f"raise strict_margin to at least {need:.3f}")
    if turn.finish == "length" and allowed.budget_bound:  # a cut at the reader's ceiling fails, as any cut
        cut = state.messages.pop()  # paid and recorded, but not an answer: kept out of the transcript
        state.per_turn[-1]["cut"] = "max_tokens"
        short = (" (fewer than it was sent: if the server has a lower output limit of its own, more money "
                 "will not help)" if turn.completion_tokens < allowed.max_tokens else "")
        return _refuse(f"the reply was cut at the max_tokens the budget bought ({turn.completion_tokens} of "
                       f"{allowed.max_tokens} tokens{short}; {spent}): paid and recorded, not an answer",
                       cutReply=cut)
    return None


UNDERBILLED = 2  # a count under half of this harness's (and 16 tokens) is not another tokenizer's: it is wrong


def _underbilled(counted: int, turn) -> str | None:
    """What the provider billed far below what this harness counts in the request it sent and the reply it
    received (no tokenizer differs from o200k_base by a factor of two), said; None when the counts are
    plausible. The check of max_tokens and of the budget rests on those counts."""
    received = tokens.completion_tokens(turn.message)
    pairs = (("prompt", turn.prompt_tokens, counted), ("completion", turn.completion_tokens, received))
    short = [f"{billed:,} {kind} tokens for {ours:,} counted here" for kind, billed, ours in pairs
             if ours > UNDERBILLED * billed + 16]
    return " and ".join(short) or None


def margin_for(counted: int, billed: int) -> float:
    """The ``strict_margin`` that would have covered a server billing ``billed`` prompt tokens for a request
    counted here as ``counted``."""
    return max(billed / counted - 1, 0.0) if counted else 0.0


def margin_needed(events: list[dict]) -> float | None:
    """From a run's trace (a strict one): the smallest ``strict_margin`` that would have covered every turn
    the server billed, i.e. max(billed / counted) - 1 (0 when the local count was never short). None when
    the trace has no strict turn with its billed count."""
    counted = {e["turn"]: e["promptCounted"] for e in events if e.get("type") == "strict_budget"
               and "maxTokens" in e}
    pairs = [(counted[e["turn"]], e["prompt_tokens"]) for e in events if e.get("type") == "turn"
             and e.get("turn") in counted]
    return max((margin_for(c, b) for c, b in pairs), default=None)
