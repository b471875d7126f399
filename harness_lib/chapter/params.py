"""Checking a notebook's parameters, and showing tables and text the way a reader reads them.

A reader edits a parameters cell. A reasonable value (a tuple of any caps, one budget instead of three)
must simply work; an unreasonable one gets one line naming the parameter and what it accepts, never a
traceback from library code. ``ParameterError`` renders as that one line in IPython.

Parameter names are the notebooks' (``CAPS``, ``BUDGETS``...): each chapter function checks its
arguments under the upper-case name the notebooks give them.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from numbers import Integral, Real

import pandas as pd

from . import language
from .language import _


class ParameterError(ValueError):
    """A notebook parameter out of range. IPython shows it as one line, without a traceback."""

    def _render_traceback_(self):
        return [f"ParameterError: {self}"]


def check_param(name: str, value, accepts: str, ok) -> object:
    """``value`` if ``ok(value)`` is true (and does not raise), else ``ParameterError`` naming ``name``."""
    try:
        good = bool(ok(value))
    except Exception:  # noqa: BLE001 - a predicate that cannot even look at the value says "no"
        good = False
    if not good:
        raise ParameterError(_refused(name, accepts, value))
    return value


def _refused(name: str, accepts: str, value) -> str:
    return _("{name} accepts {accepts}; got {value}").format(name=name, accepts=accepts, value=repr(value))


def _is_whole(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)


def whole_number(name: str, value, low: int = 1, high: int | None = None) -> int:
    accepts = (_("a whole number from {low} to {high}") if high is not None
               else _("a whole number of at least {low}")).format(low=low, high=high)
    check_param(name, value, accepts,
                lambda v: _is_whole(v) and v >= low and (high is None or v <= high))
    return int(value)


def number(name: str, value, above: float | None = 0.0, at_least: float | None = None, high: float | None = None,
           unit: str = "") -> float:
    if at_least is not None:
        accepts = (_("a number of at least {low:g}{unit} and at most {high:g}{unit}") if high is not None
                   else _("a number of at least {low:g}{unit}")).format(low=at_least, high=high, unit=unit)
    elif above is not None:
        accepts = (_("a number above {low:g}{unit} and at most {high:g}{unit}") if high is not None
                   else _("a number above {low:g}{unit}")).format(low=above, high=high, unit=unit)
    else:
        accepts = (_("a number of at most {high:g}{unit}") if high is not None else _("a number")).format(
            high=high, unit=unit)
    check_param(name, value, accepts,
                lambda v: _is_number(v) and (at_least is None or v >= at_least)
                and (at_least is not None or above is None or v > above) and (high is None or v <= high))
    return float(value)


def _several(name: str, value, one, accepts: str) -> tuple:
    items = (value,) if not isinstance(value, (list, tuple, set, frozenset, range, pd.Index)) else tuple(value)
    if isinstance(value, (set, frozenset)):
        items = tuple(sorted(items))
    check_param(name, items, accepts, lambda xs: len(xs) > 0)
    out = []
    for item in items:
        try:
            out.append(one(item))
        except ParameterError:
            raise ParameterError(_refused(name, accepts, value)) from None
    return tuple(dict.fromkeys(out))  # each value once, in the reader's order


def whole_numbers(name: str, value, low: int = 1, high: int | None = None) -> tuple[int, ...]:
    """One whole number or several (a tuple, a list, a range); each once, in order."""
    accepts = (_("a whole number from {low} to {high}, or a tuple of them") if high is not None
               else _("a whole number of at least {low}, or a tuple of them")).format(low=low, high=high)
    return _several(name, value, lambda v: whole_number(name, v, low, high), accepts)


def numbers(name: str, value, above: float = 0.0, at_least: float | None = None, unit: str = "") -> tuple[float, ...]:
    accepts = (_("a number of at least {low:g}{unit}, or a tuple of them") if at_least is not None
               else _("a number above {low:g}{unit}, or a tuple of them")).format(
        low=at_least if at_least is not None else above, unit=unit)
    return _several(name, value, lambda v: number(name, v, above=above, at_least=at_least), accepts)


def one_of(name: str, value, choices) -> str:
    choices = list(choices)
    check_param(name, value, _("one of {choices}").format(choices=", ".join(repr(c) for c in choices)),
                lambda v: v in choices)
    return value


def text(name: str, value, empty: bool = False) -> str:
    check_param(name, value, _("a string") if empty else _("a non-empty string"),
                lambda v: isinstance(v, str) and (empty or v.strip()))
    return value


# -- a notebook's parameters, declared once and checked at the top -----------------------------------------
class Spec:
    """What one parameter accepts. ``check`` returns the value as the experiments use it, or raises
    ``ParameterError``; ``inside`` gives values it must accept (its bounds and one between), ``outside`` values
    it must refuse (just past each bound, a wrong type): tests/test_parameters.py tries them all."""

    def check(self, name: str, value):
        raise NotImplementedError

    def inside(self) -> list:
        raise NotImplementedError

    def outside(self) -> list:
        raise NotImplementedError


@dataclass(frozen=True)
class Whole(Spec):
    """A whole number from ``low`` to ``high``; with ``several``, also a tuple of them."""
    low: int
    high: int
    several: bool = False

    def check(self, name, value):
        if self.several:
            return whole_numbers(name, value, self.low, self.high)
        return whole_number(name, value, self.low, self.high)

    def inside(self):
        values = [self.low, self.high, (self.low + self.high) // 2]
        return values + ([(self.low, self.high)] if self.several else [])

    def outside(self):
        values = [self.low - 1, self.high + 1, str(self.low), self.low + 0.5, True]
        return values + ([(), (self.low, self.high + 1)] if self.several else [])


@dataclass(frozen=True)
class Number(Spec):
    """A number above ``low`` (or from it, with ``closed``) up to ``high``; with ``several``, a tuple of them."""
    low: float
    high: float
    closed: bool = False
    unit: str = ""
    several: bool = False

    def check(self, name, value):
        def one(v):
            return number(name, v, above=None if self.closed else self.low,
                          at_least=self.low if self.closed else None, high=self.high, unit=self.unit)
        if not self.several:
            return one(value)
        accepts = (_("a number from {low:g}{unit} to {high:g}{unit}, or a tuple of them") if self.closed
                   else _("a number above {low:g}{unit} to {high:g}{unit}, or a tuple of them"))
        return _several(name, value, one, accepts.format(low=self.low, high=self.high, unit=self.unit))

    def _lowest(self) -> float:
        return self.low if self.closed else self.low + (self.high - self.low) / 1000

    def inside(self):
        values = [self._lowest(), self.high, (self.low + self.high) / 2]
        return values + ([(self._lowest(), self.high)] if self.several else [])

    def outside(self):
        below = self.low - max(abs(self.low), 1) / 1000 if self.closed else self.low
        values = [below, self.high * 2 if self.high > 0 else self.high + 1, str(self.high), float("nan"), True]
        return values + ([()] if self.several else [])


@dataclass(frozen=True)
class OneOf(Spec):
    """One of ``choices``."""
    choices: tuple

    def check(self, name, value):
        return one_of(name, value, self.choices)

    def inside(self):
        return list(self.choices)

    def outside(self):
        return ["not-one-of-them", 1, None]


@dataclass(frozen=True)
class Words(Spec):
    """A string; empty only with ``empty``."""
    empty: bool = False

    def check(self, name, value):
        return text(name, value, self.empty)

    def inside(self):
        return (["", "x"] if self.empty else ["x"]) + ["a longer text, with punctuation: ünïcode too."]

    def outside(self):
        return ([] if self.empty else ["", "   "]) + [3, None]


def check(spec: dict[str, Spec], **values) -> dict:
    """Check every parameter of a notebook against its module's ``PARAMETERS`` before anything runs: the
    first value it does not accept raises ``ParameterError`` (one line). Returns the values as checked."""
    unknown = [k for k in values if k not in spec]
    missing = [k for k in spec if k not in values]
    if unknown or missing:
        raise ParameterError(_("the parameters cell and its checks disagree: {what}").format(what="; ".join(filter(
            None, [unknown and _("not declared: {names}").format(names=", ".join(unknown)),
                   missing and _("not given: {names}").format(names=", ".join(missing))]))))
    try:
        checked = {name: spec[name].check(name, value) for name, value in values.items()}
    except ParameterError as e:
        _hold(str(e), list(spec))
        raise
    _hold(None, [])
    return checked


# -- until the parameters pass, the notebook's other cells say the same line ----------------------------
# Run All sends every cell to the kernel at once, and the kernel drops the ones still queued when a cell
# fails. On a busy machine some arrive after that: without a hold they would run on the value the check just
# refused (iterate the string 'a lot' as budgets) and fail inside library code. Held, every such cell (and any
# cell run by hand before the parameters are fixed) shows the check's one line instead. A cell that sets a
# parameter or calls ``check`` is never held, so the reader can always fix the value and re-run the setup.
_HELD: dict = {"message": None, "names": []}


def _holding(lines: list[str]) -> list[str]:
    message, source = _HELD["message"], "".join(lines)
    if message is None or "params.check(" in source or any(
            re.search(rf"^\s*{re.escape(n)}\s*=(?!=)", source, re.M) for n in _HELD["names"]):
        return lines
    return [f"from harness_lib.chapter.params import ParameterError as _E; raise _E({message!r})\n"]


def held() -> str | None:
    """The failed check's one line while it holds the notebook's cells, or None (a slider's re-run says it too)."""
    return _HELD["message"]


def _hold(message: str | None, names: list[str]) -> None:
    _HELD.update(message=message, names=names)
    try:
        from IPython import get_ipython
    except ImportError:  # outside IPython there is no queue of cells to hold
        return
    shell = get_ipython()
    if shell is not None and _holding not in shell.input_transformers_post:
        shell.input_transformers_post.append(_holding)


# -- showing things -------------------------------------------------------------------------------------
class Table:
    """A DataFrame as a notebook shows it, with text columns aligned left (JupyterLab right-aligns every
    cell), text wrapped rather than escaped (``\\n`` becomes a line break), and the same text form
    pandas prints. Its HTML is deterministic, so nbval can compare it."""

    def __init__(self, df: pd.DataFrame, precision: int = 6):
        self.df, self.precision = df, precision

    def __repr__(self):
        if language.spoken() == "en":
            return repr(self.df)
        from pandas.io.formats.format import get_dataframe_repr_params  # pandas' own repr, the language's decimal sign

        return language.labelled(self.df).to_string(decimal=language.decimal_sign(), **get_dataframe_repr_params())

    def _repr_html_(self):
        df = language.labelled(self.df)   # its labels in the language spoken; the data keeps the English
        left = [df[c].dtype == object or pd.api.types.is_string_dtype(df[c]) for c in df.columns]
        index_names = [n or "" for n in df.index.names]
        head = []
        levels = df.columns.nlevels
        for level in range(levels):
            labels = [c[level] if levels > 1 else c for c in df.columns]
            cells, k = [], 0
            while k < len(labels):  # a label repeated over adjacent columns spans them
                span = 1
                while levels > 1 and level < levels - 1 and k + span < len(labels) and labels[k + span] == labels[k]:
                    span += 1
                align = "left" if left[k] else "right"
                cells.append(f'<th style="text-align: {align}"' + (f' colspan="{span}"' if span > 1 else "") +
                             f">{html.escape(str(labels[k]))}</th>")
                k += span
            blank = "".join("<th></th>" for _ in index_names)
            head.append(f"<tr>{blank}{''.join(cells)}</tr>")
        if any(index_names):
            head.append("<tr>" + "".join(f'<th style="text-align: left">{html.escape(n)}</th>' for n in index_names) +
                        "".join("<th></th>" for _ in df.columns) + "</tr>")
        body = []
        for key, row in zip(df.index, df.itertuples(index=False)):
            keys = key if isinstance(key, tuple) else (key,)
            th = "".join(f'<th style="text-align: left">{html.escape(str(k))}</th>' for k in keys)
            tds = "".join(f'<td style="text-align: left; white-space: pre-wrap">{self._cell(v)}</td>' if is_left
                          else f"<td>{self._cell(v)}</td>" for v, is_left in zip(row, left))
            body.append(f"<tr>{th}{tds}</tr>")
        return ('<table class="dataframe">\n<thead>\n' + "\n".join(head) + "\n</thead>\n<tbody>\n" +
                "\n".join(body) + "\n</tbody>\n</table>")

    def _cell(self, v) -> str:
        if v is None or (not isinstance(v, (list, tuple, dict, str)) and pd.isna(v)):
            return ""
        if isinstance(v, float):
            return language.number(v, self.precision, grouped=False)
        return html.escape(str(v))


def table(df: pd.DataFrame, precision: int = 6) -> Table:
    return Table(df, precision)


class Text:
    """Monospaced text that scrolls sideways instead of wrapping mid-number (a trace's JSON lines)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        return ('<pre style="white-space: pre; overflow-x: auto; font-size: 12px; line-height: 1.35">'
                f"{html.escape(self.text, quote=False)}</pre>")


def markdown_table(df: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (left-aligned; Markdown inside the cells renders)."""
    columns = [df.index.name or "", *df.columns]
    rows = [[str(i), *(str(v) for v in row)] for i, row in zip(df.index, df.itertuples(index=False))]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(":--" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)
