"""The one place that says what a number a reader gives the harness may be.

A limit, a price, a timeout: a real number (``True`` is not one), finite (a NaN budget would never stop a
run, an infinite timeout never fire), and not negative. Where a number is multiplied into others (a margin
into a token count, a price into a cost, a budget divided by a price) it is bounded above too, so that no
value a reader may give overflows what it is multiplied into (``--strict-margin 1e306`` was an
OverflowError inside a run): ``at_most``, and for a price ``smallest``, the least value above 0. A count (a
turn cap, retries, a port, tokens) is a whole number: an ``int`` (again not ``True``) within its bounds,
``whole`` and ``check_whole``. Every core module and the command line check their numbers here, so the rule
and the wording of its error are the same wherever a number comes in.
"""

from __future__ import annotations

import math
from typing import TypeGuard

MAX_USD = 1e9  # a budget above a billion dollars is a typo, not a limit


def finite(value: object) -> TypeGuard[float]:
    """A finite int or float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def fine(value: object, above_zero: bool = False, at_most: float | None = None,
         smallest: float | None = None) -> TypeGuard[float]:
    """A finite number of at least 0 (above 0 with ``above_zero``), at most ``at_most``, and either 0 or at
    least ``smallest``."""
    return (finite(value) and (value > 0 if above_zero else value >= 0)
            and (at_most is None or value <= at_most) and (smallest is None or value == 0 or value >= smallest))


def check(name: str, value: object, *, above_zero: bool = False, at_most: float | None = None,
          smallest: float | None = None, kind: str = "a finite number", hint: str = "") -> float:
    """``value`` if it is ``fine``, else ``ValueError``: "NAME must be a finite number of at least 0, got ...".
    ``kind`` names the unit ("a finite number of dollars"), ``hint`` adds a word after the bounds."""
    if not fine(value, above_zero, at_most, smallest):
        if smallest is not None:
            low = f"{'' if above_zero else 'of 0 or '}at least {smallest:g}"
        else:
            low = "above 0" if above_zero else "of at least 0"
        high = "" if at_most is None else f" and at most {at_most:g}"
        raise ValueError(f"{name} must be {kind} {low}{high}{hint}, got {value!r}")
    return value


def whole(value: object, least: int = 0, most: int | None = None) -> TypeGuard[int]:
    """An int, not a bool, from ``least`` to ``most`` (both included; no upper bound without ``most``)."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= least
            and (most is None or value <= most))


def check_whole(name: str, value: object, *, least: int = 0, most: int | None = None, hint: str = "") -> int:
    """``value`` if it is ``whole``, else ``ValueError``: "NAME must be a whole number of at least 1, got ..."
    (or "from 0 to 65535"); ``hint`` adds a word after the bounds."""
    if not whole(value, least, most):
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise ValueError(f"{name} must be a whole number {bounds}{hint}, got {value!r}")
    return value
