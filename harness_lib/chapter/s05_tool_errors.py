"""Notebook 05, tool errors are context: one failure under three policies, an error no message can fix;
beyond the chapter, ending that run at once (a permanent mark, or a repeated failure).

The notebook writes the catch block and runs the policies in its cells; this module turns those runs into
the tables, the plots and the figures beside the chapter's (``policy_table``, ``tool_errors_figures``,
``permanent_table``), which ``tool_errors`` and ``permanent_errors`` (the report's and the tests' way to
measure the section) share with it.
"""

from __future__ import annotations

from typing import NamedTuple

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from .. import stops
from ..policy import POLICIES
from ..state import RunState
from ..tools import permanent_errors as mark_permanent
from ..workspace import Workspace
from . import params
from .checking import TURN_COUNT, dollars, plural
from .common import Measured, as_row, scenario
from .figures import relabel
from .language import C_, _, ngettext
from .plots import BLUE, GREY, ORANGE, _figure, style
from .stop_button import all_or_nothing

PARAMETERS = {"CAP": params.Whole(1, 200),            # recover answers at turn 4: any cap above that is the same run
              "PERMANENT_CAP": params.Whole(1, 100)}  # forbidden runs to its cap: 100 turns, 0.8 s a run
CHAPTER_CAP, CHAPTER_PERMANENT_CAP = 20, 12


class ToolErrors(NamedTuple):
    """05: the recover run under each tool-error policy, and the error no message can fix."""
    table: pd.DataFrame     # indexed by policy: the run, whether it answered, what the model read
    permanent: pd.DataFrame  # the forbidden run: a file the process may not open
    measured: Measured


class PermanentErrors(NamedTuple):
    """The forbidden run ended by the turn cap, by a permanent mark, by repeated failures."""
    table: pd.DataFrame     # one row per run: how and when it ended, its share of the chapter's cost
    runs: dict              # row label -> ``Outcome`` (state, workspace, trace)
    measured: Measured


def policy_table(runs: dict[str, RunState]) -> pd.DataFrame:
    """One row per policy (``{"fatal": state, ...}``): the run, whether it answered, what the model read."""
    return pd.DataFrame([{"policy": p, **as_row(s), "answered": "errors.log" in (s.output or ""),
                          C_("label", "what the model read"): _model_read(s)}
                         for p, s in runs.items()]).set_index("policy")


def forbidden_row(state: RunState) -> pd.DataFrame:
    return pd.DataFrame([{"run": "read a file the process may not open", **as_row(state),
                          "answer": state.output or ""}]).set_index("run")


def tool_errors_figures(runs: dict[str, RunState], cap: int = CHAPTER_CAP,
                        permanent_cap: int = CHAPTER_PERMANENT_CAP) -> Measured:
    """The section's figures from the runs ``{"fatal", "generic", "descriptive": recover under each policy
    (cap ``cap``), "forbidden": the forbidden run (cap ``permanent_cap``)}``. A figure measured under a cap the
    chapter did not use is relabelled as the reader's: the policies' under ``CAP``, the forbidden run's under
    ``PERMANENT_CAP``, and the ratio of the two under either."""
    fatal, desc, perm = runs["fatal"].own_cost_usd, runs["descriptive"].own_cost_usd, runs["forbidden"]
    answered = [p for p in POLICIES if "errors.log" in (runs[p].output or "")]
    errors = {"errors.ratio": float(desc / fatal), "errors.answers": ", ".join(answered)}
    forbidden = {"perm.turns": perm.turns, "perm.toolruns": perm.tool_runs, "perm.in": perm.prompt_tokens,
                 "perm.cost": perm.own_cost_usd, "perm.status": perm.status, "perm.answer": perm.output}
    ratio = {"perm.ratio": float(perm.own_cost_usd / desc)}
    caps = f"CAP={cap}, PERMANENT_CAP={permanent_cap}"
    return {**(errors if cap == CHAPTER_CAP else relabel(errors, f"CAP={cap}")),
            **(forbidden if permanent_cap == CHAPTER_PERMANENT_CAP else
               relabel(forbidden, f"PERMANENT_CAP={permanent_cap}")),
            **(ratio if (cap, permanent_cap) == (CHAPTER_CAP, CHAPTER_PERMANENT_CAP) else relabel(ratio, caps))}


@all_or_nothing
async def tool_errors(base_url: str, cap: int = CHAPTER_CAP, permanent_cap: int = CHAPTER_PERMANENT_CAP) -> ToolErrors:
    """The notebook's runs, measured here: recover under each policy, and the forbidden run."""
    params.check(PARAMETERS, CAP=cap, PERMANENT_CAP=permanent_cap)
    runs = {p: (await scenario(base_url, "recover", tool_errors=p, max_turns=cap)).state for p in POLICIES}
    runs["forbidden"] = (await scenario(base_url, "forbidden", max_turns=permanent_cap)).state
    return ToolErrors(policy_table({p: runs[p] for p in POLICIES}), forbidden_row(runs["forbidden"]),
                      tool_errors_figures(runs, cap, permanent_cap))


def policy_story(table: pd.DataFrame) -> str:
    """05's conclusion, in words computed from its table (Markdown)."""
    answered = list(table.index[table["answered"]])
    costs = ", ".join(f"`{p}` `${c:.6f}`" for p, c in table["cost_usd"].items())  # code: no "$" math
    if not answered:
        d = table.loc["descriptive"]
        return ngettext("No policy got to an answer ({costs}): even the `descriptive` run ended `{status}` after "
                        "{turns} turn, before it could use what the error told it. Try a larger `CAP`.",
                        "No policy got to an answer ({costs}): even the `descriptive` run ended `{status}` after "
                        "{turns} turns, before it could use what the error told it. Try a larger `CAP`.",
                        d["turns"]).format(
            costs=costs, status=d["status"], turns=d["turns"])
    # TRANSLATORS: joins two or three names: `fatal` and `descriptive`
    who = _(" and ").join(f"`{p}`" for p in answered)
    line = _("Only {who} got to an answer ({costs}).").format(who=who, costs=costs)
    if "generic" not in answered:
        line += " " + _("The `generic` policy keeps the loop alive and still loses, because the one thing the model "
                        "needed, the hint in the error text, never reached it.")
    return line


def _model_read(state: RunState) -> str:
    """The first tool result, if the model was ever shown it (a run stopped by a fatal error never was)."""
    for i, m in enumerate(state.messages):
        if m["role"] == "tool":
            if any(later["role"] == "assistant" for later in state.messages[i + 1:]):
                return m["content"]
            return _("(nothing: the run stopped before the model saw the result)")
    return ""


def marked_tools(workspace: Workspace):
    """The workspace's tools, with ``read_file`` marking a refused path (``PermissionError``) permanent:
    no message to the model can make the process allowed to read it."""
    return [mark_permanent(t, PermissionError) if t.name == "read_file" else t for t in workspace.tools()]


PERMANENT_KEYS = {C_("label", "chapter: the turn cap is the floor"): "chapter",   # a table's rows
                  C_("label", "tool marks it permanent + permanent_error()"): "marked",
                  C_("label", "no mark, repeated_failure(2)"): "repeated",
                  C_("label", "recover (a fixable error), descriptive"): "recover"}


def permanent_table(runs: dict[str, RunState]) -> pd.DataFrame:
    """One row per run (the labels of ``PERMANENT_KEYS``, in that order): how and when it ended, and its cost
    as a share of the forbidden run the turn cap ended."""
    chapter = runs["chapter: the turn cap is the floor"].own_cost_usd
    return pd.DataFrame([{"run": k, "status": s.status, "turns": s.turns, "tool_runs": s.tool_runs,
                          "in": s.prompt_tokens, "cost_usd": round(s.own_cost_usd, 6),
                          "share_of_chapter_run": round(s.own_cost_usd / chapter, 3),
                          C_("label", "why it ended"): s.error or (s.interruption or {}).get("type") or s.output or ""}
                         for k, s in ((k, runs[k]) for k in PERMANENT_KEYS)]).set_index("run")


@all_or_nothing
async def permanent_errors(base_url: str, cap: int = CHAPTER_PERMANENT_CAP, recover_cap: int = CHAPTER_CAP
                           ) -> PermanentErrors:
    """The notebook's beyond-the-chapter runs, measured here: the forbidden run ended by the turn cap, by a
    permanent mark and by a repeated failure, beside the recover run."""
    params.check(PARAMETERS, CAP=recover_cap, PERMANENT_CAP=cap)
    ws = Workspace.copy_of()
    outs = {
        "chapter: the turn cap is the floor": await scenario(base_url, "forbidden", max_turns=cap),
        "tool marks it permanent + permanent_error()": await scenario(
            base_url, "forbidden", workspace=ws, tools=marked_tools(ws), max_turns=cap,
            stops=[stops.permanent_error()]),
        "no mark, repeated_failure(2)": await scenario(base_url, "forbidden", max_turns=cap,
                                                       stops=[stops.repeated_failure(2)]),
        "recover (a fixable error), descriptive": await scenario(base_url, "recover", max_turns=recover_cap,
                                                                 tool_errors="descriptive"),
    }
    runs = {label: out.state for label, out in outs.items()}
    measured = {}
    for label, key in PERMANENT_KEYS.items():
        s = runs[label]
        measured.update({f"perm.{key}.status": s.status, f"perm.{key}.turns": s.turns,
                         f"perm.{key}.cost": round(s.own_cost_usd, 6)})
    return PermanentErrors(permanent_table(runs), outs, measured)


def permanent_plot(table: pd.DataFrame) -> Figure:
    """The forbidden run's cost, ended by the turn cap and by the new conditions, beside the recovered run."""
    fig, (ax,) = _figure(8.5, 3.0)
    with style():
        colors = [GREY, BLUE, BLUE, ORANGE]
        bars = ax.barh(list(table.index)[::-1], list(table["cost_usd"])[::-1], color=colors[::-1])
        for bar, (_label, row) in zip(bars, list(table.iterrows())[::-1]):
            ax.annotate(f"{dollars(row['cost_usd'])}, {plural(row['turns'], TURN_COUNT)}, "
                        f"{row['status']}", (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.set_xlabel(_("cost (USD)"))
        ax.set_xlim(0, table["cost_usd"].max() * 2.3)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        ax.set_title(_("Ended by the turn cap, or by its reason"))
        ax.grid(axis="x", alpha=0.3)
        ax.grid(axis="y", visible=False)
    return fig
