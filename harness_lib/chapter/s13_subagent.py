"""Notebook 13, a subagent is a tool: its own window, its own limits, one Stop for the whole tree.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from ..loop import Options, run
from ..state import RunState, new_run
from ..subagent import research_tool
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from . import params
from .checking import TURN_COUNT, plural
from .common import StopAfter
from .language import NP_, _
from .stop_button import all_or_nothing, check

PARAMETERS = {"CHILD_MAX_TURNS": params.Whole(1, 50), "CHILD_BUDGET_USD": params.Number(0, 1.0),
              "STOP_AT": params.Number(0, 10, unit=" s")}  # from 3 s on, the child's scan ends before Stop


class Subagent(NamedTuple):
    """13: a parent that delegates to a child run through a tool."""
    state: RunState         # the parent's run
    events: list            # the trace both wrote
    table: pd.DataFrame     # parent and child: status, turns, messages, own cost


def tree_table(state: RunState) -> pd.DataFrame:
    """The parent and the child it started: status, turns, messages in its own window, its own spend."""
    child = state.subruns[0] if state.subruns else {}
    return pd.DataFrame([
        {"run": "parent", "status": state.status, "turns": state.turns, "messages": len(state.messages),
         "own cost_usd": round(state.own_cost_usd, 6)},
        {"run": "child (research)", "status": child.get("status"), "turns": child.get("turns"),
         "messages": child.get("messages"), "own cost_usd": child.get("costUsd")}]).set_index("run")


def received(state: RunState) -> str:
    """What the parent's window got from the child: its one tool result ("" when the call never returned)."""
    return next((m["content"] for m in state.messages if m["role"] == "tool"), "")


@all_or_nothing
async def subagent(base_url: str, child_model: str = "plan", child_max_turns: int = 6,
                   child_budget_usd: float = 0.05, stop_at: float | None = None) -> Subagent:
    """``delegate``'s parent with the library's research tool, its child running ``child_model``; Stop pressed
    ``stop_at`` s after the child's scan starts (never, when None)."""
    child_max_turns = PARAMETERS["CHILD_MAX_TURNS"].check("CHILD_MAX_TURNS", child_max_turns)
    child_budget_usd = PARAMETERS["CHILD_BUDGET_USD"].check("CHILD_BUDGET_USD", child_budget_usd)
    if stop_at is not None:
        PARAMETERS["STOP_AT"].check("STOP_AT", stop_at)
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), base_url, child_model, max_turns=child_max_turns,
                             max_budget_usd=child_budget_usd)
    stop = StopAfter(stop_at, tool="scan_archive")
    trace = stop.trace()
    state = await stop.run(run(new_run(SYSTEM_PROMPT, TASK, "delegate"), [research, *ws.tools()],
                               Options(base_url=base_url, trace=trace)))
    check()  # the reader's own Stop (not ours) ended the run: end the experiment
    return Subagent(state, trace.events, tree_table(state))


def child_story(state: RunState, events: list[dict]) -> str:
    """What the child did and what of it reached the parent, in words computed from the run (Markdown)."""
    child = state.subruns[0] if state.subruns else None
    if child is None:
        return _("The parent never started a child.")
    runs = [e for e in events if e["runId"] == child["runId"] and e["type"] == "tool_start"]
    did = ", ".join(f"`{e['toolName']}`" for e in runs) or _("no tool")
    return _("The child spent {turns} and ran {calls} ({did}), ending `{status}` with {messages} messages in its own "
             "window; of all that, the parent's window holds one tool result of {words} words.").format(
        turns=plural(child["turns"], TURN_COUNT),
        calls=plural(len(runs), NP_("{n:,} tool call", "{n:,} tool calls")),
        did=did, status=child["status"], messages=child["messages"], words=len(received(state).split()))
