"""What a run may do, and how it reaches its model: ``Options(base_url=url, max_turns=20, max_budget_usd=0.01)``.

The reader gives everything in one call, as the chapter writes it; ``Options`` checks it all there, before a run
starts, and keeps it apart in what it derives (declared in the class body):

* ``opts.limits`` (``Limits``): when the run stops before its model answers, the chapter's
  ``opts.limits.max_turns`` and ``max_budget_usd``, a reader's own ``stops`` and the strict budget; the loop
  checks ``opts.limits.conditions`` before each call (as pydantic-ai keeps ``UsageLimits`` apart);
* ``opts.transport`` (``client.Transport``, home of its defaults): the endpoint, its timeout and retries. It is
  only used to build a client when the reader gives none of their own (``client=``, any ``ChatModel``).

Options are fixed once made: ``dataclasses.replace(opts, max_turns=100)`` is a new, checked copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import budget, policy
from .client import NO_ENDPOINT, ChatModel, Transport
from .dedupe import DEDUPE, Dedupe
from .policy import Policy
from .pricing import CHAPTER_PRICES, Pricing
from .stops import StopCondition, check_conditions, max_budget, max_turns
from .trace import Trace


@dataclass(frozen=True)
class Limits:
    """When a run stops before its model answers: the turn cap, the budget in dollars (``strict_budget``: never
    crossed, ``budget.py``) and a reader's own ``stops``. Checked when made, so a NaN budget never starts a run."""
    max_turns: int | None = None
    max_budget_usd: float | None = None
    stops: Sequence[StopCondition] = ()  # a reader's own conditions (stops.py), kept as a tuple
    strict_budget: bool = False   # price each call before making it: the budget is never crossed (budget.py)
    strict_margin: float = 0.0    # count this much more prompt than the local tokenizer does (another server's)
    strict_max_tokens: int | None = None  # never ask for more output than the model allows (vLLM, OpenAI: 400)
    # -- derived: what the loop checks before each call, in order: the cap, the budget, the reader's own --
    conditions: tuple[StopCondition, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        budget.check_strict(self.strict_budget, self.strict_margin, self.max_budget_usd, self.strict_max_tokens)
        caps = ([max_turns(self.max_turns)] if self.max_turns is not None else []) + \
               ([max_budget(self.max_budget_usd)] if self.max_budget_usd is not None else [])
        object.__setattr__(self, "stops", tuple(check_conditions(self.stops)))
        object.__setattr__(self, "conditions", (*caps, *self.stops))


@dataclass(frozen=True)
class Options:
    """What the loop does (limits, policies, where it saves), and how to reach the model: either a
    ``client`` of the reader's (any ``ChatModel``), or the transport settings below, which build one. Fixed
    once made: ``dataclasses.replace(opts, max_turns=100)`` is a changed copy, checked as this one was."""
    base_url: str | None = Transport.base_url  # the endpoint; this, api_key and the block below: the transport
    api_key: str = Transport.api_key
    # -- the run's limits (Limits, whose defaults these are) --
    max_turns: int | None = Limits.max_turns
    max_budget_usd: float | None = Limits.max_budget_usd
    strict_budget: bool = Limits.strict_budget
    strict_margin: float = Limits.strict_margin
    strict_max_tokens: int | None = Limits.strict_max_tokens
    stops: Sequence[StopCondition] = Limits.stops
    # -- the policies, where the run is saved, what it tells the reader --
    tool_errors: Policy = "descriptive"   # policy.py: what a failed tool call tells the model
    dedupe: Dedupe = "off"                # dedupe.py: which repeats the cache may answer
    trace: Trace | None = None
    state_dir: str | Path | None = None
    on_progress: Callable[[str], None] | None = None
    pricing: Pricing = CHAPTER_PRICES
    client: ChatModel | None = None
    # -- the transport (client.Transport, whose defaults these are): builds a client when none is given --
    timeout_s: float = Transport.timeout_s
    max_retries: int = Transport.max_retries
    backoff_s: float = Transport.backoff_s
    load_wait_s: float = Transport.load_wait_s
    max_response_bytes: int = Transport.max_response_bytes
    stream: bool = Transport.stream
    on_text: Callable[[str], None] | None = Transport.on_text
    # -- derived, when made: the limits the loop reads, and the transport it connects with --
    limits: Limits = field(init=False, repr=False, compare=False)
    transport: Transport = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        policy.check(self.tool_errors)
        if self.dedupe not in DEDUPE:
            raise ValueError(f"dedupe must be one of {DEDUPE}, got {self.dedupe!r}")
        if self.client is None and not self.base_url:
            raise ValueError(NO_ENDPOINT)
        object.__setattr__(self, "transport", Transport(
            base_url=self.base_url, api_key=self.api_key, timeout_s=self.timeout_s, max_retries=self.max_retries,
            backoff_s=self.backoff_s, load_wait_s=self.load_wait_s, max_response_bytes=self.max_response_bytes,
            stream=self.stream, on_text=self.on_text))
        if self.max_budget_usd is not None and not self.pricing.known:
            raise ValueError("a budget in dollars needs a price: give the prices per million tokens "
                             "(Pricing.per_million, --price-in / --price-out), or cap the turns instead")
        limits = Limits(max_turns=self.max_turns, max_budget_usd=self.max_budget_usd, stops=self.stops,
                        strict_budget=self.strict_budget, strict_margin=self.strict_margin,
                        strict_max_tokens=self.strict_max_tokens)
        object.__setattr__(self, "limits", limits)
        object.__setattr__(self, "stops", limits.stops)  # the tuple the limits hold: a list given stays the reader's
