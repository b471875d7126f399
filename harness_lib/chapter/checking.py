"""Checking a reader's piece: every case of its section, run beside ``harness_lib``, with a hint for the first
case that fails.

A section's check (``harness_lib/chapter/checks/sNN_*.py``) is a ``Check``: the cases the section is about
(``Case``: a name, the point of the chapter it pins, what it runs), how to run the reader's piece on one
(``yours``), what the library says for it (``expected``), the fields to compare (``Field``) and the mistakes it
knows (``Hint``: when a difference looks like one, the hint says what to change). ``await check(piece)`` in a
notebook's cell tagged ``check`` returns a ``Report``: a table (case, expected, yours, pass), the line ``N of M
cases pass`` and, for the first case that fails, what differs and why it matters, in one line more.

The reader's piece is not to be trusted, and the check says so in one line, never a traceback:

* a stub (``raise NotImplementedError`` in the reader's cell): "not written yet: write `capped_loop` ...";
* a piece that raises: the exception in one line, with the case and the line of the cell it came from;
* a piece that hangs: each case runs in a thread of its own with its own event loop, under a deadline; past it
  the case is cancelled, and a piece deaf to cancellation (a ``while True`` that never awaits) is interrupted
  in its thread. Nothing is left running; the check stops at the first case that hangs;
* a piece that deletes files acts on a fresh copy of the workspace per case, never the project's;
* the reader's variables are never touched: each case gets its own messages, state and tools.

The toolbar's Stop ends a check as it ends an experiment: ``Stopped``, one line, the case in progress stopped.
The library's answers are computed once per kernel and kept (the scripted model is a pure function).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import html
import sys
import threading
import time
import traceback
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import pandas as pd

from .language import C_, N_, Text, _, in_context
from .stop_button import check as stop_pressed
from .stop_button import whole

DEADLINE_S = 4.0   # a case's own time: the scripted provider answers in milliseconds; a case takes a few dozen, and
                   # a machine busy with three test workers and two kernels can make that a second or two
GRACE_S = 1.0      # after the deadline, how long a cancelled case may take to end before its thread is interrupted
GIVE_UP_S = 2.0    # ... and how long it is interrupted before the check says it could not be stopped


# -- what a check is made of -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One situation of the section: ``name`` in the table, ``point`` the chapter's point it pins (said when it
    fails and no hint knows better), ``args`` what the section's runner needs (a script, a cap, verdicts...)."""
    name: str
    point: str
    args: dict = field(default_factory=dict)
    deadline: float = DEADLINE_S


@dataclass(frozen=True)
class Field:
    """One thing compared: ``key`` in the results, ``show`` how it reads in the table, ``same`` how two compare."""
    key: str
    show: Callable[[Any], str] = str
    same: Callable[[Any, Any], bool] = lambda a, b: a == b

    label: str | None = None   # how the difference line names it (default: the key)
    describe: Callable[[Any, Any], str] | None = None   # the difference in words, when "expected x, yours y" is not
    follows: bool = False      # follows from the other fields (a transcript): said only when nothing else differs

    def differ(self, expected: dict, yours: dict) -> bool:
        return not self.same(expected.get(self.key), yours.get(self.key))

    def tell(self, expected: dict, yours: dict) -> str:
        e, y = expected.get(self.key), yours.get(self.key)
        if self.describe is not None:
            return self.describe(e, y)
        named = in_context("field", self.label or self.key)
        return _("{field}: expected {expected}, yours {yours}").format(field=named, expected=_plain(e), yours=_plain(y))


def _plain(value) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(value) + "]"
    return repr(value) if not isinstance(value, str) else value


@dataclass(frozen=True)
class Hint:
    """A mistake the check knows: ``when(case, expected, yours)`` says whether a failing case looks like it
    (the fields of both sides), ``says`` what to change and why."""
    says: str
    when: Callable[[Case, dict, dict], bool]


class Shape(Exception):
    """What a piece returned is not what the section's piece returns: one line, said as it is."""


class _OutOfTime(BaseException):
    """Raised inside a piece deaf to cancellation, in its own thread, when its deadline is long past."""


# -- the reader's piece, run on one case ---------------------------------------------------------------------
@dataclass
class Ran:
    """What one case of the reader's piece came to: ``fields`` (it returned), or ``raised`` (one line),
    ``hung`` (it was stopped), ``stub`` (the name of the piece not written yet)."""
    fields: dict | None = None
    raised: str | None = None
    hung: str | None = None
    stub: str | None = None


def _reader_frames(tb, files: set[str]):
    return [f for f in traceback.extract_tb(tb) if f.filename in files]


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


async def _in_thread(factory: Callable[[], Awaitable[dict]], deadline: float) -> tuple[str, Any]:
    """Run ``factory()`` in a thread of its own, on an event loop of its own, for at most ``deadline`` seconds.
    Returns ("ok", value), ("raised", exception) or ("hung", whether it could be stopped). A case past its
    deadline is cancelled; if it does not end within ``GRACE_S``, its thread is interrupted (``_OutOfTime``, which
    no ``except Exception`` catches) until it ends."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    inside: dict = {}

    def finish(outcome):
        if not done.done():
            done.set_result(outcome)

    async def case():
        inside["loop"], inside["task"] = asyncio.get_running_loop(), asyncio.current_task()
        inside["loop"].set_exception_handler(_quiet_about_interruptions)
        _ENDING.set(inside.setdefault("ending", threading.Event()))
        return await factory()

    def work():
        outcome: tuple | None = None
        while True:  # an interruption sent as the case ended may land here: it is taken and the tail run again
            try:
                if outcome is None:
                    try:
                        outcome = ("ok", asyncio.run(case()))
                    except BaseException as error:  # noqa: BLE001 - the reader's piece may raise anything
                        outcome = ("raised", error)
                inside["ended"] = True   # _end sends no interruption after this
                _clear_interruption()
                loop.call_soon_threadsafe(finish, outcome)
                return
            except _OutOfTime:
                outcome = outcome or ("hung", False)
            except RuntimeError:  # the caller's loop has closed: nobody is waiting for the outcome
                return

    thread = threading.Thread(target=work, name="check: one case", daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), deadline)
    except asyncio.TimeoutError:
        return ("hung", await _end(thread, inside))
    except asyncio.CancelledError:  # Stop pressed during the case: the case goes with the check
        await _end(thread, inside)
        raise


async def _end(thread: threading.Thread, inside: dict) -> bool:
    """Cancel the case's task; if it has not ended within ``GRACE_S``, interrupt its thread (waking its loop each
    time) until it ends or ``GIVE_UP_S`` more have passed. True once the thread has ended."""
    case_loop, task = inside.get("loop"), inside.get("task")

    def wake(callback):
        try:
            case_loop.call_soon_threadsafe(callback)
        except (RuntimeError, AttributeError):  # its loop has closed, or never started: nothing to wake
            pass

    inside.setdefault("ending", threading.Event()).set()
    if task is not None:
        wake(lambda: task.cancel("the check's deadline"))
    started = time.monotonic()
    while thread.is_alive() and time.monotonic() - started < GRACE_S + GIVE_UP_S:
        if time.monotonic() - started >= GRACE_S and CPYTHON and not inside.get("ended"):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_OutOfTime))
            wake(lambda: None)  # a thread asleep in its loop's select runs no bytecode to raise in
        await asyncio.sleep(0.02)
    return not thread.is_alive()


CPYTHON = sys.implementation.name == "cpython"
NOT_WRITTEN = N_("not written yet: write `{name}` in its cell above, where it says YOUR CODE HERE")
_ENDING: ContextVar[threading.Event | None] = ContextVar("checking_case_ending", default=None)


def ending() -> bool:
    """Inside a case: whether the check itself is ending it (its deadline, or Stop), so that a cancellation is not
    the piece's doing. (Python 3.10 has no ``Task.cancelling``.)"""
    event = _ENDING.get()
    return event is not None and event.is_set()


def _quiet_about_interruptions(loop, context) -> None:
    """A case's loop says nothing of a task the check itself interrupted (it is reported as a hang); the rest as
    asyncio would."""
    if not isinstance(context.get("exception"), _OutOfTime):
        loop.default_exception_handler(context)


def _clear_interruption() -> None:
    """Drop an interruption sent to this thread and not raised yet (it would land after the case, in threading's
    own code)."""
    if CPYTHON:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)


# -- the report --------------------------------------------------------------------------------------------
@dataclass
class Row:
    case: Case
    expected: dict
    ran: Ran
    differs: list[str]

    @property
    def passed(self) -> bool:
        return self.ran.fields is not None and not self.differs


@dataclass
class Report:
    """What ``await check(...)`` shows: the table, ``N of M cases pass``, the first failure explained. A stub, or
    a piece that is not a function, is one line and no table."""
    piece: str
    rows: list[Row] = field(default_factory=list)
    total: int = 0
    fields: tuple[Field, ...] = ()
    line: str | None = None       # one line instead of a table (not written yet, not a function)
    hint: str | None = None       # the first failure, explained
    not_run: list[str] = field(default_factory=list)   # the cases after one that hung

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
        def summary(values: dict | None, row: Row) -> str:   # the fields the case has (its expected answer's)
            shown = [f for f in self.fields if f.key in row.expected]
            return ", ".join(f.show(values.get(f.key)) for f in shown) if values is not None else ""

        def yours(row: Row) -> str:
            ran = row.ran
            if row.passed:
                return _("the same")
            return summary(ran.fields, row) if ran.fields is not None else (ran.raised or ran.hung or "")

        columns = [_("case"), _("expected"), _("yours"), _("pass")]
        rows = [dict(zip(columns, (_(row.case.name), summary(row.expected, row), yours(row),
                                   "✓" if row.passed else "✗"))) for row in self.rows]
        rows += [dict(zip(columns, (_(case), "", _("not run"), ""))) for case in self.not_run]
        return pd.DataFrame(rows, columns=columns).set_index(columns[0])

    def lines(self) -> list[str]:
        if self.line is not None:
            return [self.line]
        return [self.tally] + ([self.hint] if self.hint else [])

    def __repr__(self) -> str:
        if self.line is not None:
            return self.line
        return self.frame().to_string() + "\n" + "\n".join(self.lines())

    def _repr_html_(self) -> str | None:
        if self.line is not None:
            return None  # one line: the text form is the whole answer
        from .params import table

        text = "".join(f"<p>{html.escape(line)}</p>" for line in self.lines())
        return table(self.frame())._repr_html_() + "\n" + text


# -- a section's check -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """A section's check: its pieces' names (as the notebook's cell defines them), its cases, how to run the
    reader's pieces on a case (``yours(pieces, case, url) -> dict``), what the library says for it
    (``expected(case, url) -> dict``), the fields compared, and the mistakes it knows."""
    section: str
    pieces: tuple[str, ...]
    cases: tuple[Case, ...]
    fields: tuple[Field, ...]
    yours: Callable[[dict, Case, str], Awaitable[dict]]
    expected: Callable[[Case, str], Awaitable[dict]]
    hints: tuple[Hint, ...] = ()

    async def run(self, url: str | None = None, **pieces) -> Report:
        """Every case, in order; the report. ``url``: a running scripted provider (default: the kernel's shared
        one, ``ScriptedProvider.shared()``)."""
        first = self.pieces[0]
        for name in self.pieces:
            if not callable(pieces.get(name)):
                return Report(first, line=_("`{name}` is not a function yet: run the cell above that defines it "
                                            "(it is {kind})").format(name=name, kind=type(pieces.get(name)).__name__))
        if url is None:
            from ..scripted import ScriptedProvider
            url = ScriptedProvider.shared().base_url
        return await whole(self._run(url, pieces))

    async def _run(self, url: str, pieces: dict) -> Report:
        files = {fn.__code__.co_filename for fn in _functions(pieces)}
        report = Report(self.pieces[0], total=len(self.cases), fields=self.fields)
        for n, case in enumerate(self.cases):
            expected = await _library(self, case, url)
            kind, *what = await _in_thread(functools.partial(self.yours, pieces, case, url), case.deadline)
            ran = self._ran(kind, what, files, case)
            if ran.stub is not None:
                return Report(self.pieces[0], line=_(NOT_WRITTEN).format(name=ran.stub))
            differs = [f.key for f in self.fields if f.differ(expected, ran.fields)] if ran.fields is not None else []
            report.rows.append(Row(case, expected, ran, differs))
            if ran.hung is not None or (UNTIL_FIRST_FAILURE.get() and not report.rows[-1].passed):
                report.not_run = [c.name for c in self.cases[n + 1:]]
                break
        report.hint = self._explain(report)
        return report

    def _ran(self, kind: str, what: list, files: set[str], case: Case) -> Ran:
        if kind == "ok":
            return Ran(fields=what[0])
        if kind == "hung":
            if what[0]:
                return Ran(hung=_("still running after {seconds:g} s: stopped").format(seconds=case.deadline))
            return Ran(hung=_("still running after {seconds:g} s, and it could not be stopped (it catches every "
                              "exception sent to it): restart the kernel to end it").format(seconds=case.deadline))
        error = what[0]
        frames = _reader_frames(error.__traceback__, files)
        if isinstance(error, NotImplementedError) and frames:
            return Ran(stub=frames[-1].name)
        if isinstance(error, Shape):
            return Ran(raised=_(error.args[0]) if error.args and isinstance(error.args[0], Text) else str(error))
        if frames:
            return Ran(raised=_("raised {error} (line {line} of `{name}`)").format(
                error=_one_line(error), line=frames[-1].lineno, name=frames[-1].name))
        return Ran(raised=_("raised {error}").format(error=_one_line(error)))

    def _explain(self, report: Report) -> str | None:
        failing = next((row for row in report.rows if not row.passed), None)
        if failing is None:
            return None
        case, ran = failing.case, failing.ran
        if ran.fields is None:
            what = ran.hung or ran.raised
        else:  # at most two fields, the transcript only when nothing else differs: it follows from the rest
            shown = {f.key: f for f in self.fields}
            keys = [k for k in failing.differs if not shown[k].follows] or failing.differs
            what = "; ".join(shown[key].tell(failing.expected, ran.fields) for key in keys[:2])
        yours = ran.fields if ran.fields is not None else {"hung": ran.hung, "raised": ran.raised}
        hint = next((h.says for h in self.hints if _safe(h.when, case, failing.expected, yours)), None)
        if hint is None and ran.fields is not None:
            hint = case.point
        said = _("first case that fails: {case} ({what}).").format(case=_(case.name), what=what)
        return said + (" " + _("Hint: {hint}.").format(hint=_(hint)) if hint else "")


def _safe(when, *args) -> bool:
    try:
        return bool(when(*args))
    except Exception:  # noqa: BLE001 - a hint that cannot read this difference does not match it
        return False


def _functions(pieces: dict) -> list:
    """The plain functions among the pieces, and the methods of a class among them: whose frames are the reader's."""
    found = []
    for piece in pieces.values():
        if hasattr(piece, "__code__"):
            found.append(piece)
        elif isinstance(piece, type):
            found += [v for v in vars(piece).values() if hasattr(v, "__code__")]
            found += [v.fget for v in vars(piece).values() if isinstance(v, property) and v.fget is not None]
    return found


# The cases after the first that fails, not run (listed as not run, as after one that hung): for the tests that run
# each written-out mistake through its check (tests/test_checks.py), which look at the first failure and its hint
# only. A reader's check always runs every case.
UNTIL_FIRST_FAILURE: ContextVar[bool] = ContextVar("checking_until_first_failure", default=False)

_LIBRARY: dict[tuple[str, str], dict] = {}


async def _library(check: Check, case: Case, url: str) -> dict:
    """The library's answer for a case, computed once per process: the scripted model is a pure function of the
    transcript, so it does not change between checks (nor with the provider's address)."""
    key = (check.section, case.name)
    if key not in _LIBRARY:
        answer = await check.expected(case, url)
        stop_pressed()   # the library ends a run Stop cancelled as interrupted: never the case's answer to keep
        _LIBRARY[key] = answer
    return _LIBRARY[key]


# -- helpers the sections' checks share --------------------------------------------------------------------
def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and its noun, in the language spoken: ``one`` and ``many`` are messages (marked ``N_``)."""
    return f"{n:,} {_(one) if n == 1 else in_context('count', many or one + 's')}"


def dollars(x) -> str:
    return f"${x:.6f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else repr(x)


def close(a, b, within: float = 1e-9) -> bool:
    try:
        return abs(a - b) <= within
    except TypeError:
        return a == b


def returned(value, keys: tuple[str, ...], piece: str) -> dict:
    """The fields ``keys`` of what the reader's piece returned (a dict, or an object with those attributes), or
    ``Shape`` saying in one line what is missing."""
    if isinstance(value, dict):
        got = value
    elif value is not None and not isinstance(value, (str, int, float, list, tuple)):
        got = {k: getattr(value, k) for k in keys if hasattr(value, k)}
    else:
        raise Shape(Text(N_("`{piece}` returned {kind}: return a dict with {keys}"), piece=piece,
                         kind=type(value).__name__, keys=", ".join(keys)))
    missing = [k for k in keys if k not in got]
    if missing:
        raise Shape(Text(N_("what `{piece}` returned has no {keys}"), piece=piece,
                         keys=", ".join(repr(k) for k in missing)))
    return {k: got[k] for k in keys}


# -- an unwritten piece, run from any cell, is one line ----------------------------------------------------
def _stub_one_line(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for NotImplementedError: raised in a notebook's own cell (a stub of an exercise), one
    line naming the function to write; raised anywhere else, the usual traceback."""
    frames = [f for f in traceback.extract_tb(tb) if f.filename.startswith(_cell_prefix(shell))]
    if frames and frames[-1].name != "<module>":
        stb = ["NotImplementedError: " + _(NOT_WRITTEN).format(name=frames[-1].name)]
    else:
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    shell._showtraceback(etype, value, stb)
    return stb


def _cell_prefix(shell) -> str:
    """How the kernel names a cell's code (``/tmp/ipykernel_123/`` in ipykernel, ``<ipython-input-`` in IPython)."""
    name = shell.compile.get_code_name("", "", 0) if hasattr(shell.compile, "get_code_name") else "<ipython-input-"
    return name.rsplit("/", 1)[0] + "/" if "/" in name else name[:15]


def one_line_stubs() -> None:
    """In a kernel, an exercise's stub called from any cell says one line (``_stub_one_line``); elsewhere, nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with jupyterlab
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "_showtraceback") and not shell.custom_exceptions:
        shell.set_custom_exc((NotImplementedError,), _stub_one_line)


one_line_stubs()


# -- the fields most sections compare ----------------------------------------------------------------------
def _count(n, one: str, many: str | None = None) -> str:
    return plural(n, one, many) if isinstance(n, int) and not isinstance(n, bool) else f"{_(many or one + 's')}={n!r}"


def _tokens(side: str):
    return lambda n: f"{_(side)} {n:,}" if isinstance(n, int) and not isinstance(n, bool) else f"{_(side)}={n!r}"


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
        return _("the transcript has {extra} message(s) too many, from {first}").format(
            extra=len(yours) - len(expected), first=_brief(yours[len(expected)]))
    return _("the transcript lacks {message} (message {n})").format(message=_brief(expected[len(yours)]),
                                                                   n=len(yours) + 1)


STATUS = Field("status", label=N_("status"))
# TRANSLATORS: "3 turns": the count form, where a language has one (Bulgarian "3 хода", not "ходове")
TURNS = Field("turns", show=lambda n: _count(n, N_("turn"), C_("count", "turns")), label=C_("field", "turns"))
TOOL_RUNS = Field("tool_runs", show=lambda n: _count(n, N_("tool run"), N_("tool runs")),
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
TRANSCRIPT = Field("messages", show=lambda m: (_count(len(m), N_("message"), N_("messages")) if isinstance(m, list)
                                               else repr(m)[:40]), label=C_("field", "messages"),
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
