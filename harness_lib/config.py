"""A run's saved options (``state.config``): one name each, its default and its check, in one table.

The names are ``Options``' own (``max_turns``, ``max_budget_usd``, ``timeout_s``, ...), and the command line's
flags are the same names spelled with dashes, except where a flag is shorter (``FLAGS``: ``--budget``,
``--timeout``). Two options are the operator's, not the loop's: ``latency_ms`` (the scripted provider's, when
the command line starts one) and ``local_model`` (section 12's server, started again on resume); the prices
are saved as the two numbers an operator gives (``price_in``, ``price_out``: dollars per million tokens),
from which the run's ``Pricing`` is made. The API key is never saved (it stays in LLM_API_KEY).

Files written before the options had one name each (``budget``, ``timeout``) are read through ``OLD_NAMES``;
every default, and "no turn cap" (None), is decided in ``SAVED`` and nowhere else.
"""

from __future__ import annotations

from . import budget, numbers
from .dedupe import DEDUPE
from .policy import POLICIES
from .pricing import MAX_PRICE, SMALLEST_PRICE
from .state import StateFileError
from .terminal import visible

DEFAULT_MAX_TURNS = 50  # a runaway stops here unless told otherwise; the anchors use 10 to 50
MAX_LATENCY_MS = 600_000.0  # the scripted provider's latency: ten minutes a reply is the most it will sleep


class Number:
    """A number an operator gives, through the one number check (``numbers.check``) with its bounds: ``check``
    for a value (a state file's, an argument's), ``parse`` for the text typed on a command line."""

    def __init__(self, name: str, unit: str = "", hint: str = "", **bounds):
        self.name, self.unit, self.hint, self.bounds = name, unit, hint, bounds

    def check(self, value) -> float:
        try:
            return numbers.check(self.name, value, kind=f"a finite number{self.unit}", hint=self.hint, **self.bounds)
        except ValueError as e:
            raise ValueError(str(e).removeprefix(f"{self.name} ")) from None

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"must be a number, got {text}") from None
        return self.check(value)


PRICE = Number("price", " of dollars", at_most=MAX_PRICE, smallest=SMALLEST_PRICE, hint=" per million tokens")
TIMEOUT = Number("timeout", " of seconds", above_zero=True)
SECONDS = Number("seconds")
BUDGET = Number("budget", " of dollars", above_zero=True, at_most=numbers.MAX_USD)
MARGIN = Number("margin", at_most=budget.MAX_MARGIN)
LATENCY = Number("latency", " of milliseconds", at_most=MAX_LATENCY_MS)


def turn_cap(text: str) -> int | None:
    """A turn cap as typed: a whole number of at least 1; ``none`` or 0 is no cap (None)."""
    if text.strip().lower() in ("none", "0"):
        return None
    value = int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _optional(check):
    return lambda v: None if v is None else check(v)


def _is(kind, test=lambda v: True, what=""):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, kind) or not test(v):
            raise ValueError(f"{v!r} is not {what}")
        return v
    return check


def _flag(v):
    if not isinstance(v, bool):
        raise ValueError(f"{v!r} is not true or false")
    return v


# Saved in the state by ``start``, continued by ``resume``: name -> (default, the check a value must pass,
# given or read back from a state file). A new option joins by one line here and one flag in cli.parser.
SAVED = {
    "max_turns": (DEFAULT_MAX_TURNS, _optional(_is(int, lambda v: numbers.whole(v, 1),
                                                          "a whole number of at least 1"))),
    "max_budget_usd": (None, _optional(BUDGET.check)),
    "tool_errors": ("descriptive", _is(str, lambda v: v in POLICIES, f"one of {POLICIES}")),
    "dedupe": ("off", _is(str, lambda v: v in DEDUPE, f"one of {DEDUPE}")),
    "trace": (None, _optional(_is(str, bool, "a file name"))),
    "base_url": (None, _optional(_is(str, bool, "a URL"))),
    "latency_ms": (0.0, LATENCY.check),
    "strict_budget": (False, _flag),
    "strict_margin": (0.0, MARGIN.check),
    "price_in": (None, _optional(PRICE.check)),
    "price_out": (None, _optional(PRICE.check)),
    "timeout_s": (60.0, TIMEOUT.check),  # client.Transport.timeout_s (not imported here: httpx is slow to load)
    "stream": (False, _flag),
    "local_model": (False, _flag),  # its server's address changes each time: resume starts it again
}
DEFAULTS = {name: default for name, (default, _) in SAVED.items()}

FLAGS = {"max_budget_usd": "--budget", "timeout_s": "--timeout"}  # the flags shorter than their option's name
OLD_NAMES = {"budget": "max_budget_usd", "timeout": "timeout_s"}  # state files and ledgers written before


def flag(name: str) -> str:
    """The command line's flag for the option ``name``: ``--max-turns``, ``--budget``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def given(options: dict, partial: bool = False) -> dict:
    """Options given to start a run (every other one takes its default) or, ``partial``, to change on resume
    (only those given), each checked (``ValueError`` names the bad one)."""
    if unknown := [name for name in options if name not in SAVED]:
        old = f" (now {OLD_NAMES[unknown[0]]})" if unknown[0] in OLD_NAMES else ""
        raise ValueError(f"no run option is called {unknown[0]!r}{old}; the options are {', '.join(SAVED)}")
    out = {} if partial else dict(DEFAULTS)
    for name, value in options.items():
        try:
            out[name] = SAVED[name][1](value)
        except ValueError as e:
            raise ValueError(f"the option {name}: {e}") from None
    return out


def read(config: dict) -> dict:
    """A saved configuration, in today's names, every option present, checked value by value
    (``StateFileError`` names the bad one). An option missing takes its default: a run made in-process (a
    notebook) has none saved, and gets the default turn cap, never none (a runaway resumed would never stop)."""
    if both := [old for old, new in OLD_NAMES.items() if old in config and new in config]:
        raise StateFileError(f"the saved options hold {both[0]}, the old name of {OLD_NAMES[both[0]]}, beside "
                             f"{OLD_NAMES[both[0]]} itself: the file was edited")
    renamed = {OLD_NAMES.get(name, name): value for name, value in config.items()}
    out = {}
    for name, (default, check) in SAVED.items():
        try:
            out[name] = check(renamed.get(name, default))
        except ValueError as e:
            raise StateFileError(f"the saved option {name}: {visible(e)}") from None
    return out
