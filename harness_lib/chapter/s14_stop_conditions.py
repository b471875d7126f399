"""Notebook 14, stop conditions: the loop's exit as a list of predicates, and conditions of one's own.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .. import stops
from ..workspace import Workspace
from .common import cancel_after, scenario
from .plots import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, _figure, style
from .s05_tool_errors import marked_tools
from .stop_button import all_or_nothing


@all_or_nothing
async def stop_conditions(base_url: str):
    cases = {
        "max_turns(8)": ("runaway", [stops.max_turns(8)]),
        "max_budget(0.01)": ("runaway", [stops.max_budget(0.01)]),
        "tool_called('read_file')": ("plan", [stops.tool_called("read_file")]),
        "turn_cost_above(0.002)": ("runaway", [stops.turn_cost_above(0.002)]),
        "when(prompt tokens > 2,000)": ("runaway", [stops.when(lambda s: s.prompt_tokens > 2000,
                                                                "stop condition: 2,000 prompt tokens")]),
        "the first of several": ("runaway", [stops.max_turns(50), stops.max_budget(0.01),
                                             stops.turn_cost_above(0.002)]),
    }
    rows = []
    for label, (name, conditions) in cases.items():
        out = await scenario(base_url, name, stops=conditions)
        i = out.state.interruption or {}
        rows.append({"stop when": label, "scenario": name, "status": out.state.status,
                     "why": i.get("reason", i.get("type", "")), "turns": out.state.turns,
                     "cost_usd": round(out.state.own_cost_usd, 6)})
    return pd.DataFrame(rows).set_index("stop when")


def files_read(state) -> list[str]:
    """A reader's definition of progress: the files read successfully so far."""
    return sorted({r["args"] for r in state.tool_log if r["toolName"] == "read_file" and r.get("ok")})


@all_or_nothing
async def new_stop_conditions(base_url: str):
    ws = Workspace.copy_of()
    cases = {
        "repeated_call(3)": ("runaway", dict(stops=[stops.repeated_call(3)])),
        "no_progress(3, progress=files_read)": ("runaway", dict(stops=[stops.no_progress(3, progress=files_read)])),
        "no_progress(2, progress=files_read)": ("plan", dict(stops=[stops.no_progress(2, progress=files_read)])),
        "any_of(max_budget(0.01), repeated_call(5))": ("runaway", dict(stops=[stops.any_of(
            stops.max_budget(0.01), stops.repeated_call(5))])),
        "all_of(repeated_call(2), turn_cost_above(0.001))": ("runaway", dict(stops=[stops.all_of(
            stops.repeated_call(2), stops.turn_cost_above(0.001))])),
        "repeated_failure(2)": ("forbidden", dict(max_turns=12, stops=[stops.repeated_failure(2)])),
        "permanent_error(), read_file marks it": ("forbidden", dict(max_turns=12, workspace=ws, tools=marked_tools(ws),
                                                                    stops=[stops.permanent_error()])),
    }
    rows = []
    for label, (name, options) in cases.items():
        out = await scenario(base_url, name, **options)
        s, i = out.state, out.state.interruption or {}
        line = next(e for e in reversed(out.trace.events) if e["type"] == "run_stopped")
        rows.append({"stop when": label, "scenario": name, "status": s.status, "interruption": i.get("type", ""),
                     "why": i.get("reason") or s.error or "", "turns": s.turns, "cost_usd": round(s.own_cost_usd, 6),
                     "trace says": ", ".join(f"{k}={line[k]}" for k in ("reason", "condition") if k in line)})
    return pd.DataFrame(rows).set_index("stop when")


@all_or_nothing
async def condition_or_stop(base_url: str, stop_at: float = 0.3):
    """The same slow run ended twice: by a user's Stop and by a reader's condition. They used to end the
    same way (``cancelled``); code that must react to the one and not the other can now tell them apart."""
    runs = {"user presses Stop": await cancel_after(scenario(base_url, "slow"), stop_at),
            "a condition: when(turns >= 1)": await scenario(base_url, "slow", stops=[
                stops.when(lambda s: s.turns >= 1, "one turn is enough", name="one_turn")])}
    return pd.DataFrame([{"ended by": k, "status": o.state.status, "resumable": o.state.resumable,
                          "interruption": o.state.interruption} for k, o in runs.items()]).set_index("ended by")


def stops_on_curve_plot(prefix: pd.DataFrame, table: pd.DataFrame) -> Figure:
    """The runaway's running cost, with the turn each stop condition ended it at (``table`` has
    ``turns`` and ``cost_usd``, indexed by condition)."""
    fig, (ax,) = _figure(7.0, 3.6)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=GREY, linewidth=1.2, label="runaway, running cost")
        colors = [BLUE, ORANGE, GREEN, RED, PURPLE, "#8c6d31"]
        for n, (color, (label, row)) in enumerate(zip(colors * 3, table.iterrows())):
            # Later points are drawn smaller, so two conditions that stop at the same turn both show.
            ax.scatter([row["turns"]], [row["cost_usd"]], color=color, zorder=3 + n, s=max(110 - 18 * n, 20),
                       label=f"{label}: turn {row['turns']}")
        ax.set_xlabel("turns")
        ax.set_ylabel("cost (USD)")
        ax.set_title("Where each stop condition ends the same runaway")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_xlim(0, prefix.index.max() + 1)
    return fig
