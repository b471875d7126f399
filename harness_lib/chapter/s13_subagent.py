"""Notebook 13, a subagent is a tool: its own window, its own limits, one Stop for the whole tree.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd

from ..subagent import research_tool
from ..trace import Trace
from ..workspace import Workspace
from . import params
from .common import Outcome, cancel_after, scenario
from .stop_button import all_or_nothing


class Subagent(NamedTuple):
    """13: a parent that delegates to a child run through a tool."""
    outcome: Any            # the parent's run (``Outcome``)
    table: pd.DataFrame     # parent and child: status, turns, messages, own cost


@all_or_nothing
async def subagent(base_url: str, child_model: str = "plan", child_max_turns: int = 6,
                   child_budget_usd: float = 0.05, stop_at: float | None = None) -> Subagent:
    params.whole_number("CHILD_MAX_TURNS", child_max_turns, 1, 100)
    params.number("CHILD_BUDGET_USD", child_budget_usd, above=0, high=1.0)
    if stop_at is not None:
        params.number("STOP_AT", stop_at, above=0, high=60, unit=" s")
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), base_url, child_model, max_turns=child_max_turns,
                             max_budget_usd=child_budget_usd)
    trace = Trace(timestamps=False)
    coro = scenario(base_url, "delegate", workspace=ws, tools=[research, *ws.tools()], trace=trace)
    out = await (cancel_after(coro, stop_at) if stop_at else coro)
    child = out.state.subruns[0] if out.state.subruns else {}
    table = pd.DataFrame([
        {"run": "parent", "status": out.state.status, "turns": out.state.turns, "messages": len(out.state.messages),
         "own cost_usd": round(out.state.own_cost_usd, 6)},
        {"run": "child (research)", "status": child.get("status"), "turns": child.get("turns"),
         "messages": child.get("messages"), "own cost_usd": child.get("costUsd")}]).set_index("run")
    return Subagent(out, table)


def child_story(out: Outcome) -> str:
    """What the child did and what of it reached the parent, in words computed from the run (Markdown)."""
    child = out.state.subruns[0] if out.state.subruns else None
    if child is None:
        return "The parent never started a child."
    runs = [e for e in out.trace.events if e["runId"] == child["runId"] and e["type"] == "tool_start"]
    did = ", ".join(f"`{e['toolName']}`" for e in runs) or "no tool"
    received = next((m["content"] for m in out.state.messages if m["role"] == "tool"), "")
    turns = child["turns"]
    return (f"The child spent {turns} turn{'s' if turns != 1 else ''} and ran {len(runs)} tool "
            f"call{'s' if len(runs) != 1 else ''} ({did}), ending `{child['status']}` with {child['messages']} "
            f"messages in its own window; of all that, the parent's window holds one tool result of "
            f"{len(received.split())} words.")
