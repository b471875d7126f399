"""What a run may do, and how it reaches its model: ``Options(base_url=url, max_turns=20)``.

The loop's policy (its limits, what a failed tool tells the model, which repeats the cache answers, where
the run is saved) and the transport (``client.Transport``: the endpoint, its timeout and retries) are
given together, as the chapter writes them; the transport is only used to build a client when the reader
gives none of their own (``client=``, any ``ChatModel``). Everything is checked here, before a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import budget, policy
from .client import NO_ENDPOINT, ChatModel, Transport
from .dedupe import DEDUPE, Dedupe
from .policy import Policy
from .pricing import CHAPTER_PRICES, Pricing
from .stops import StopCondition, check_conditions, max_budget, max_turns
from .trace import Trace


@dataclass
class Options:
    """What the loop does (limits, policies, where it saves), and how to reach the model: either a
    ``client`` of the reader's (any ``ChatModel``), or the transport settings below, which build one."""
    base_url: str | None = None
    api_key: str = Transport.api_key
    max_turns: int | None = None
    max_budget_usd: float | None = None
    strict_budget: bool = False   # price each call before making it: the budget is never crossed (budget.py)
    strict_margin: float = 0.0    # count this much more prompt than the local tokenizer does (another server's)
    strict_max_tokens: int | None = None  # never ask for more output than the model allows (vLLM, OpenAI: 400)
    stops: list[StopCondition] = field(default_factory=list)
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
    on_text: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        policy.check(self.tool_errors)
        if self.dedupe not in DEDUPE:
            raise ValueError(f"dedupe must be one of {DEDUPE}, got {self.dedupe!r}")
        if self.client is None and not self.base_url:
            raise ValueError(NO_ENDPOINT)
        self.transport = Transport(self.base_url, self.api_key, self.timeout_s, self.max_retries, self.backoff_s,
                                   self.load_wait_s, self.max_response_bytes, self.stream, self.on_text)
        if self.max_budget_usd is not None and not self.pricing.known:
            raise ValueError("a budget in dollars needs a price: give the prices per million tokens "
                             "(Pricing.per_million, --price-in / --price-out), or cap the turns instead")
        budget.check_options(self.strict_budget, self.strict_margin, self.max_budget_usd, self.pricing,
                             self.strict_max_tokens)
        # Validate the limits now, not at the first turn: a NaN budget must never start a run.
        self.conditions = ([max_turns(self.max_turns)] if self.max_turns is not None else []) + \
                          ([max_budget(self.max_budget_usd)] if self.max_budget_usd is not None else []) + \
                          check_conditions(self.stops)
