"""What a turn costs, at the reader's prices.

The chapter's prices, read 2026-09-06, are $2.00 per million input tokens and $12.00 per million output
tokens: the scripted provider is priced at them (``CHAPTER_PRICES``) and so is ``Options()`` by default,
so the chapter's figures come out in the chapter's dollars. Any other endpoint is priced at what the
reader says (``Pricing.per_million(2.0, 12.0)``, ``--price-in 2 --price-out 12``) or not at all
(``UNPRICED``): then a run counts tokens, its dollars stay 0 and are shown as ``unknown``, never as a real
cost, and a budget in dollars is refused (it could never act).

Dollars are added exactly. A price, a turn's cost and a run's spend are floats (the state file's JSON), each
standing for the decimal its shortest ``repr`` spells (``0.00247``); ``cost`` and ``add`` do their
arithmetic on those decimals, exactly, and return the float whose decimal is the result, or the next one
up when none is equal: a cost is never recorded below what was spent, so no budget, however small, is
crossed by rounding (rounding each turn to $1e-12, as before, recorded a run at $1e-10 a million tokens as
$0). The chapter's figures are decimals of six places, so they come out as the same floats as before.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal

from . import numbers

# Dollars per million tokens a price may be (0 is free): above the most, a price times a reply's tokens
# could reach costs no run can have; a price above 0 but below the smallest could come out as 0 a token (a
# float underflows below 1e-308): a price must never turn free.
MAX_PRICE = 10_000.0
SMALLEST_PRICE = 1e-12
_EXACT = Context(prec=80, rounding=ROUND_CEILING)  # enough digits for any sum of these; inexact: rounded up


def _decimal(value: float) -> Decimal:
    """The decimal a float of dollars (or tokens) stands for: the one its shortest repr spells."""
    return Decimal(value) if isinstance(value, int) else Decimal(repr(float(value)))


def _up(value: Decimal) -> float:
    """The float that stands for ``value``, or for the next decimal above it: never below."""
    f = float(value)
    if _decimal(f) < value:
        f = math.nextafter(f, math.inf)
    return f


def add(*amounts: float) -> float:
    """The exact sum of amounts of dollars, as a float never below it."""
    amounts = tuple(a for a in amounts if a)
    if len(amounts) < 2:  # nothing to add (a run without subagents, say): the amount is its own float
        return float(amounts[0]) if amounts else 0.0
    total = Decimal(0)
    for amount in amounts:
        total = _EXACT.add(total, _decimal(amount))
    return _up(total)


def dollars(usd: float) -> str:
    """Dollars as the chapter prints them (six places), or every place they have when six would round them
    (a run at $1e-10 a million tokens spends $2.24e-14 a turn: never shown as $0.000000)."""
    return f"{usd:.6f}" if round(usd, 6) == usd else format(_decimal(usd), "f")


@dataclass(frozen=True)
class Pricing:
    usd_per_input_token: float | None = 2.00 / 1e6
    usd_per_output_token: float | None = 12.00 / 1e6

    def __post_init__(self):
        for name in ("usd_per_input_token", "usd_per_output_token"):
            value = getattr(self, name)
            if value is not None:
                numbers.check(name, value, at_most=MAX_PRICE / 1e6, smallest=SMALLEST_PRICE / 1e6,
                              hint=" (or None)")
        if (self.usd_per_input_token is None) != (self.usd_per_output_token is None):
            raise ValueError("give both prices (input and output) or neither")

    @classmethod
    def per_million(cls, usd_in: float, usd_out: float) -> "Pricing":
        """Prices as providers publish them: dollars per million input and output tokens."""
        for name, value in (("input", usd_in), ("output", usd_out)):
            numbers.check(f"the {name} price", value, at_most=MAX_PRICE, smallest=SMALLEST_PRICE,
                          kind="a finite number of dollars", hint=" per million tokens")
        return cls(_up(_decimal(usd_in).scaleb(-6)), _up(_decimal(usd_out).scaleb(-6)))  # 0.4 -> 4e-07, exactly

    def per_million_prices(self) -> tuple[float | None, float | None]:
        """(input, output) in dollars per million tokens, as ``per_million`` takes them; (None, None) unknown."""
        if (prices := self._prices()) is None:
            return None, None
        return _up(_decimal(prices[0]).scaleb(6)), _up(_decimal(prices[1]).scaleb(6))

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
        """Dollars for a turn (or a forecast's mean turn: tokens may be fractional), exactly, never below;
        0.0 when no price is known (shown as unknown, never as a cost)."""
        if (prices := self._exact) is None:
            return 0.0
        exact = _EXACT.add(_EXACT.multiply(_decimal(prompt_tokens), prices[0]),
                           _EXACT.multiply(_decimal(completion_tokens), prices[1]))
        return _up(exact)

    @functools.cached_property
    def _exact(self) -> tuple[Decimal, Decimal] | None:
        """The prices as the decimals they stand for, made once."""
        prices = self._prices()
        return None if prices is None else (_decimal(prices[0]), _decimal(prices[1]))


CHAPTER_PRICES = Pricing()
UNPRICED = Pricing(None, None)
