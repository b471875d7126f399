"""Notebook 06, repeats and the dedupe cache: what a repeated call costs, and a cache on a tool that writes.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from . import params
from .common import Measured, Outcome, approving, scenario
from .stop_button import all_or_nothing


class Dedupe(NamedTuple):
    """06: repeated reads with and without the cache, and the naive cache on a write."""
    table: pd.DataFrame     # the repeated-read runs: their costs
    writes: pd.DataFrame    # delete_twice under each cache: how often delete_file really ran
    measured: Measured


@all_or_nothing
async def try_dedupe(base_url: str, scenario_name: str = "delete_twice", dedupe_mode: str = "all") -> Outcome:
    """06's "your turn": ``scenario_name`` under ``dedupe_mode``, approving every call that asks."""
    from ..loop import DEDUPE
    from ..scripted.scripts import SCRIPTS
    params.one_of("TRY_SCENARIO", scenario_name, [s for s in SCRIPTS if s not in ("slow", "delegate")])
    params.one_of("TRY_DEDUPE", dedupe_mode, DEDUPE)
    return await approving(base_url, scenario_name, dedupe=dedupe_mode, max_turns=20)


@all_or_nothing
async def dedupe(base_url: str) -> Dedupe:
    runs = {"baseline (one read)": await scenario(base_url, "direct"),
            "repeated read, no cache": await scenario(base_url, "repeat"),
            "repeated read, read-only cache": await scenario(base_url, "repeat", dedupe="read-only")}
    table = pd.DataFrame([{"run": k, **o.row} for k, o in runs.items()]).set_index("run")
    base = table.loc["baseline (one read)", "cost_usd"]
    extra = table.loc["repeated read, no cache", "cost_usd"] - base
    cached_extra = table.loc["repeated read, read-only cache", "cost_usd"] - base
    writes = {"naive cache on every tool": await approving(base_url, "delete_twice", dedupe="all"),
              "cache only on read-only tools": await approving(base_url, "delete_twice", dedupe="read-only")}
    wtable = pd.DataFrame([{"run": k, "turns": o.state.turns, "tool_runs": o.state.tool_runs,
                            "delete_file ran on": o.workspace.delete_runs, "files removed": o.workspace.deleted}
                           for k, o in writes.items()]).set_index("run")
    naive, gate = writes["naive cache on every tool"], writes["cache only on read-only tools"]
    measured = {"repeat.extra": round(extra, 6), "repeat.increase": round(100 * extra / base),
                "repeat.cache_saves": round(extra - cached_extra, 6),
                "naive.turns": naive.state.turns, "naive.runs": naive.state.tool_runs,
                "naive.deleted": naive.workspace.delete_runs,
                "gate.turns": gate.state.turns, "gate.runs": gate.state.tool_runs,
                "gate.deleted": gate.workspace.delete_runs}
    return Dedupe(table, wtable, measured)
