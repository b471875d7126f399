"""The one place that says what a number a reader gives the harness may be.

A limit, a price, a timeout: a real number (``True`` is not one), finite (a NaN budget would never stop a
run, an infinite timeout never fire), and not negative. Every core module checks its numbers here, so the
rule and the wording of its error are the same wherever a number comes in.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def finite(value: object) -> TypeGuard[float]:
    """A finite int or float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def fine(value: object, above_zero: bool = False) -> TypeGuard[float]:
    """A finite number of at least 0 (above 0 with ``above_zero``)."""
    return finite(value) and (value > 0 if above_zero else value >= 0)


def check(name: str, value: object, *, above_zero: bool = False, kind: str = "a finite number",
          hint: str = "") -> float:
    """``value`` if it is ``fine``, else ``ValueError``: "NAME must be a finite number of at least 0, got ...".
    ``kind`` names the unit ("a finite number of dollars"), ``hint`` adds a word after the bound."""
    if not fine(value, above_zero):
        raise ValueError(f"{name} must be {kind} {'above' if above_zero else 'of at least'} 0{hint}, got {value!r}")
    return value
