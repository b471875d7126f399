"""Notebook 06, repeats and the dedupe cache: what a repeated call costs, and a cache on a tool that writes.

The notebook writes the gate in its loop and runs ``RUNS`` in its cells, through its loop and through
``harness_lib``; this module turns the library's runs into the tables and the figures beside the chapter's
(``dedupe_tables``, ``dedupe_figures``), which ``dedupe`` (the report's and the tests' way to measure the section)
shares with it.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from ..dedupe import DEDUPE
from ..scripted.scripts import SCRIPTS
from ..state import RunState
from ..workspace import Workspace
from . import params
from .common import COMPARED, Measured, Outcome, approving, as_row
from .language import C_, _
from .stop_button import all_or_nothing

# slow is notebook 09's (3 s a run), delegate needs the subagent tool of notebook 13
TRY_SCRIPTS = tuple(s for s in SCRIPTS if s not in ("slow", "delegate"))
PARAMETERS = {"TRY_SCENARIO": params.OneOf(TRY_SCRIPTS), "TRY_DEDUPE": params.OneOf(DEDUPE)}

# The section's runs: label -> (script, dedupe). The figures are found by (script, dedupe), not by label.
RUNS = {C_("label", "baseline (one read)"): ("direct", "off"),   # a table's rows: translated where shown
        C_("label", "repeated read, no cache"): ("repeat", "off"),
        C_("label", "repeated read, read-only cache"): ("repeat", "read-only"),
        C_("label", "naive cache on every tool"): ("delete_twice", "all"),
        C_("label", "cache only on read-only tools"): ("delete_twice", "read-only")}


class Dedupe(NamedTuple):
    """06: repeated reads with and without the cache, and the naive cache on a write."""
    table: pd.DataFrame     # the repeated-read runs: their costs
    writes: pd.DataFrame    # delete_twice under each cache: how often delete_file really ran
    measured: Measured


def dedupe_tables(runs: dict, states: dict[str, RunState], workspaces: dict[str, Workspace]
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the runs that read, the runs that delete), one row per label of ``runs`` (label -> (script, dedupe)):
    the first with what they cost, the second with every path ``delete_file`` ran on and every file it removed."""
    reads = [{"run": k, "script": s, "dedupe": d, **as_row(states[k])} for k, (s, d) in runs.items()
             if s != "delete_twice"]
    removed = _("files removed")   # shown only: "delete_file ran on" names the tool, and stays as it is
    writes = [{"run": k, "dedupe": d, "turns": states[k].turns, "tool_runs": states[k].tool_runs,
               "delete_file ran on": workspaces[k].delete_runs, removed: workspaces[k].deleted}
              for k, (s, d) in runs.items() if s == "delete_twice"]
    return (pd.DataFrame(reads, columns=["run", "script", "dedupe", *COMPARED]).set_index("run"),
            pd.DataFrame(writes, columns=["run", "dedupe", "turns", "tool_runs", "delete_file ran on",
                                          removed]).set_index("run"))


def dedupe_figures(runs: dict, states: dict[str, RunState], workspaces: dict[str, Workspace]) -> Measured:
    """The chapter's figures from the runs it printed, found by (script, dedupe) among ``runs`` (label ->
    (script, dedupe)): a figure whose runs are not there is left out."""
    by = {how: (states[k], workspaces[k]) for k, how in runs.items()}
    measured: Measured = {}
    if all(how in by for how in (("direct", "off"), ("repeat", "off"), ("repeat", "read-only"))):
        base, again, cached = (by[how][0].own_cost_usd for how in (("direct", "off"), ("repeat", "off"),
                                                                      ("repeat", "read-only")))
        measured.update({"repeat.extra": round(again - base, 6), "repeat.increase": round(100 * (again - base) / base),
                         "repeat.cache_saves": round(again - cached, 6)})
    for key, how in (("naive", ("delete_twice", "all")), ("gate", ("delete_twice", "read-only"))):
        if how in by:
            state, workspace = by[how]
            measured.update({f"{key}.turns": state.turns, f"{key}.runs": state.tool_runs,
                             f"{key}.deleted": workspace.delete_runs})
    return measured


@all_or_nothing
async def try_dedupe(base_url: str, scenario_name: str = "delete_twice", dedupe_mode: str = "all") -> Outcome:
    """06's "your turn": ``scenario_name`` under ``dedupe_mode``, approving every call that asks."""
    params.check(PARAMETERS, TRY_SCENARIO=scenario_name, TRY_DEDUPE=dedupe_mode)
    return await approving(base_url, scenario_name, dedupe=dedupe_mode, max_turns=20)


@all_or_nothing
async def dedupe(base_url: str) -> Dedupe:
    """The notebook's ``RUNS`` through the library, each approved as a person would."""
    outs = {label: await approving(base_url, script, dedupe=mode) for label, (script, mode) in RUNS.items()}
    states = {k: o.state for k, o in outs.items()}
    workspaces = {k: o.workspace for k, o in outs.items()}
    return Dedupe(*dedupe_tables(RUNS, states, workspaces), dedupe_figures(RUNS, states, workspaces))
