"""Notebook 05, tool errors are context: one failure under three policies, an error no message can fix;
beyond the chapter, ending that run at once (a permanent mark, or a repeated failure).
"""

from __future__ import annotations

from typing import NamedTuple

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from .. import stops
from ..state import RunState
from ..tools import permanent_errors as mark_permanent
from ..workspace import Workspace
from . import params
from .common import Measured, scenario
from .figures import relabel
from .plots import BLUE, GREY, ORANGE, _figure, style
from .stop_button import all_or_nothing


class ToolErrors(NamedTuple):
    """05: the recover run under each tool-error policy, and the error no message can fix."""
    table: pd.DataFrame     # indexed by policy: the run, whether it answered, what the model read
    permanent: pd.DataFrame  # the forbidden run: a file the process may not open
    measured: Measured


class PermanentErrors(NamedTuple):
    """The forbidden run ended by the turn cap, by a permanent mark, by repeated failures."""
    table: pd.DataFrame     # one row per run: how and when it ended, its share of the chapter's cost
    runs: dict              # row label -> ``Outcome``
    measured: Measured


@all_or_nothing
async def tool_errors(base_url: str, cap: int = 20, permanent_cap: int = 12) -> ToolErrors:
    params.whole_number("CAP", cap, 1, 200)
    params.whole_number("PERMANENT_CAP", permanent_cap, 1, 200)
    rows, outs = [], {}
    for policy in ("fatal", "generic", "descriptive"):
        out = outs[policy] = await scenario(base_url, "recover", tool_errors=policy, max_turns=cap)
        rows.append({"policy": policy, **out.row, "answered": "errors.log" in (out.state.output or ""),
                     "what the model read": _model_read(out.state)})
    table = pd.DataFrame(rows).set_index("policy")
    perm = await scenario(base_url, "forbidden", max_turns=permanent_cap)
    permanent = pd.DataFrame([{"run": "read a file the process may not open", **perm.row}])
    fatal, desc = table.loc["fatal", "cost_usd"], table.loc["descriptive", "cost_usd"]
    errors = {"errors.ratio": float(desc / fatal), "errors.answers": ", ".join(table.index[table.answered])}
    perm_figures = {"perm.turns": perm.state.turns, "perm.toolruns": perm.state.tool_runs,
                    "perm.in": perm.state.prompt_tokens, "perm.cost": perm.state.own_cost_usd,
                    "perm.status": perm.state.status, "perm.answer": perm.state.output,
                    "perm.ratio": float(perm.state.own_cost_usd / desc)}
    measured = {**(errors if cap == 20 else relabel(errors, f"CAP={cap}")),
                **(perm_figures if (cap, permanent_cap) == (20, 12) else
                   relabel(perm_figures, f"CAP={cap}, PERMANENT_CAP={permanent_cap}"))}
    return ToolErrors(table, permanent, measured)


def policy_story(table: pd.DataFrame) -> str:
    """05's conclusion, in words computed from its table (Markdown)."""
    answered = list(table.index[table["answered"]])
    costs = ", ".join(f"`{p}` `${c:.6f}`" for p, c in table["cost_usd"].items())  # code: no "$" math
    if not answered:
        d = table.loc["descriptive"]
        return (f"No policy got to an answer ({costs}): even the `descriptive` run ended `{d['status']}` after "
                f"{d['turns']} turns, before it could use what the error told it. Try a larger `CAP`.")
    who = " and ".join(f"`{p}`" for p in answered)
    line = f"Only {who} got to an answer ({costs})."
    if "generic" not in answered:
        line += (" The `generic` policy keeps the loop alive and still loses, because the one thing the model "
                 "needed, the hint in the error text, never reached it.")
    return line


def _model_read(state: RunState) -> str:
    """The first tool result, if the model was ever shown it (a run stopped by a fatal error never was)."""
    for i, m in enumerate(state.messages):
        if m["role"] == "tool":
            if any(later["role"] == "assistant" for later in state.messages[i + 1:]):
                return m["content"]
            return "(nothing: the run stopped before the model saw the result)"
    return ""


def marked_tools(workspace: Workspace):
    """The workspace's tools, with ``read_file`` marking a refused path (``PermissionError``) permanent:
    no message to the model can make the process allowed to read it."""
    return [mark_permanent(t, PermissionError) if t.name == "read_file" else t for t in workspace.tools()]


@all_or_nothing
async def permanent_errors(base_url: str, cap: int = 12, recover_cap: int = 20) -> PermanentErrors:
    params.whole_number("PERMANENT_CAP", cap, 1, 200)
    params.whole_number("CAP", recover_cap, 1, 200)
    ws = Workspace.copy_of()
    runs = {
        "chapter: the turn cap is the floor": await scenario(base_url, "forbidden", max_turns=cap),
        "tool marks it permanent + permanent_error()": await scenario(
            base_url, "forbidden", workspace=ws, tools=marked_tools(ws), max_turns=cap,
            stops=[stops.permanent_error()]),
        "no mark, repeated_failure(2)": await scenario(base_url, "forbidden", max_turns=cap,
                                                       stops=[stops.repeated_failure(2)]),
        "recover (a fixable error), descriptive": await scenario(base_url, "recover", max_turns=recover_cap,
                                                                 tool_errors="descriptive"),
    }
    chapter = runs["chapter: the turn cap is the floor"].state.own_cost_usd
    table = pd.DataFrame([{"run": k, "status": o.state.status, "turns": o.state.turns,
                           "tool_runs": o.state.tool_runs, "in": o.state.prompt_tokens,
                           "cost_usd": round(o.state.own_cost_usd, 6),
                           "share_of_chapter_run": round(o.state.own_cost_usd / chapter, 3),
                           "why it ended": o.state.error or (o.state.interruption or {}).get("type")
                           or o.state.output or ""} for k, o in runs.items()]).set_index("run")
    keys = {"chapter: the turn cap is the floor": "chapter", "tool marks it permanent + permanent_error()": "marked",
            "no mark, repeated_failure(2)": "repeated", "recover (a fixable error), descriptive": "recover"}
    measured = {}
    for label, key in keys.items():
        s = runs[label].state
        measured.update({f"perm.{key}.status": s.status, f"perm.{key}.turns": s.turns,
                         f"perm.{key}.cost": round(s.own_cost_usd, 6)})
    return PermanentErrors(table, runs, measured)


def permanent_plot(table: pd.DataFrame) -> Figure:
    """The forbidden run's cost, ended by the turn cap and by the new conditions, beside the recovered run."""
    fig, (ax,) = _figure(8.5, 3.0)
    with style():
        colors = [GREY, BLUE, BLUE, ORANGE]
        bars = ax.barh(list(table.index)[::-1], list(table["cost_usd"])[::-1], color=colors[::-1])
        for bar, (_, row) in zip(bars, list(table.iterrows())[::-1]):
            ax.annotate(f"${row['cost_usd']:.6f}, {row['turns']} turn{'s' if row['turns'] != 1 else ''}, "
                        f"{row['status']}", (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.set_xlabel("cost (USD)")
        ax.set_xlim(0, table["cost_usd"].max() * 2.3)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        ax.set_title("Ended by the turn cap, or by its reason")
        ax.grid(axis="x", alpha=0.3)
        ax.grid(axis="y", visible=False)
    return fig
