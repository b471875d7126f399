"""What every section's module shares: running one scripted scenario on a fresh copy of the workspace
(``scenario``), approving as a person would (``approving``), pressing Stop after a delay (``cancel_after``), the
cost of every cap from one run (``prefix_costs``) and a trace's lines as text (``trace_lines``).

Every experiment of a section module takes the base URL of a running provider (``ScriptedProvider.shared()``
in a notebook), runs the harness for real and returns a small named record: DataFrames to show and
``.measured``, figure id -> value, to lay beside the chapter's (``figures.compare``). Nothing is a constant
posing as a measurement. Every parameter a notebook exposes is checked under the notebook's name for it
(``CAPS``, ``BUDGETS``...); awaited from a cell, an experiment is ``stop_button.all_or_nothing``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..loop import Options, run
from ..state import RunState, approve, new_run
from ..trace import Trace
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
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


async def cancel_after(coro, seconds: float, reason: str = "user pressed Stop"):
    """Run ``coro`` as a task and press Stop after ``seconds``: ``task.cancel(reason)``."""
    task = asyncio.ensure_future(coro)
    asyncio.get_running_loop().call_later(seconds, task.cancel, reason)
    return await task


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
