"""Notebook 01, the loop: the chapter's plan run, its transcript, and what each turn's request is made of.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd
from matplotlib.figure import Figure

from ..state import RunState
from ..tokens import compact, count
from . import params
from .common import Measured, scenario
from .figures import relabel
from .language import _, number
from .plots import PURPLE, ROLE_COLORS, _figure, style
from .stop_button import all_or_nothing

PARAMETERS = {"MAX_TURNS": params.Whole(1, 1000)}


class LoopPlan(NamedTuple):
    """01: the plan run, timed once warm."""
    outcome: Any            # the run (``common.Outcome``: state, workspace, wall_ms, trace)
    transcript: pd.DataFrame  # one row per message the run holds
    measured: Measured


def transcript(state: RunState) -> pd.DataFrame:
    """One row per message: its role, and its text or the calls it asks for."""
    return pd.DataFrame([{"#": i, "role": m["role"],
                          "what": m.get("content") if m.get("content") is not None else
                          ", ".join(f'{c["function"]["name"]}({c["function"]["arguments"]})'
                                    for c in m.get("tool_calls", []))}
                         for i, m in enumerate(state.messages)]).set_index("#")


def plan_figures(state: RunState, wall_ms: float, max_turns: int = 20) -> Measured:
    """The figures of the chapter's plan run line, from a run of ``plan``; under another cap, relabelled as
    the reader's (the chapter printed them for cap 20)."""
    measured = {"plan.turns": state.turns, "plan.tools": state.tool_runs, "plan.in": state.prompt_tokens,
                "plan.out": state.completion_tokens, "plan.cost": state.own_cost_usd, "plan.status": state.status,
                "plan.answer": state.output, "plan.prompts": [t["prompt_tokens"] for t in state.per_turn],
                "plan.ms": round(wall_ms)}
    return measured if max_turns == 20 else relabel(measured, f"MAX_TURNS={max_turns}")


@all_or_nothing
async def loop_plan(base_url: str, max_turns: int = 20) -> LoopPlan:
    """The plan run. Timed once warm: the first run of a process also pays for imports and the first
    connection, which is not what the chapter's ``ms=89`` measures."""
    max_turns = PARAMETERS["MAX_TURNS"].check("MAX_TURNS", max_turns)
    await scenario(base_url, "plan", max_turns=max_turns)
    out = await scenario(base_url, "plan", max_turns=max_turns)
    return LoopPlan(out, transcript(out.state).reset_index(), plan_figures(out.state, out.wall_ms, max_turns))


def request_parts(state: RunState, tool_schemas: list[dict]) -> pd.DataFrame:
    """What each turn's request was made of, in prompt tokens: the tool schemas, then every message
    sent so far. A message's share is what adding it to the JSON array added (so the parts of a turn
    sum exactly to the prompt tokens the provider billed; BPE merges across ``}]`` make a message's
    share differ by a token from one turn to the next)."""
    asked = [i for i, m in enumerate(state.messages) if m.get("role") == "assistant"]
    rows = []
    for turn, end in enumerate(asked, 1):
        sent = state.messages[:end]
        rows.append({"turn": turn, "part": "tool schemas", "role": "tool schemas",
                     "tokens": count(compact(tool_schemas)) if tool_schemas else 0})
        before = 0
        for i in range(len(sent)):
            now = count(compact(sent[:i + 1]))
            rows.append({"turn": turn, "part": f"#{i} {sent[i]['role']}", "role": sent[i]["role"],
                         "tokens": now - before})
            before = now
    return pd.DataFrame(rows)


def _shown(part: str) -> str:
    """A part of a request as the plot names it: the tool schemas in the language spoken; a message (``#2 tool``)
    by its number and role, which are the API's."""
    return _("tool schemas") if part == "tool schemas" else part


def request_parts_plot(parts: pd.DataFrame) -> Figure:
    """Stacked bars, one per turn: the prompt tokens of each request, split into the tool schemas and
    every message sent so far (``request_parts``)."""
    fig, (ax,) = _figure(7.0, 3.8)
    with style():
        turns = sorted(parts["turn"].unique())
        labelled = set()
        for turn in turns:
            bottom = 0
            for row in parts[parts["turn"] == turn].itertuples():
                label = _shown(row.role) if row.role not in labelled else None
                labelled.add(row.role)
                ax.bar(turn, row.tokens, bottom=bottom, width=0.6, color=ROLE_COLORS.get(row.role, PURPLE),
                       edgecolor="white", linewidth=0.8, label=label)
                if row.tokens >= 18:  # too thin to hold a label otherwise
                    ax.text(turn, bottom + row.tokens / 2, _shown(row.part), ha="center", va="center", fontsize=7.5,
                            color="black" if row.role == "tool schemas" else "white")
                bottom += row.tokens
            ax.annotate(number(bottom), (turn, bottom), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontweight="bold")
        ax.set_xticks(turns, [_("turn {n}").format(n=t) for t in turns])
        ax.set_ylabel(_("prompt tokens sent"))
        ax.set_title(_("Every turn resends everything before it"))
        ax.legend(loc="upper left")
        ax.set_ylim(0, parts.groupby("turn")["tokens"].sum().max() * 1.15)
    return fig
