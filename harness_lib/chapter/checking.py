"""Checking a reader's piece: every case of its section, run beside ``harness_lib``, with a hint for the first
case that fails.

A section's check (``harness_lib/chapter/checks/sNN_*.py``) is a ``Check``: the cases the section is about
(``Case``: a name, the point of the chapter it pins, what it runs), how to run the reader's piece on one
(``yours``), what the library says for it (``expected``), the fields to compare (``Field``) and the mistakes it
knows (``Hint``: when a difference looks like one, the hint says what to change). ``await check(piece)`` in a
notebook's cell tagged ``check`` returns a ``Report``: a table (case, expected, yours, pass), the line ``N of M
cases pass`` and, for the first case that fails, what differs and why it matters, in one line more.

The reader's piece is not to be trusted, and the check says so in one line, never a traceback, and is never wrong
about it (docs/checks.md):

* each case runs in a process of its own, forked from the kernel (``sandbox``): whatever the piece changes (its
  arguments, a module's constants, the working folder, the streams, a provider) ends with the process; a piece
  that hangs, blocks in a system call or catches every exception is ended with its process at the deadline, and
  the threads and processes it leaves are named and ended; the check stops at the first case that hangs;
* what the piece returns comes back as plain data (``plain``), read for what it holds: an object that lies about
  equality or membership, or a value that is not data, is one line and never a pass;
* a stub (``raise NotImplementedError`` in the reader's cell): "not written yet: write `capped_loop` ...";
* a piece that raises: the exception in one line (even one whose message cannot be made), with the case and the
  line of the cell it came from; output is bounded, whatever the piece prints or returns;
* a piece that deletes files acts on a fresh copy of the workspace per case; the project's ``data/`` is checked
  before a check and watched during it (``project``), the notebook's folder too;
* a restart is a new process: a case whose run stops and goes on elsewhere (07's verdicts across a restart) goes on
  in a new process forked from the kernel, with only what it saved.

The toolbar's Stop ends a check as it ends an experiment: ``Stopped``, one line, the case's process ended. The
library's answers are computed once per kernel, against the checks' own provider, and kept (the scripted model is a
pure function); one that failed is never kept.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import html
import os
import threading
import time
import types
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import pandas as pd

from . import project, sandbox
from .cells import NOT_WRITTEN, one_line_stubs  # noqa: F401 - the checks' one line for a stub
from .language import C_, N_, NP_, Text, _, in_context, ngettext, number
from .language import dollars as _dollars
from .plain import cut, one_line, plain, type_name
from .sandbox import Shape, ending  # noqa: F401 - the checks raise the one, a case asks the other
from .stop_button import check as stop_pressed
from .stop_button import whole

DEADLINE_S = 4.0   # a case's own time: the scripted provider answers in milliseconds; a case takes a few dozen, and
                   # a machine busy with three test workers and two kernels can make that a second or two
RESTART = "restart"   # the key of what ``yours`` returns to go on in a new process (``Check._case``)
RESTARTS = 8          # processes a case may run in, at most
CELL_LIMIT = 160   # characters of one value in a check's table
LIST_LIMIT = 8     # items of a list shown, then how many more
LINE_LIMIT = 600   # characters of one line of a check's verdict


# -- what a check is made of -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One situation of the section: ``name`` in the table, ``point`` the chapter's point it pins (said when it
    fails and no hint knows better), ``args`` what the section's runner needs (a script, a cap, verdicts...)."""
    name: str
    point: str
    args: dict = field(default_factory=dict)
    deadline: float = DEADLINE_S


def same(a, b) -> bool:
    """Equal as data, types included: a bool is never a count (``True == 1``), nor a float (``1.0 == 1``) a number of
    turns; lists, tuples and dicts compared item by item the same way."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    return a == b


@dataclass(frozen=True)
class Field:
    """One thing compared: ``key`` in the results, ``show`` how it reads in the table, ``same`` how two compare.
    Both sides are plain data (``plain.plain``) by then: what the reader's piece returned never reaches them as it
    was, and a ``show`` or ``same`` that cannot read a value says so instead of raising."""
    key: str
    show: Callable[[Any], str] = str
    same: Callable[[Any, Any], bool] = same

    label: str | None = None   # how the difference line names it (default: the key)
    describe: Callable[[Any, Any], str] | None = None   # the difference in words, when "expected x, yours y" is not
    follows: bool = False      # follows from the other fields (a transcript): said only when nothing else differs

    def differ(self, expected: dict, yours: dict) -> bool:
        try:
            return not self.same(expected.get(self.key), yours.get(self.key))
        except Exception:  # noqa: BLE001 - two values that cannot be compared are not the same
            return True

    def shown(self, value) -> str:
        try:
            text = self.show(value)
        except Exception:  # noqa: BLE001 - a value the field cannot read is shown as it is
            text = _plain(value)
        return cut(str(text), CELL_LIMIT)

    def tell(self, expected: dict, yours: dict) -> str:
        e, y = expected.get(self.key), yours.get(self.key)
        if self.describe is not None:
            try:
                return cut(str(self.describe(e, y)), LINE_LIMIT)
            except Exception:  # noqa: BLE001 - the difference in words could not be made: said plainly
                pass
        named = in_context("field", self.label or self.key)
        return _("{field}: expected {expected}, yours {yours}").format(
            field=named, expected=cut(_plain(e), CELL_LIMIT), yours=cut(_plain(y), CELL_LIMIT))


def _plain(value) -> str:
    try:
        return _plainly(value)
    except Exception:  # noqa: BLE001 - a value too large to write out (an int of 5,000 digits): its kind
        return f"<{type_name(value)}>"


def _plainly(value) -> str:
    if value is None:   # in a sentence, a word: English keeps Python's, as the code says it
        return in_context("value", C_("value", "None"))
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return number(value)
    if isinstance(value, float):
        return number(value, 6, grouped=False)
    if isinstance(value, (list, tuple)) and len(value) > LIST_LIMIT:   # the first few, and how many more
        return cut(_plain(list(value[:LIST_LIMIT]))[:-1] + ", " + _("… {n} more").format(n=len(value) - LIST_LIMIT)
                   + "]", CELL_LIMIT)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return cut("[" + ", ".join(value) + "]", CELL_LIMIT)
    return cut(repr(value), CELL_LIMIT) if not isinstance(value, str) else cut(value, CELL_LIMIT)


@dataclass(frozen=True)
class Hint:
    """A mistake the check knows: ``when(case, expected, yours)`` says whether a failing case looks like it
    (the fields of both sides), ``says`` what to change and why."""
    says: str
    when: Callable[[Case, dict, dict], bool]


# -- the reader's piece, run on one case ---------------------------------------------------------------------
@dataclass
class Ran:
    """What one case of the reader's piece came to: ``fields`` (it returned), or ``raised`` (one line),
    ``hung`` (it was stopped), ``stub`` (the name of the piece not written yet); ``left``: what it left running,
    ended with the case."""
    fields: dict | None = None
    raised: str | None = None
    hung: str | None = None
    stub: str | None = None
    left: list[tuple] = field(default_factory=list)
    wrote: list[str] = field(default_factory=list)
    shape: Any = None   # a check's own message of what the piece returned (a Text), when that is why it failed


# TRANSLATORS: {kind}: a type's name (`Liar`, `ndarray`); {where}: where it was, as Python reads it (['turns'])
NOT_PLAIN = N_("returned a `{kind}` at {where}, not plain data: return built-in values (numbers, strings, lists, "
               "dicts), which the check compares as they are")
TOO_MUCH = {  # TRANSLATORS: {where}: where, as Python reads it (['messages']); {limit}: a number (200,000)
    "values": N_("returned more than {limit:,} values at {where}: a piece of this section returns a few fields"),
    "characters": N_("returned more than {limit:,} characters at {where}: a piece of this section returns a few "
                     "fields"),
    "depth": N_("returned values nested more than {limit} deep at {where} (does a list or a dict hold itself?)"),
}
DIED = {  # how the process of a case ended before it answered
    "exit": N_("ended its process (exit code {how}) before it answered: a piece returns its result, it never ends "
               "the process"),
    "signal": N_("ended its process ({how}) before it answered: a piece returns its result, it never ends the "
                 "process"),
    "silent": N_("closed what it answers through before it answered"),
    "unanswered": N_("could not send its answer to the check (the pipe's descriptor closed, or the answer could not be "
                     "written)"),
    "garbled": N_("sent the check an answer it cannot read: something wrote to the check's own pipe"),
}


def outcome_line(outcome: sandbox.Outcome, deadline: float) -> str | None:
    """What a case that did not return comes to, in one line (None: it returned)."""
    if outcome.kind == "hung":
        return _("still running after {seconds:g} s: stopped").format(seconds=deadline)
    if outcome.kind == "died":
        how = outcome.died or ("silent",)
        return _(DIED[how[0]]).format(how=how[1] if len(how) > 1 else "")
    if outcome.kind != "raised":
        return None
    error = outcome.error or {}
    if error.get("not_plain"):
        kind, where, why, limit = error["not_plain"]
        where = where or _("the top")
        return _(TOO_MUCH[why]).format(where=where, limit=limit) if why else _(NOT_PLAIN).format(kind=kind,
                                                                                             where=where)
    if error.get("shape") is not None:
        return cut(_(error["shape"]), LINE_LIMIT)
    frames = error.get("frames") or []
    if frames:
        return _("raised {error} (line {line} of `{name}`)").format(error=error.get("line"), line=frames[-1][0],
                                                                   name=frames[-1][1])
    return _("raised {error}").format(error=error.get("line"))


def left_words(item: tuple) -> str:
    """A thread or a process a piece left running, in a few words."""
    if item[0] == "process":
        # TRANSLATORS: a process a piece left running: its command line, `sleep 300`
        return _("process `{command}`").format(command=item[1])
    _kind, name, running, place = item
    if running:
        # TRANSLATORS: a thread a piece left running: its name, and the function it was started to run
        return _("thread '{name}' running {target}").format(name=name, target=running)
    if place:
        # TRANSLATORS: a thread a piece left running: its name, and the function and line it is in now
        return _("thread '{name}' in {place}").format(name=name, place=place)
    return _("thread '{name}'").format(name=name)


# -- the report --------------------------------------------------------------------------------------------
WIDTH = 120        # columns of the report's text form
SHOWN_FIELDS = 4   # differing fields shown per case; the rest counted


@dataclass
class Row:
    case: Case
    expected: dict
    ran: Ran
    differs: list[str]

    @property
    def passed(self) -> bool:
        return self.ran.fields is not None and not self.differs

    def summary(self, fields: tuple[Field, ...]) -> str:
        """What the case expects, in the fields it has (its expected answer's)."""
        return ", ".join(f.shown(self.expected.get(f.key)) for f in fields if f.key in self.expected)

    def sides(self, fields: tuple[Field, ...]) -> tuple[str, str]:
        """(expected, yours) for the table: a passing case's summary; for a failing one only the fields that differ,
        each as the field shows it (or its value, where the field shows both alike)."""
        if self.passed:
            return self.summary(fields), _("the same")
        if self.ran.fields is None:
            return self.summary(fields), self.ran.raised or self.ran.hung or ""
        by_key = {f.key: f for f in fields}
        shown = self.differs[:SHOWN_FIELDS]
        pairs = []
        for key in shown:
            f, e, y = by_key[key], self.expected.get(key), self.ran.fields.get(key)
            e_shown, y_shown = f.shown(e), f.shown(y)
            if e_shown == y_shown:
                e_shown, y_shown = cut(_plain(e), CELL_LIMIT), cut(_plain(y), CELL_LIMIT)
            named = in_context("field", f.label or f.key)
            pairs.append((f"{named}: {e_shown}", f"{named}: {y_shown}"))
        more = len(self.differs) - len(shown)
        tail = [ngettext("… and {n} more field", "… and {n} more fields", more).format(n=more)] if more > 0 else []
        return "; ".join([e for e, _y in pairs] + tail), "; ".join([y for _e, y in pairs] + tail)

    def lines(self, fields: tuple[Field, ...]) -> list[str]:
        """The case in the report's text form: one line when it passes, then one line per difference."""
        name = _(self.case.name)
        if self.passed:
            return [_clip(f"✓ {name}: {self.summary(fields)}")]
        out = [f"✗ {name}"]
        if self.ran.fields is None:
            return out + _wrapped(self.ran.raised or self.ran.hung or "", "    ")
        by_key = {f.key: f for f in fields}
        for key in self.differs[:SHOWN_FIELDS]:
            out += _wrapped(cut(by_key[key].tell(self.expected, self.ran.fields), LINE_LIMIT), "    ")
        if len(self.differs) > SHOWN_FIELDS:
            more = len(self.differs) - SHOWN_FIELDS
            out.append("    " + ngettext("… and {n} more field", "… and {n} more fields", more).format(n=more))
        return out


def _clip(line: str) -> str:
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def _wrapped(text: str, indent: str = "") -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent]


def _code_in_html(text: str) -> str:
    """``text`` as HTML: escaped, and what stands between backticks set as code."""
    parts = html.escape(text, quote=False).split("`")
    if len(parts) % 2 == 0:   # an odd number of backticks: no code spans, say it as it is
        return html.escape(text, quote=False)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


@dataclass
class Report:
    """What ``await check(...)`` shows: every case (a failing one with only the fields that differ), ``N of M cases
    pass``, the first failure explained with the hint the pattern of failures points to, and what the pieces left
    behind (threads or processes ended, output not shown, files written where they should not be). A stub, a piece
    that is not a function, or a kernel the check cannot trust is one line and no table. The text form keeps to
    ``WIDTH`` columns; the HTML form is a table, with the code in its lines set as code."""
    piece: str
    rows: list[Row] = field(default_factory=list)
    total: int = 0
    fields: tuple[Field, ...] = ()
    line: str | None = None       # one line instead of a table (not written yet, not a function)
    hint: str | None = None       # the first failure, explained
    not_run: list[str] = field(default_factory=list)   # the cases after one that hung
    after: list[str] = field(default_factory=list)     # what the pieces left behind, a line each
    chosen: str | None = None     # which explanation the hint is ("mistake 3", "field tool_runs", ...), to compare

    @property
    def passed(self) -> int:
        return sum(row.passed for row in self.rows)

    @property
    def ok(self) -> bool:
        return self.line is None and self.passed == self.total

    @property
    def tally(self) -> str:
        return _("{passed} of {total} cases pass").format(passed=self.passed, total=self.total)

    def frame(self) -> pd.DataFrame:
        columns = [_("case"), _("expected"), _("yours"), _("pass")]
        rows = []
        for row in self.rows:
            expected, yours = row.sides(self.fields)
            rows.append(dict(zip(columns, (_(row.case.name), cut(expected, LINE_LIMIT), cut(yours, LINE_LIMIT),
                                           "✓" if row.passed else "✗"))))
        rows += [dict(zip(columns, (_(case), "", _("not run"), ""))) for case in self.not_run]
        return pd.DataFrame(rows, columns=columns).set_index(columns[0])

    def lines(self) -> list[str]:
        if self.line is not None:
            return [self.line]
        return [self.tally] + ([cut(self.hint, LINE_LIMIT * 2)] if self.hint else []) + self.after

    def __repr__(self) -> str:
        if self.line is not None:
            return self.line
        cases = [line for row in self.rows for line in row.lines(self.fields)]
        cases += [_clip(f"· {_(case)} ({_('not run')})") for case in self.not_run]
        return "\n".join(cases + [w for line in self.lines() for w in _wrapped(line)])

    def _repr_html_(self) -> str | None:
        if self.line is not None:
            return None  # one line: the text form is the whole answer
        from .params import table

        text = "".join(f"<p>{_code_in_html(line)}</p>" for line in self.lines())
        return table(self.frame())._repr_html_() + "\n" + text


class Untrusted(Exception):
    """The check cannot give a verdict in this kernel (the library's own answer failed, the project's data is not
    as shipped): one line saying why and how to set it right."""


# -- a section's check -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """A section's check: its pieces' names (as the notebook's cell defines them), its cases, how to run the
    reader's pieces on a case (``yours(pieces, case, url) -> dict``), what the library says for it
    (``expected(case, url) -> dict``), the fields compared, and the mistakes it knows.

    Each case of the reader's pieces runs in a process of its own (``sandbox``), under the case's deadline; what
    it returns reaches the comparison as plain data. The library's side runs here, once per kernel, against the
    checks' own scripted provider (``provider_url``), which no cell of the notebook is given."""
    section: str
    pieces: tuple[str, ...]
    cases: tuple[Case, ...]
    fields: tuple[Field, ...]
    yours: Callable[[dict, Case, str], Awaitable[dict]]
    expected: Callable[[Case, str], Awaitable[dict]]
    hints: tuple[Hint, ...] = ()

    async def run(self, url: str | None = None, **pieces) -> Report:
        """Every case, in order; the report. ``url``: a running scripted provider (default: the checks' own)."""
        first = self.pieces[0]
        for name in self.pieces:
            if not callable(pieces.get(name)):
                return Report(first, line=_("`{name}` is not a function yet: run the cell above that defines it "
                                            "(it is {kind})").format(name=name, kind=type_name(pieces.get(name))))
        try:
            problem = project.damaged()
            if problem:
                raise Untrusted(problem)
            return await whole(self._run(url or provider_url(), pieces))
        except Untrusted as why:
            return Report(first, line=str(why))
        finally:
            sandbox.reap()

    async def _run(self, url: str, pieces: dict) -> Report:
        warm()
        files, stubs = frozenset(_code_files(pieces)), _stubs(pieces)
        report = Report(self.pieces[0], total=len(self.cases), fields=self.fields)
        printed, watch = sandbox.Printed(), project.Watch()
        for n, case in enumerate(self.cases):   # the library's answer made here while the piece's case runs apart
            library = asyncio.ensure_future(_library(self, case, url))
            library.add_done_callback(_retrieved)
            try:
                outcome = await self._case(pieces, case, url, files, printed)
                expected = await library
            finally:
                library.cancel()   # Stop, or the case's own failure: nothing is left computing
            ran = self._ran(outcome, case, stubs)
            if ran.stub is not None:
                return Report(self.pieces[0], line=_(NOT_WRITTEN).format(name=ran.stub))
            differs = [f.key for f in self.fields if f.differ(expected, ran.fields)] if ran.fields is not None else []
            report.rows.append(Row(case, expected, ran, differs))
            changed = watch.changed(_(case.name))
            if changed:   # the library's answers after this would be computed on data the piece changed
                raise Untrusted(changed)
            if ran.hung is not None or (UNTIL_FIRST_FAILURE.get() and not report.rows[-1].passed):
                report.not_run = [c.name for c in self.cases[n + 1:]]
                break
        report.hint = self._explain(report)
        report.after = after_lines([item for row in report.rows for item in row.ran.left],
                                   [name for row in report.rows for name in row.ran.wrote], printed, watch)
        return report

    async def _case(self, pieces: dict, case: Case, url: str, files: frozenset, printed) -> sandbox.Outcome:
        """One case of the reader's pieces, in a process of its own; a case whose run restarts (``yours`` returned
        ``{RESTART: carry}``, plain data) goes on in a new process, forked from the kernel as it is, with ``carry``:
        what a restart keeps is what is on disk, never a variable of the process that stopped."""
        carry, left, started = None, [], time.monotonic()
        with sandbox.scratch() as folder:
            for _ in range(RESTARTS):
                step = functools.partial(self.yours, pieces, case, url, **({} if carry is None else {"carry": carry}))
                remaining = max(case.deadline - (time.monotonic() - started), 0.05)
                outcome = await sandbox.run(step, remaining, files, printed, folder)
                left += outcome.left
                if not (outcome.kind == "ok" and isinstance(outcome.value, dict) and RESTART in outcome.value):
                    break
                carry = outcome.value[RESTART]
        outcome.left = list(dict.fromkeys(left))
        return outcome

    def _ran(self, outcome: sandbox.Outcome, case: Case, stubs: set[str] = frozenset()) -> Ran:
        if outcome.kind == "ok":
            if isinstance(outcome.value, dict):
                return Ran(fields=outcome.value, left=outcome.left, wrote=outcome.wrote)
            return Ran(raised=_("raised {error}").format(error=type_name(outcome.value)), left=outcome.left)
        error = outcome.error or {}
        if outcome.kind == "raised" and error.get("stub") and error.get("frames") and error["frames"][-1][1] in stubs:
            return Ran(stub=error["frames"][-1][1])   # a bare NotImplementedError, raised in a piece itself
        line = outcome_line(outcome, case.deadline)
        if outcome.kind == "hung":
            return Ran(hung=line, left=outcome.left)
        return Ran(raised=line, left=outcome.left, wrote=outcome.wrote, shape=error.get("shape"))

    def _explain(self, report: Report) -> str | None:
        """The first case that fails, what differs in it, and the hint the failures point to: the first mistake the
        check knows (they are in order, the most particular first) that explains the first failing case (a hint
        explains a case only if it reads a field that differs there: one that reads none says nothing about it); else
        what the field that differs there means; else the mistake that explains the most of the other failing cases,
        named; else the point the case pins. Then, when several fail, which fields differ across them, and how
        often."""
        failing = [row for row in report.rows if not row.passed]
        if not failing:
            return None
        first, shown = failing[0], {f.key: f for f in self.fields}
        if first.ran.fields is None:
            what = first.ran.hung or first.ran.raised
        else:  # at most two fields, the transcript only when nothing else differs: it follows from the rest
            keys = [k for k in first.differs if not shown[k].follows] or first.differs
            what = "; ".join(cut(shown[key].tell(first.expected, first.ran.fields), LINE_LIMIT) for key in keys[:2])
        said = _("first case that fails: {case} ({what}).").format(case=_(first.case.name), what=what)
        matched = [[row for row in failing if _explains(h, row)] for h in self.hints]
        own = next((h for h, rows in zip(self.hints, matched) if first in rows), None)
        generic = _field_hint(failing, shown, first)
        other = max(((len(rows), -i) for i, rows in enumerate(matched) if rows), default=None)
        missing = first.ran.shape if getattr(first.ran.shape, "template", None) in (MISSING, MISSING_NEAR) else None
        if own is None and missing is not None:   # a key not returned: what it means, else where it is said
            key = missing.values.get("first")
            said += " " + _("Hint: {hint}.").format(
                hint=_(FIELD_HINTS[key]) if key in FIELD_HINTS else _(MISSING_HINT).format(key=key))
            report.chosen = f"missing {key}"
        elif own is not None:
            said += " " + _("Hint: {hint}.").format(hint=_(own.says))
            report.chosen = f"mistake {self.hints.index(own)}"
        elif generic is not None:
            said += " " + _("Hint: {hint}.").format(hint=generic)
            report.chosen = "field"
        elif other is not None:
            hint = self.hints[-other[1]]
            said += " " + _("Hint: {hint}.").format(hint=_(hint.says)) + " " + _("(Said of the case {case}.)").format(
                case=_(matched[-other[1]][0].case.name))
            report.chosen = f"mistake {-other[1]} of another case"
        elif first.ran.fields is not None:
            said += " " + _("The case: {point}.").format(point=_(first.case.point))
            report.chosen = "point"
        if len(failing) > 1:
            said += " " + _pattern(failing, shown)
        return said


class _Reading(dict):
    """A case's fields, noting which a hint reads."""

    def __init__(self, data: dict, read: set):
        super().__init__(data)
        self.read = read

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def _explains(hint: Hint, row: Row) -> bool:
    """Whether ``hint`` explains the failing ``row``: its condition holds, and it read a field that differs there (or
    what the piece raised, or that it hung)."""
    read: set = set()
    yours = row.ran.fields if row.ran.fields is not None else {"hung": row.ran.hung, "raised": row.ran.raised}
    differs = set(row.differs) | {k for k in ("hung", "raised") if getattr(row.ran, k)}
    return _safe(hint.when, row.case, _Reading(row.expected, read), _Reading(yours, read)) and bool(read & differs)


# What a field means, said when it differs and no mistake the check knows explains it
FIELD_HINTS = {
    "status": N_("the status is how the run ended, in the chapter's words: `completed`, `failed`, "
                 "`max_turns_exceeded`, `budget_exceeded` or `interrupted`"),
    "turns": N_("`turns` counts the replies the run paid for: one per call of the model"),
    "tool_runs": N_("`tool_runs` counts the tools that ran, once each has returned: not a call answered from a cache, "
                    "refused, or cut short by Stop"),
    "in": N_("`in` adds up each reply's `usage['prompt_tokens']`, `out` its `usage['completion_tokens']`"),
    "out": N_("`in` adds up each reply's `usage['prompt_tokens']`, `out` its `usage['completion_tokens']`"),
    "cost_usd": N_("`cost_usd` prices the run's tokens at the chapter's prices, $2.00 a million in and $12.00 a "
                   "million out, added up turn by turn"),
    "answer": N_("the answer is the content of the reply that asked for nothing: the model's last words"),
    "messages": N_("the transcript is the `messages` list the loop was given: each reply and each tool result "
                   "appended to it, in order, as `{'role': 'tool', 'tool_call_id': ..., 'name': ..., 'content': ...}`"),
}


def _field_hint(failing: list[Row], shown: dict, first: Row) -> str | None:
    """What the field means that differs in the first failing case, the one that differs in most cases first."""
    counts: dict[str, int] = {}
    for row in failing:
        for key in row.differs:
            counts[key] = counts.get(key, 0) + 1
    for key in sorted(first.differs, key=lambda k: (shown[k].follows, -counts[k])):
        if key in FIELD_HINTS:
            return _(FIELD_HINTS[key])
    return None


def _pattern(failing: list[Row], shown: dict) -> str:
    """Which fields differ across the failing cases, and in how many: the shape of the mistake."""
    counts: dict[str, int] = {}
    for row in failing:
        for key in row.differs or ["raised" if row.ran.raised else "hung"]:
            counts[key] = counts.get(key, 0) + 1
    named = {"raised": _("raised an exception"), "hung": _("still running at the deadline")}
    parts = [f"{named.get(k) or in_context('field', shown[k].label or shown[k].key)} ({n})"
             for k, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4]]
    # TRANSLATORS: "5 cases fail; what differs: tool runs (5), input tokens (2)"
    return _("{n} cases fail; what differs: {fields}.").format(n=len(failing), fields=", ".join(parts))


def after_lines(left: list[tuple], wrote: list[str], printed: sandbox.Printed, watch=None) -> list[str]:
    """What the pieces left behind, a line each: what was ended, what was written where, what was not shown."""
    out = []
    left_ = list(dict.fromkeys(left_words(item) for item in left))
    if left_:
        # TRANSLATORS: after a list of four threads or processes: " and 3 more"
        shown = ", ".join(left_[:4]) + (_(" and {n} more").format(n=len(left_) - 4) if len(left_) > 4 else "")
        out.append(_("Your piece left running: {what}; the check ended it, as a process of yours must end what it "
                     "starts (await it, join it, or stop it before returning).").format(what=cut(shown, LINE_LIMIT)))
    wrote = list(dict.fromkeys(wrote))
    if wrote:
        out.append(_("Your piece wrote {files} in its working folder, not in the folder it was given: a piece "
                     "writes only where it is told (the check's working folder was thrown away).").format(
            files=cut(", ".join(wrote[:5]), LINE_LIMIT)))
    if printed.hidden:
        out.append(ngettext("… and {n:,} more character your piece printed, not shown.",
                            "… and {n:,} more characters your piece printed, not shown.", printed.hidden).format(
            n=printed.hidden))
    return out + (watch.notes() if watch is not None else [])


def _safe(when, *args) -> bool:
    try:
        return bool(when(*args))
    except Exception:  # noqa: BLE001 - a hint that cannot read this difference does not match it
        return False


def _code_files(pieces: dict) -> list[str]:
    """The files of the pieces' code (a function's, a method's, a class's methods'): whose frames are the
    reader's. Read through the types' own attributes: a piece's own ``__getattr__`` is never asked."""
    return [code.co_filename for code in _codes(pieces)]


def _stubs(pieces: dict) -> set[str]:
    """The names of the pieces' functions and methods: where an exercise's stub raises."""
    return {code.co_name for code in _codes(pieces)}


def _codes(pieces: dict) -> list:
    """The code of the pieces' functions and methods, and of the functions defined inside them (a tool's ``run``)."""
    found = []
    for piece in pieces.values():
        if isinstance(piece, types.MethodType):
            piece = piece.__func__
        if isinstance(piece, functools.partial):
            piece = piece.func
        if isinstance(piece, types.FunctionType):
            found.append(piece.__code__)
        elif isinstance(piece, type):
            for value in type.__dict__["__dict__"].__get__(piece).values():
                value = value.fget if isinstance(value, property) else value
                value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                if isinstance(value, types.FunctionType):
                    found.append(value.__code__)
    inner = [c for code in found for c in code.co_consts if isinstance(c, types.CodeType)]
    while inner:
        found += inner
        inner = [c for code in inner for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


# The cases after the first that fails, not run (listed as not run, as after one that hung): for the tests that run
# each written-out mistake through its check (tests/test_checks.py), which look at the first failure and its hint
# only. A reader's check always runs every case.
UNTIL_FIRST_FAILURE: ContextVar[bool] = ContextVar("checking_until_first_failure", default=False)

_LIBRARY: dict[tuple[str, str], dict] = {}


def _environment() -> tuple:
    """What the library's answers are made of besides the case, as this kernel has it: the task and system prompt,
    the scripts, the prices, the quick scan. A cell that changes one gets answers made anew, not those of before."""
    from ..pricing import CHAPTER_PRICES
    from ..scripted.scripts import SCRIPTS
    from ..workspace import SYSTEM_PROMPT, TASK

    return (TASK, SYSTEM_PROMPT, tuple(sorted(QUICK_SCAN.items())), repr(CHAPTER_PRICES),
            tuple((name, id(script)) for name, script in SCRIPTS.items()))


def _retrieved(task: asyncio.Task) -> None:
    """Mark what the library's task ended with as seen: after a Stop or a failing case nobody awaits it, and asyncio
    would log it from the garbage collector ("Task exception was never retrieved") into a later cell, or in the middle
    of the next check's work (where a finalizer running inside ``compile`` is a SystemError on Python 3.11)."""
    if not task.cancelled():
        task.exception()


async def _library(check: Check, case: Case, url: str) -> dict:
    """The library's answer for a case, as plain data, computed once per process and environment: the scripted model
    is a pure function of the transcript, so it does not change between checks (nor with the provider's address).
    One that failed is never kept: the check says so in one line and gives no verdict."""
    key = (check.section, case.name, _environment())
    if key not in _LIBRARY:
        try:
            answer = plain(await check.expected(case, url))
        except Exception as error:  # noqa: BLE001 - the library's own run failed: nothing to compare with
            raise Untrusted(_("the library's own run of the case {case} failed ({error}): something in this kernel "
                              "changed under the check; restart the kernel (Kernel > Restart Kernel), run the cells "
                              "above again, then this one").format(case=_(case.name), error=one_line(error))) from None
        stop_pressed()   # the library ends a run Stop cancelled as interrupted: never the case's answer to keep
        _LIBRARY[key] = answer
    return _LIBRARY[key]


def warm() -> None:
    """Build here, once, what every case would otherwise build in its own process and throw away: the TLS settings
    of the chapter's ``call_model`` (about 45 ms each time) and of the library's client, the tokenizer's counts."""
    from .. import client, tokens
    from .common import tls

    tls()
    client._tls()
    tokens.warm()


_PROVIDER: list = []   # [(the process's id, the checks' own scripted provider)]
_PROVIDER_LOCK = threading.Lock()


def provider_url() -> str:
    """The address of the checks' own scripted provider, started once per process (a child forked for a case
    starts none: it asks the kernel's): no cell of the notebook stops it, slows it or queues faults in it."""
    from ..scripted import ScriptedProvider

    with _PROVIDER_LOCK:
        if not _PROVIDER or _PROVIDER[0][0] != os.getpid() or not _PROVIDER[0][1].serving:
            provider = ScriptedProvider().start()
            provider.name_thread("check: provider")
            _PROVIDER[:] = [(os.getpid(), provider)]
        return _PROVIDER[0][1].base_url


# -- helpers the sections' checks share --------------------------------------------------------------------
def plural(n: int, forms: tuple[str, str]) -> str:
    """``n`` and its noun, in the language spoken: ``forms`` a pair of messages marked ``NP_`` ("{n:,} turn",
    "{n:,} turns"), the language's form chosen by ``n`` (``ngettext``)."""
    return ngettext(*forms, n).format(n=n)


def dollars(x) -> str:
    """An amount of dollars the language's way (``$0.002470``, ``0,002470 $``); anything else as a value."""
    return _dollars(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else _plain(x)


def close(a, b, within: float = 1e-9) -> bool:
    """Two sums of dollars, the same to within ``within``; anything that is not two numbers, ``same``."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        try:
            return abs(a - b) <= within
        except OverflowError:
            return False
    return same(a, b)


def returned(value, keys: tuple[str, ...], piece: str) -> dict:
    """The fields ``keys`` of what the reader's piece returned (a dict, or an object with those attributes), or
    ``Shape`` saying in one line what is missing. A dict is read for what it holds (``dict.items``), never for
    what it answers when asked."""
    if isinstance(value, dict):
        got = dict(dict.items(value))
    elif value is not None and not isinstance(value, (str, bytes, int, float, list, tuple, set, frozenset)):
        got = {}
        for k in keys:
            try:
                got[k] = getattr(value, k)
            except AttributeError:
                pass
    else:
        raise Shape(Text(N_("`{piece}` returned {kind}: return a dict with {keys}"), piece=piece,
                         kind=type_name(value), keys=", ".join(keys)))
    missing = [k for k in keys if k not in got]
    if missing:
        near = [k for k in got if isinstance(k, str) and k not in keys
                and difflib.get_close_matches(k, missing, 1, 0.6)]
        raise Shape(Text(MISSING_NEAR if near else MISSING, piece=piece, keys=", ".join(repr(k) for k in missing),
                         near=", ".join(repr(k) for k in near[:3]), first=missing[0]))
    return {k: got[k] for k in keys}


MISSING = N_("what `{piece}` returned has no {keys}")
# TRANSLATORS: {near}: keys the piece returned that look like the missing ones ('tool_run')
MISSING_NEAR = N_("what `{piece}` returned has no {keys}, but has {near}: a key spelt another way?")
# TRANSLATORS: said when a piece returned a dict without a key the check reads; {key}: that key
MISSING_HINT = N_("the check reads each key its section's cell 'What the check reads' names, spelt as there: `{key}` "
                  "among them")




# -- the fields most sections compare ----------------------------------------------------------------------
def _count(n, forms: tuple[str, str], name: str) -> str:
    """``n`` counted (``plural``), or, when it is not a count, the field's ``name`` and the value as it is."""
    return plural(n, forms) if isinstance(n, int) and not isinstance(n, bool) else f"{in_context('field', name)}={n!r}"


def _tokens(side: str):
    return lambda n: (f"{_(side)} {number(n)}" if isinstance(n, int) and not isinstance(n, bool)
                      else f"{_(side)}={n!r}")


def _brief(message) -> str:
    if not isinstance(message, dict):
        return repr(message)[:60]
    role = message.get("role")
    if role == "tool":
        return _("the result of {id} ({content})").format(id=message.get("tool_call_id"),
                                                          content=repr(str(message.get("content"))[:40]))
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        return _("a reply asking {calls}").format(
            calls=", ".join(f"{c.get('id')} {c.get('function', {}).get('name')}" for c in calls))
    return f"{role}: {str(message.get('content'))[:40]!r}"


def _transcript_difference(expected, yours) -> str:
    if not isinstance(yours, list):
        return _("the transcript is {kind}, not a list of messages").format(kind=type(yours).__name__)
    for i, (e, y) in enumerate(zip(expected, yours)):
        if e != y:
            return _("message {n} of the transcript expected {expected}, yours {yours}").format(
                n=i + 1, expected=_brief(e), yours=_brief(y))
    if len(yours) > len(expected):
        return ngettext("the transcript has {extra} message too many, from {first}",
                        "the transcript has {extra} message(s) too many, from {first}",
                        len(yours) - len(expected)).format(
            extra=len(yours) - len(expected), first=_brief(yours[len(expected)]))
    return _("the transcript lacks {message} (message {n})").format(message=_brief(expected[len(yours)]),
                                                                   n=len(yours) + 1)


STATUS = Field("status", label=N_("status"))
# TRANSLATORS: a count: "1 turn", "3 turns" (Bulgarian "1 ход", "3 хода": the count form, not "ходове")
TURN_COUNT = NP_("{n:,} turn", "{n:,} turns")
TURNS = Field("turns", show=lambda n: _count(n, TURN_COUNT, "turns"), label=C_("field", "turns"))
TOOL_RUNS = Field("tool_runs", show=lambda n: _count(n, NP_("{n:,} tool run", "{n:,} tool runs"), "tool runs"),
                  label=C_("field", "tool runs"))
# TRANSLATORS: "in 3,431": the input tokens of a run, in a check's table
IN = Field("in", show=_tokens(N_("in")), label=N_("input tokens"))
# TRANSLATORS: "out 120": the output tokens of a run, in a check's table
OUT = Field("out", show=_tokens(N_("out")), label=N_("output tokens"))
COST = Field("cost_usd", show=dollars, same=close, label=N_("cost"))
DELETED = Field("deleted", show=lambda d: (_("deleted {files}").format(files=", ".join(map(str, d))) if d
                                           else _("deleted nothing")), label=N_("files deleted"))
ANSWER = Field("answer", show=lambda a: repr(a if not isinstance(a, str) or len(a) <= 40 else a[:37] + "..."),
               label=N_("answer"))
MESSAGE_COUNT = NP_("{n:,} message", "{n:,} messages")
TRANSCRIPT = Field("messages", show=lambda m: (plural(len(m), MESSAGE_COUNT)
                                               if isinstance(m, list) else repr(m)[:40]), label=C_("field", "messages"),
                   describe=_transcript_difference, follows=True)


def start(task: str | None = None) -> list[dict]:
    """A fresh transcript: the chapter's system prompt and task (every case its own list)."""
    from ..workspace import SYSTEM_PROMPT, TASK
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task or TASK}]


QUICK_SCAN = {"seconds": 0.05, "every": 400}   # the slow scan made quick: what it returns is the same


def workspace():
    """A throwaway copy of the chapter's workspace: what a reader's piece deletes is deleted there."""
    from ..workspace import Workspace
    return Workspace.copy_of()


async def answered(state, tools) -> list[dict]:
    """The results of the calls ``state`` still owes, as a loop that runs them after its checks appends them:
    the same tools, run now, on the library's own workspace."""
    import json

    from ..state import pending
    from ..tools import ToolContext

    by_name = {tool.name: tool for tool in tools}
    out = []
    for call in pending(state):
        content = await by_name[call["function"]["name"]].run(json.loads(call["function"]["arguments"]),
                                                               ToolContext(run_id="expected", call_id=call["id"]))
        out.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": content})
    return out
