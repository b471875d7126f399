"""What a turn costs. The chapter's prices, read 2026-09-06: $2.00 per million input tokens and
$12.00 per million output tokens."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pricing:
    usd_per_input_token: float = 2.00 / 1e6
    usd_per_output_token: float = 12.00 / 1e6

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        # Rounded to 1e-12 dollars so that sums of turns stay exact at the chapter's precision.
        return round(prompt_tokens * self.usd_per_input_token + completion_tokens * self.usd_per_output_token, 12)


CHAPTER_PRICES = Pricing()


def cost(usage: dict, pricing: Pricing = CHAPTER_PRICES) -> float:
    """Dollars for one reply's ``usage`` (chat completions shape)."""
    return pricing.cost(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
