"""Notebook 07, approval: the run that stops to ask, and three verdicts on it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd

from ..state import approve, reject
from . import params
from .common import Measured, continue_run, scenario
from .stop_button import all_or_nothing


class Approval(NamedTuple):
    """07: the run that stops for approval, and what each verdict leads to."""
    stopped: Any            # the run as it stopped (``Outcome``)
    table: pd.DataFrame     # indexed by verdict: turns, deleted files, the slot's text, the answer
    measured: Measured


REJECT_REASON = "I only asked which file mentions a timeout; do not delete anything."


@all_or_nothing
async def approval(base_url: str, reason: str = REJECT_REASON) -> Approval:
    params.text("REASON", reason)
    stopped = await scenario(base_url, "destructive")
    i = stopped.state.interruption
    verdicts = {}
    for verdict in ("approve", "reject with a reason", "reject with nothing"):
        out = await scenario(base_url, "destructive")
        call_id = out.state.interruption["callId"]
        if verdict == "approve":
            approve(out.state, call_id)
        else:
            reject(out.state, call_id, reason, silent=verdict == "reject with nothing")
        verdicts[verdict] = await continue_run(base_url, out)
    table = pd.DataFrame([{"verdict": k, "turns": o.state.turns, "deleted": o.workspace.deleted,
                           "the slot says": next(m["content"] for m in o.state.messages
                                                 if m.get("tool_call_id") == i["callId"]),
                           "the agent then says": o.state.output} for k, o in verdicts.items()]).set_index("verdict")
    args = "{" + ",".join(f'"{k}":"{v}"' for k, v in i["args"].items()) + "}"
    measured = {"approval.stop": f"turn {stopped.state.turns}: {stopped.state.status} / {i['type']} -> "
                                 f"{i['toolName']}({args})",
                "approval.deleted_before": stopped.workspace.deleted}
    for key, verdict in (("approve", "approve"), ("reject", "reject with a reason"), ("silent", "reject with nothing")):
        o = verdicts[verdict]
        measured.update({f"{key}.turns": o.state.turns, f"{key}.deleted": o.workspace.deleted,
                         f"{key}.answer": o.state.output})
    measured.pop("silent.turns")
    return Approval(stopped, table, measured)
