"""Notebook 07, approval: the run that stops to ask, and three verdicts on it.

The notebook writes the gate, ``approve`` and ``reject`` in its cells and decides the stopped run three ways,
through its loop and through ``harness_lib``; this module turns the library's runs into the table and the figures
beside the chapter's (``verdict_table``, ``approval_figures``), which ``approval`` (the report's and the tests' way
to measure the section) shares with it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, NamedTuple

import pandas as pd

from ..state import RunState, approve, reject
from ..trace import Trace
from ..workspace import Workspace
from . import params
from .common import Measured, continue_run, scenario
from .language import C_, _
from .stop_button import all_or_nothing

REJECT_REASON = "I only asked which file mentions a timeout; do not delete anything."
PARAMETERS = {"REASON": params.Words()}
VERDICTS = ("approve", C_("label", "reject with a reason"), C_("label", "reject with nothing"))   # rows of a table


class Approval(NamedTuple):
    """07: the run that stops for approval, and what each verdict leads to."""
    stopped: Any            # the run as it stopped (``Outcome``)
    table: pd.DataFrame     # indexed by verdict: turns, deleted files, the slot's text, the answer
    measured: Measured


def stop_line(state: RunState) -> str:
    """The chapter's line for a run stopped to ask: ``turn 2: interrupted / approval -> delete_file({...})``."""
    i = state.interruption or {}
    args = json.dumps(i.get("args"), separators=(",", ":"), ensure_ascii=False)
    return f"turn {state.turns}: {state.status} / {i.get('type')} -> {i.get('toolName')}({args})"


def verdict_table(verdicts: dict[str, RunState], workspaces: dict[str, Workspace], call_id: str) -> pd.DataFrame:
    """One row per verdict: turns, the files deleted, what the call's slot says, and what the agent then said."""
    return pd.DataFrame([{"verdict": k, "turns": s.turns, "deleted": workspaces[k].deleted,
                          _("the slot says"): next((m["content"] for m in s.messages
                                                    if m.get("tool_call_id") == call_id), None),
                          _("the agent then says"): s.output} for k, s in verdicts.items()]).set_index("verdict")


def approval_figures(stopped: RunState, deleted_before: list[str], verdicts: dict[str, RunState],
                     workspaces: dict[str, Workspace]) -> Measured:
    """The chapter's figures: the stop, the files deleted before any verdict, and each verdict's run (found by
    the names of ``VERDICTS``; one that is not there is left out)."""
    measured: Measured = {"approval.stop": stop_line(stopped), "approval.deleted_before": deleted_before}
    for key, verdict in (("approve", "approve"), ("reject", "reject with a reason"), ("silent", "reject with nothing")):
        if verdict in verdicts:
            s = verdicts[verdict]
            measured.update({f"{key}.turns": s.turns, f"{key}.deleted": workspaces[verdict].deleted,
                             f"{key}.answer": s.output})
    measured.pop("silent.turns", None)  # the chapter printed no turns for the silent rejection
    return measured


@all_or_nothing
async def approval(base_url: str, reason: str = REJECT_REASON) -> Approval:
    """The notebook's runs, measured here: ``destructive`` stops to ask; three copies of it, decided three ways."""
    params.check(PARAMETERS, REASON=reason)
    stopped = await scenario(base_url, "destructive")
    call_id = stopped.state.interruption["callId"]
    outs = {}
    for verdict in VERDICTS:
        out = dataclasses.replace(stopped, state=copy.deepcopy(stopped.state), workspace=Workspace.copy_of(),
                                  trace=Trace(timestamps=False))
        if verdict == "approve":
            approve(out.state, call_id)
        else:
            reject(out.state, call_id, reason, silent=verdict == "reject with nothing")
        outs[verdict] = await continue_run(base_url, out)
    states = {k: o.state for k, o in outs.items()}
    workspaces = {k: o.workspace for k, o in outs.items()}
    return Approval(stopped, verdict_table(states, workspaces, call_id),
                    approval_figures(stopped.state, stopped.workspace.deleted, states, workspaces))
