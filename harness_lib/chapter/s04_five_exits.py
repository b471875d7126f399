"""Notebook 04, five exits: one run per exit, and the resumable ones continued.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import pandas as pd

from ..scripted import ScriptedProvider
from ..state import approve
from . import params
from .common import MAX_CAP, cancel_after, scenario
from .stop_button import all_or_nothing


class FiveExits(NamedTuple):
    """04: one run per exit of the loop."""
    table: pd.DataFrame     # one row per run: status, interruption, resumable, error
    runs: dict              # row label -> ``Outcome``, for ``resume_the_resumable``


class Resumed(NamedTuple):
    """04: two of ``five_exits``'s runs continued (copies of them)."""
    raised: Any             # the capped runaway, continued with its cap raised (``Outcome``)
    approved: Any           # the run that stopped for approval, its call approved (``Outcome``)


@all_or_nothing
async def five_exits(base_url: str) -> FiveExits:
    outs = {
        "plan, cap 20": await scenario(base_url, "plan", max_turns=20),
        "runaway, cap 8": await scenario(base_url, "runaway", max_turns=8),
        "runaway, budget $0.010": await scenario(base_url, "runaway", max_budget_usd=0.010),
        "destructive (needs approval)": await scenario(base_url, "destructive"),
        "slow, Stop at 0.3 s": await cancel_after(scenario(base_url, "slow"), 0.3),
    }
    with ScriptedProvider() as bad:
        bad.inject("401")
        outs["plan, provider answers 401"] = await scenario(bad.base_url, "plan")
    rows = [{"run": k, "status": o.state.status, "interruption": (o.state.interruption or {}).get("type", ""),
             "resumable": o.state.resumable, "turns": o.state.turns, "cost_usd": round(o.state.own_cost_usd, 6),
             "error": o.state.error or ""} for k, o in outs.items()]
    return FiveExits(pd.DataFrame(rows), outs)


@all_or_nothing
async def resume_the_resumable(base_url: str, outs: dict, raised_cap: int = 10) -> Resumed:
    """Continue copies of two of ``five_exits``'s runs: the capped one with its cap raised, the one that
    stopped for approval with its call approved. Copies, so the cell can be run again and again."""
    raised_cap = params.whole_number("RAISED_CAP", raised_cap, 1, MAX_CAP)
    capped = outs["runaway, cap 8"]
    more = await scenario(base_url, "runaway", state=copy.deepcopy(capped.state), max_turns=raised_cap)
    waiting = outs["destructive (needs approval)"]
    state = copy.deepcopy(waiting.state)
    approve(state, state.interruption["callId"])
    # The same workspace: a second approval of the same call is answered from delete_file's journal.
    approved = await scenario(base_url, "destructive", state=state, workspace=waiting.workspace)
    return Resumed(more, approved)
