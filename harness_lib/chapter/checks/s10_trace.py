"""The check of notebook 10's pieces, ``trace_to(path)`` (``trace(run_id, type, **fields)``: one event, one JSON
line appended to the file) and the ``agent_loop(url, model, messages, tools, trace, run_id)`` that writes the
chapter's six kinds of line: every line carries the run id, every turn line its tokens and the running cost,
``run_stopped`` its reason.

The cases: the reader's ``trace_to`` alone, on a file another run has already written a line to, by two writers
in turn (as two processes append to one trace), beside ``harness_lib.trace.Trace`` writing the same events; the
chapter's approval run (``destructive``) as ``n1``, under another run id, and under one that JSON must escape; every
script the loop can run (it has no error policy or cap, and stops at a call that needs approval: ``plan``,
``slow``, ``delete_twice``, ``direct``, ``repeat``, ``answer``). Expected is ``harness_lib.run`` with
``Trace(path, timestamps=False)``: its lines, field by field, less the call id it adds on ``tool_result`` and with a
tool's milliseconds (a time) aside, as tests/built/test_10_trace.py compares them; and its status, turns, tool runs,
tokens and cost.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ..checking import (
    COST,
    IN,
    OUT,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    plural,
    returned,
    start,
    workspace,
)
from ..language import N_, NP_, Text, _, ngettext

MS = "…"   # a tool's milliseconds: a time, so compared as a whole number within what the tool can have taken
SCAN_S = 0.06   # the slow scan, made quick: a scan_archive line says at least this long

BEFORE = ("n0", "run_stopped", {"status": "completed", "reason": "completed", "turns": 3, "costUsd": 0.00247})
FIRST = (("n1", "turn", {"turn": 1, "prompt_tokens": 204, "completion_tokens": 23, "total_tokens": 227,
                         "costUsd": 0.000684, "finish": "tool_calls"}),
         ("n1", "tool_start", {"toolName": "list_files", "args": "{}", "callId": "c1"}))
SECOND = (("n1", "tool_result", {"toolName": "list_files", "ms": 1, "ok": True}),
          ("n1", "run_stopped", {"status": "interrupted", "reason": "approval", "turns": 2, "costUsd": 0.00157}))


def _case(script: str, point: str, run_id: str = "n1") -> Case:
    # TRANSLATORS: a case's name in a check's table: a script (`destructive`) run under a run id (`n1`)
    name = Text(N_("{script}, run {run_id}"), script=script, run_id=run_id) if script != "trace_to" \
        else N_("your trace_to alone")
    return Case(name, point, {"script": script, "run_id": run_id})


CASES = (  # the first case that fails is the one explained: the writer alone, then the chapter's run, then the rest
    _case("trace_to", N_("one event, one line of JSON, appended: a file with lines already, and two writers in turn, "
                         "keep every line")),
    _case("destructive", N_("the chapter's six lines of run n1: turn, tool_start, tool_result, turn, "
                            "approval_required, run_stopped")),
    _case("destructive", N_("every line carries the run id it was given"), "n2"),
    _case("destructive", N_("the run id is written as JSON, whatever it holds"), 'café "7"'),
    _case("plan", N_("a completed run's last line says so: run_stopped, completed")),
    _case("slow", N_("a tool's progress is a line of its own, written from inside it through its context")),
    _case("delete_twice", N_("a run stopped for approval on its first turn: three lines")),
    _case("direct", N_("a turn line for every turn, its tokens and the running cost")),
    _case("repeat", N_("a turn line for every turn, its tokens and the running cost")),
    _case("answer", N_("the shortest run: one turn line, then run_stopped")),
)


def _lines(path: Path, took_ms: float | None = None) -> list:
    """The file's lines, each parsed (a line that is not one JSON object stays its text), a tool's ``ms`` made
    ``MS`` when it is a whole number the tool can have taken: no more than the whole run (``took_ms``), no less than
    the scan's pauses for ``scan_archive``."""
    if not path.exists():
        return []
    out = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            out.append(text)
            continue
        if isinstance(line, dict) and _a_time(line, took_ms):
            line["ms"] = MS
        out.append(line)
    return out


def _a_time(line: dict, took_ms: float | None) -> bool:
    ms = line.get("ms")
    if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
        return False
    if took_ms is None:
        return True
    return ms <= took_ms + 1 and (line.get("toolName") != "scan_archive" or ms >= SCAN_S * 1000 * 0.9)


def _library_lines(path: Path) -> list:
    return [{k: v for k, v in line.items() if not (k == "callId" and line["type"] == "tool_result")}
            for line in _lines(path)]


async def yours(pieces: dict, case: Case, url: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="check-trace-") as folder:
        return await _yours(pieces, case, url, Path(folder) / "trace.jsonl")


async def _yours(pieces: dict, case: Case, url: str, path: Path) -> dict:
    if case.args["script"] == "trace_to":
        from ...trace import Trace
        Trace(path, timestamps=False).emit(BEFORE[0], BEFORE[1], **BEFORE[2])
        for events in (FIRST, SECOND):   # two writers, one after the other, as two processes
            trace = pieces["trace_to"](path)
            for run_id, type_, fields in events:
                trace(run_id, type_, **fields)
        return {"trace": _lines(path)}
    messages, began = start(), time.perf_counter()
    got = await pieces["agent_loop"](url, case.args["script"], messages, workspace().tools(seconds=SCAN_S),
                                     pieces["trace_to"](path), case.args["run_id"])
    took_ms = (time.perf_counter() - began) * 1000
    return {**returned(got, ("status", "turns", "tool_runs", "in", "out", "cost_usd"), "agent_loop"),
            "trace": _lines(path, took_ms), "messages": messages}


async def expected(case: Case, url: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="check-trace-") as folder:
        return await _expected(case, url, Path(folder) / "trace.jsonl")


async def _expected(case: Case, url: str, path: Path) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...trace import Trace
    from ...workspace import SYSTEM_PROMPT, TASK

    if case.args["script"] == "trace_to":
        for run_id, type_, fields in (BEFORE, *FIRST, *SECOND):
            Trace(path, timestamps=False).emit(run_id, type_, **fields)
        return {"trace": _library_lines(path)}
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"], run_id=case.args["run_id"]),
                      workspace().tools(seconds=SCAN_S), Options(base_url=url, trace=Trace(path, timestamps=False)))
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.total_cost_usd, "trace": _library_lines(path),
            "messages": state.messages}


def _kind(line) -> str:
    """A line's type (a name in the code, never translated), for what differs."""
    return line.get("type", "?") if isinstance(line, dict) else _("not JSON")


def _keys(e: dict, y: dict) -> str:
    missing = [k for k in e if k not in y]
    extra = [k for k in y if k not in e]
    wrong = [k for k in e if k in y and e[k] != y[k]]
    # TRANSLATORS: {keys}: the names of a trace line's fields (`runId`, `costUsd`...)
    return "; ".join(filter(None, [_("{keys} missing").format(keys=", ".join(missing)) if missing else "",
                                   _("{keys} not expected").format(keys=", ".join(extra)) if extra else "",
                                   ", ".join(_("{key} expected {expected}, yours {yours}").format(
                                       key=k, expected=repr(e[k]), yours=repr(y[k])) for k in wrong[:2])]))


def _trace_difference(e: list, y) -> str:
    if not isinstance(y, list):
        return _("no trace")
    for i, (a, b) in enumerate(zip(e, y)):
        if a != b:
            if not isinstance(b, dict):
                return _("trace line {n} is not a JSON object: {text}").format(n=i + 1, text=repr(str(b)[:60]))
            if _kind(a) != _kind(b):
                # TRANSLATORS: {expected}, {yours}: the types of two trace lines (`turn`, `tool_start`...)
                return _("trace line {n} expected a {expected} line, yours a {yours} line").format(
                    n=i + 1, expected=_kind(a), yours=_kind(b))
            return _("trace line {n} ({kind}): {difference}").format(n=i + 1, kind=_kind(a), difference=_keys(a, b))
    if len(y) < len(e):
        return ngettext("your trace has {yours} line, the library's {expected}: yours lacks the {kind} line",
                        "your trace has {yours} lines, the library's {expected}: yours lacks the {kind} line",
                        len(y)).format(
            yours=len(y), expected=len(e), kind=_kind(e[len(y)]))
    return ngettext("your trace has {yours} line, the library's {expected}: from line {n}, a {kind} line",
                    "your trace has {yours} lines, the library's {expected}: from line {n}, a {kind} line",
                    len(y)).format(
        yours=len(y), expected=len(e), n=len(e) + 1, kind=_kind(y[len(e)]))


TRACE = Field("trace", show=lambda t: plural(len(t), NP_("{n:,} line", "{n:,} lines")) if isinstance(t, list)
              else repr(t),
              describe=_trace_difference)


def _first(e: dict, y: dict) -> tuple:
    """The first line that differs, of each side (None where a side has none)."""
    for a, b in zip(e["trace"], y["trace"]):
        if a != b:
            return a, b
    n = min(len(e["trace"]), len(y["trace"]))
    return (e["trace"][n] if n < len(e["trace"]) else None), (y["trace"][n] if n < len(y["trace"]) else None)


def _lacks(key: str, kind: str | None = None):
    def when(c, e, y):
        a, b = _first(e, y)
        return isinstance(a, dict) and isinstance(b, dict) and (kind is None or a["type"] == kind) \
            and key in a and (b.get(key) != a[key])
    return when


def _every(key: str):
    return lambda c, e, y: any(isinstance(b, dict) and key not in b for b in y["trace"])


def _missing_field(c, e, y) -> bool:
    a, b = _first(e, y)
    return isinstance(a, dict) and isinstance(b, dict) and a.get("type") == b.get("type") and bool(set(a) - set(b))


def _out_of_order(c, e, y) -> bool:
    kinds = [[line.get("type") if isinstance(line, dict) else None for line in side["trace"]] for side in (e, y)]
    return kinds[0] != kinds[1] and sorted(map(str, kinds[0])) == sorted(map(str, kinds[1]))


HINTS = (
    Hint(N_("a tool's lines come in the order of its run: `tool_start` as it starts, its `tool_progress` lines, and "
            "`tool_result` once it has run, after the tool has returned"), _out_of_order),
    Hint(N_("a line that is not one JSON object: write each event with `json.dumps(...)` (never by hand), on a line "
            "of its own"), lambda c, e, y: any(not isinstance(b, dict) for b in y["trace"])),
    Hint(N_("open the file to append (`\"a\"`): a trace keeps every line, those of another run or process before "
            "yours included"),
         lambda c, e, y: 0 < len(y["trace"]) < len(e["trace"]) and c.args["script"] == "trace_to"),
    Hint(N_("every line carries the run id: a run spanning three processes and two days is then one query"),
         lambda c, e, y: _every("runId")(c, e, y)),
    Hint(N_("each line carries the id of its own run, the `run_id` it was given, written as it is: one query then "
            "finds the whole run"), _lacks("runId")),
    Hint(N_("every turn line carries the running cost, `costUsd`: the run's dollars so far, rounded to 6 places, not "
            "this turn's alone"), _lacks("costUsd", "turn")),
    Hint(N_("every turn line carries that turn's tokens, `prompt_tokens`, `completion_tokens` and `total_tokens` of "
            "its usage"), lambda c, e, y: any(_lacks(k, "turn")(c, e, y) for k in ("prompt_tokens",
                                                                                   "completion_tokens",
                                                                                   "total_tokens"))),
    Hint(N_("run_stopped carries the reason: a budget stop and a crash look the same from outside and need opposite "
            "answers"), _lacks("reason", "run_stopped")),
    Hint(N_("a tool's progress is a line of its own: pass the tool a context whose `progress` writes a "
            "`tool_progress` line"), lambda c, e, y: c.args["script"] == "slow" and not any(
             isinstance(b, dict) and b.get("type") == "tool_progress" for b in y["trace"])),
    Hint(N_("the event's type comes second, one of the chapter's six: turn, tool_start, tool_progress, tool_result, "
            "approval_required, run_stopped"), _lacks("type")),
    Hint(N_("each line carries the chapter's fields for its kind: turn (turn, prompt_tokens, completion_tokens, "
            "total_tokens, costUsd, finish), tool_start (toolName, args, callId), tool_progress (toolName, label), "
            "tool_result (toolName, ms, ok), approval_required (toolName, args, callId), run_stopped (status, "
            "reason, turns, costUsd)"), _missing_field),
    Hint(N_("a tool_result line says how long the tool took, `ms`: a whole number of milliseconds, from just before "
            "the tool's run to just after it"),
         _lacks("ms", "tool_result")),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('runId', 'type', 'turn', 'prompt_tokens', 'completion_tokens', 'total_tokens', 'costUsd', 'finish',
            'tool_start', 'toolName', 'args', 'callId', 'tool_progress', 'label', 'tool_result', 'ms', 'ok',
            'approval_required', 'run_stopped', 'status', 'reason')
CHECK = Check("10-trace", ("agent_loop", "trace_to"), CASES,
              (STATUS, TURNS, TOOL_RUNS, IN, OUT, COST, TRACE, TRANSCRIPT), yours, expected, HINTS)


async def check(agent_loop, trace_to, url: str | None = None):
    """Run your ``agent_loop`` and ``trace_to`` on every case of section 10 beside ``harness_lib``: a table, ``N of
    M cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, trace_to=trace_to)
