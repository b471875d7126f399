"""What a turn costs, at the reader's prices.

The chapter's prices, read 2026-09-06, are $2.00 per million input tokens and $12.00 per million output
tokens: the scripted provider is priced at them (``CHAPTER_PRICES``) and so is ``Options()`` by default,
so the chapter's figures come out in the chapter's dollars. Any other endpoint is priced at what the
reader says (``Pricing.per_million(2.0, 12.0)``, ``--price-in 2 --price-out 12``) or not at all
(``UNPRICED``): then a run counts tokens, its dollars stay 0 and are shown as ``unknown``, never as a real
cost, and a budget in dollars is refused (it could never act).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import numbers


@dataclass(frozen=True)
class Pricing:
    usd_per_input_token: float | None = 2.00 / 1e6
    usd_per_output_token: float | None = 12.00 / 1e6

    def __post_init__(self):
        for name in ("usd_per_input_token", "usd_per_output_token"):
            value = getattr(self, name)
            if value is not None:
                numbers.check(name, value, hint=" (or None)")
        if (self.usd_per_input_token is None) != (self.usd_per_output_token is None):
            raise ValueError("give both prices (input and output) or neither")

    @classmethod
    def per_million(cls, usd_in: float, usd_out: float) -> "Pricing":
        """Prices as providers publish them: dollars per million input and output tokens."""
        for name, value in (("input", usd_in), ("output", usd_out)):
            numbers.check(f"the {name} price", value, kind="a finite number of dollars")
        return cls(usd_in / 1e6, usd_out / 1e6)

    def per_million_prices(self) -> tuple[float | None, float | None]:
        """(input, output) in dollars per million tokens, as ``per_million`` takes them; (None, None) unknown."""
        if (prices := self._prices()) is None:
            return None, None
        return round(prices[0] * 1e6, 9), round(prices[1] * 1e6, 9)

    @property
    def known(self) -> bool:
        return self.usd_per_input_token is not None

    def _prices(self) -> tuple[float, float] | None:
        """(input, output) per token, or None when no price is known (both or neither: __post_init__)."""
        if self.usd_per_input_token is None or self.usd_per_output_token is None:
            return None
        return self.usd_per_input_token, self.usd_per_output_token

    def describe(self) -> str:
        if (prices := self._prices()) is None:
            return "no price given: tokens counted, dollars unknown"
        return f"${prices[0] * 1e6:g} / ${prices[1] * 1e6:g} per million tokens"

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        """Dollars for a turn (or a forecast's mean turn: tokens may be fractional); 0.0 when no price is
        known (shown as unknown, never as a cost)."""
        if (prices := self._prices()) is None:
            return 0.0
        # Rounded to 1e-12 dollars so that sums of turns stay exact at the chapter's precision.
        return round(prompt_tokens * prices[0] + completion_tokens * prices[1], 12)


CHAPTER_PRICES = Pricing()
UNPRICED = Pricing(None, None)
