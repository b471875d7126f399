"""What every section's module shares: running one scripted scenario on a fresh copy of the workspace
(``scenario``), approving as a person would (``approving``), pressing Stop a delay after a tool starts
(``StopAfter``), the cost of every cap from one run (``prefix_costs``) and a trace's lines as text
(``trace_lines``); and what the notebooks' own small harnesses lean on (``call_model``, ``side_by_side``,
``show_source``).

Every experiment of a section module takes the base URL of a running provider (``ScriptedProvider.shared()``
in a notebook), runs the harness for real and returns a small named record: DataFrames to show and
``.measured``, figure id -> value, to lay beside the chapter's (``figures.compare``). Nothing is a constant
posing as a measurement. Every parameter a notebook exposes is checked under the notebook's name for it
(``CAPS``, ``BUDGETS``...); awaited from a cell, an experiment is ``stop_button.all_or_nothing``.
"""

from __future__ import annotations

import asyncio
import functools
import html
import inspect
import json
import ssl
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pandas as pd

from ..loop import Options, run
from ..state import RunState, approve, new_run
from ..trace import Trace
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from .language import C_, _, label
from .stop_button import all_or_nothing, check

SCENARIOS_THAT_FINISH = ("plan", "recover", "direct", "repeat", "answer", "destructive", "delete_twice")


@dataclass
class Outcome:
    state: RunState
    workspace: Workspace
    wall_ms: float
    trace: Trace = field(default_factory=lambda: Trace(timestamps=False))

    @property
    def row(self) -> dict:
        s = self.state
        return {"status": s.status, "turns": s.turns, "tool_runs": s.tool_runs, "in": s.prompt_tokens,
                "out": s.completion_tokens, "cost_usd": round(s.total_cost_usd, 6),
                "answer": s.output if s.output is not None else ""}


@all_or_nothing
async def scenario(base_url: str, name: str, *, workspace: Workspace | None = None, task: str = TASK,
                   tools=None, state: RunState | None = None, trace: Trace | None = None, **options) -> Outcome:
    """Run one scripted scenario on a fresh copy of the workspace (or the one given)."""
    check()  # Stop pressed during an earlier run of the same cell: start no other
    workspace = workspace or Workspace.copy_of()
    trace = trace or Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, task, name)
    started = time.perf_counter()
    state = await run(state, tools if tools is not None else workspace.tools(),
                      Options(base_url=base_url, trace=trace, **options))
    check()  # the run ended because Stop was pressed: the cell's experiment ends with it
    return Outcome(state, workspace, (time.perf_counter() - started) * 1000, trace)


async def continue_run(base_url: str, out: Outcome, **options) -> Outcome:
    return await scenario(base_url, out.state.model, workspace=out.workspace, state=out.state, trace=out.trace,
                          **options)


MAX_CAP = 500  # the runaway's prompts grow by 64 tokens a turn: cap 500 is ~8 M input tokens, a few seconds


def prefix_costs(state: RunState) -> pd.DataFrame:
    """Cost against cap for every cap up to the run's length, from one run's per-turn usage: a run
    capped at k is exactly the first k turns of a longer run (the scripted model is a pure function)."""
    turns = pd.DataFrame(state.per_turn)
    turns.index = pd.RangeIndex(1, len(turns) + 1, name="cap")
    return pd.DataFrame({"prompt_tokens": turns["prompt_tokens"],
                         "input_tokens": turns["prompt_tokens"].cumsum(),
                         "output_tokens": turns["completion_tokens"].cumsum(),
                         "cost_usd": turns["cost_usd"].cumsum().round(6)})


async def approving(base_url: str, name: str, *, state: RunState | None = None, workspace: Workspace | None = None,
                    trace: Trace | None = None, **options) -> Outcome:
    """Run ``name`` and approve every call it stops for, as a person clicking "yes" would."""
    out = await scenario(base_url, name, state=state, workspace=workspace, trace=trace, **options)
    while out.state.status == "interrupted" and out.state.interruption["type"] == "approval":
        approve(out.state, out.state.interruption["callId"])
        out = await continue_run(base_url, out, **options)
    return out


async def whole_run(coro):
    from .stop_button import whole
    return await whole(coro)


def trace_lines(events: list[dict], drop=("ts",)) -> str:
    """The events as the JSONL a trace file holds, minus the fields in ``drop`` (wall-clock stamps)."""
    return "\n".join(json.dumps({k: v for k, v in e.items() if k not in drop}, separators=(",", ":"))
                     for e in events)


Measured = dict[str, Any]


# -- what the notebooks' own small harnesses lean on ------------------------------------------------------
@functools.cache
def tls() -> ssl.SSLContext:
    """The TLS settings every ``call_model`` shares: building them costs ~45 ms, more than a scripted turn, and
    a client built per call (as ``call_model`` is, to stay ten lines) would pay that every turn."""
    return httpx.create_ssl_context()


async def call_model(base_url: str, model: str, messages: list[dict], tools: list[dict]) -> dict:
    """One turn, as the chapter's ``callModel`` makes it: send the whole transcript and the tool schemas, get
    back the assistant's message, why it stopped, and the tokens it was billed. Nothing else: no retries, no
    deadline, no size limit, no streaming (``harness_lib.client.ModelClient`` adds those)."""
    async with httpx.AsyncClient(timeout=60, verify=tls()) as http:
        response = await http.post(f"{base_url}/chat/completions",
                                   json={"model": model, "messages": messages, "tools": tools})
        response.raise_for_status()
        body = response.json()
    choice = body["choices"][0]
    return {"message": choice["message"], "finish_reason": choice["finish_reason"], "usage": body["usage"]}


COMPARED = ("status", "turns", "tool_runs", "in", "out", "cost_usd")
# The labels the notebooks' own code gives its runs and cases (its code is the same in every language): marked here
# for the catalogue, shown translated wherever a table shows them (``language.label``), kept English in the data.
NOTEBOOK_LABELS = (
    C_("label", "the loop above"), C_("label", "the loop above, no window"), C_("label", "your capped loop"),
    C_("label", "your budgeted loop"), C_("label", "your loop, continued"), C_("label", "your loop, approved"),
    C_("label", "your research tool"), C_("label", "your provider, in process"),
    C_("label", "ScriptedProvider, over HTTP"), C_("label", "destructive (needs approval)"),
    C_("label", "slow, Stop once the scan starts"), C_("label", "plan, provider answers 401"),
    C_("label", "restored from disk"), C_("label", "child killed (SIGKILL, exit -9)"),
    C_("label", "the first of several"),
)


def as_row(run) -> dict:
    """The fields two harnesses can be compared on, from a ``RunState``, an ``Outcome`` or a dict that has them
    (a notebook's own small run, written as a dict or a dataclass with those names, ``prompt_tokens`` and
    ``completion_tokens`` for ``in`` and ``out``)."""
    if isinstance(run, Outcome):
        run = run.state
    if isinstance(run, RunState):
        return {"status": run.status, "turns": run.turns, "tool_runs": run.tool_runs, "in": run.prompt_tokens,
                "out": run.completion_tokens, "cost_usd": round(run.total_cost_usd, 6)}
    if not isinstance(run, dict):  # "in" and "out" cannot be attribute names: an object says prompt_tokens...
        names = {"in": "prompt_tokens", "out": "completion_tokens"}
        run = {k: getattr(run, names.get(k, k)) for k in COMPARED if hasattr(run, names.get(k, k))}
    return {k: (round(run[k], 6) if k == "cost_usd" and run.get(k) is not None else run.get(k)) for k in COMPARED}


def side_by_side(runs: dict):
    """``{"the notebook's loop": mine, "harness_lib.run": state}`` as one table, one run a row, and a line
    saying whether they agree on every field both have (a field one of them does not keep is left blank)."""
    from IPython.display import display

    from .params import table

    rows = {name: as_row(r) for name, r in runs.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = _("run")
    kept = [c for c in COMPARED if frame[c].notna().all()]
    differ = [c for c in kept if frame[c].nunique(dropna=False) > 1]
    print(_("they agree on {fields}").format(fields=", ".join(kept)) if not differ else
          _("they DIFFER on {fields}").format(fields=", ".join(differ)))
    display(table(frame[[c for c in COMPARED if frame[c].notna().any()]]))


def side_by_side_cases(cases: dict):
    """Several cases at once, ``{case: {"the loop above": mine, "harness_lib.run": state}, ...}``: one table, a
    row per run under its case, and a line saying whether the runs of each case agree on every field they all
    have (the cases differ from each other: a policy, a cap, a script)."""
    from IPython.display import display

    from .params import table

    frame = pd.concat({case: pd.DataFrame.from_dict({name: as_row(r) for name, r in runs.items()}, orient="index")
                       for case, runs in cases.items()}, names=[_("case"), _("run")])
    kept = [c for c in COMPARED if frame[c].notna().all()]
    differ = {case: [c for c in kept if frame.loc[case, c].nunique(dropna=False) > 1] for case in cases}
    differ = {case: fields for case, fields in differ.items() if fields}
    print(_("in every case they agree on {fields}").format(fields=", ".join(kept)) if not differ else
          _("they DIFFER: {cases}").format(cases="; ".join(_("{case} on {fields}").format(
              case=label(case), fields=", ".join(fields)) for case, fields in differ.items())))
    display(table(frame[[c for c in COMPARED if frame[c].notna().any()]]))


class Source:
    """A piece of the library's source, highlighted in a notebook, plain in text (``show_source``)."""

    def __init__(self, code: str, where: str):
        self.code, self.where = code, where

    def __repr__(self):
        return f"# {self.where}\n{self.code}"

    def _repr_html_(self):
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(self.code, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
        return f'<div style="font-size: 12px"><p><code>{html.escape(self.where)}</code></p>{body}</div>'


def show_source(obj, start: str | None = None, end: str | None = None) -> Source:
    """The installed source of ``obj`` (a function, a class, a module), read with ``inspect`` so it cannot drift
    from what runs. ``start`` / ``end``: the excerpt from the first line containing ``start`` to the first line
    after it containing ``end`` (both included)."""
    lines, _ = inspect.getsourcelines(obj)
    lines = "".join(lines).splitlines()
    first, last = 0, len(lines) - 1
    if start is not None:
        first = next((i for i, line in enumerate(lines) if start in line), None)
        if first is None:
            raise ValueError(f"{start!r} is not in the source of {getattr(obj, '__qualname__', obj)}")
    if end is not None:
        last = next((i for i in range(first, len(lines)) if end in lines[i]), None)
        if last is None:
            raise ValueError(f"{end!r} does not follow {start!r} in the source of {getattr(obj, '__qualname__', obj)}")
    module = inspect.getmodule(obj)
    path = module.__name__.replace(".", "/") + ".py" if module else "?"
    name = getattr(obj, "__qualname__", None)
    where = path + (f", {name}" if name and not inspect.ismodule(obj) else "")
    return Source(textwrap.dedent("\n".join(lines[first:last + 1])), where)


# -- Stop pressed at an event of the run ------------------------------------------------------------------
class StopAfter:
    """Stop pressed ``seconds`` after a tool starts (the first ``tool_start`` of the run, or of the tool named
    ``tool``): a delay counted from an event of the run, never from the cell's start, which a busy machine can
    move before the run's first turn. ``seconds=None`` never presses. The run hears the event through
    ``on_event`` (a ``Trace``'s hook: ``trace()`` makes one) or calls ``start`` itself; ``run(coro)`` runs it as
    a task that Stop, ``task.cancel("user pressed Stop")``, can end. ``progress`` records each progress label
    with its time since the tool started, and passes a line to ``echo`` (``print``) as it comes."""

    def __init__(self, seconds: float | None, tool: str | None = None, reason: str = "user pressed Stop", echo=None):
        self.seconds, self.tool, self.reason, self.echo = seconds, tool, reason, echo
        self.started: float | None = None   # time.perf_counter() at the tool's start
        self.pressed: float | None = None   # ... when Stop was pressed (None: never, the run ended first)
        self.ended: float | None = None     # ... when the run ended
        self.timeline: list[dict] = []      # one {"t_ms", "label"} per progress event
        self._task: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None

    def ms(self, at: float | None) -> float | None:
        """Milliseconds from the tool's start to ``at`` (a ``perf_counter`` time)."""
        return None if at is None or self.started is None else (at - self.started) * 1000

    def start(self, tool_name: str | None = None) -> None:
        if self.started is not None or (self.tool is not None and tool_name != self.tool):
            return
        self.started = time.perf_counter()
        if self.seconds is not None and self._task is not None:
            self._timer = asyncio.get_running_loop().call_later(self.seconds, self._press)

    def on_event(self, event: dict) -> None:
        if event["type"] == "tool_start":
            self.start(event.get("toolName"))

    def trace(self) -> Trace:
        return Trace(timestamps=False, on_event=self.on_event)

    def progress(self, label: str) -> None:
        t_ms = round(self.ms(time.perf_counter()) or 0)
        self.timeline.append({"t_ms": t_ms, "label": label})
        if self.echo is not None:
            self.echo(f"progress: {label}  (t+{t_ms:,} ms)")

    def _press(self) -> None:
        if self._task is not None and not self._task.done():
            self.pressed = time.perf_counter()
            self._task.cancel(self.reason)

    async def run(self, coro):
        self._task = task = asyncio.ensure_future(coro)
        task.add_done_callback(lambda _: setattr(self, "ended", time.perf_counter()))
        try:
            return await task
        finally:
            if self._timer is not None:
                self._timer.cancel()
            if not task.done():  # the cell itself was cancelled from outside: take the run with it
                task.cancel()
