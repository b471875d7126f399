"""Notebook 00, the scripted provider: its catalogue of scripts, and a run that moves servers half-way. The
notebook writes the provider itself (a script's reply and its bill, served without HTTP) in its own cells.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from ..scripted import ScriptedProvider
from . import params
from .common import SCENARIOS_THAT_FINISH, approving, scenario
from .language import _
from .stop_button import all_or_nothing

PARAMETERS = {"SCENARIO": params.OneOf(SCENARIOS_THAT_FINISH),   # a script that ends without a turn cap
              "SWITCH_AFTER_TURNS": params.Whole(1, 19)}         # turns on the first server (the run's cap is 20)


class SwitchServers(NamedTuple):
    """00: one run moved from a server to a brand-new one."""
    first_leg: str          # how the first leg ended on the first server ("status=..., turns=...")
    table: pd.DataFrame     # the moved run beside the same run on one server throughout


def script_catalogue() -> pd.DataFrame:
    from ..scripted import scripts
    return pd.DataFrame({"scenario": list(scripts.SCRIPTS),
                         _("what it does"): [str(_(f.__doc__.splitlines()[0])) for f in scripts.SCRIPTS.values()]}
                        ).set_index("scenario")


@all_or_nothing
async def switch_servers(base_url: str, scenario_name: str = "plan", switch_after_turns: int = 2) -> SwitchServers:
    """Run ``scenario_name`` for ``switch_after_turns`` turns on one server, shut it down, finish the same
    state on a brand-new server; beside it, the same run on one server throughout."""
    params.check(PARAMETERS, SCENARIO=scenario_name, SWITCH_AFTER_TURNS=switch_after_turns)
    with ScriptedProvider() as first:
        half = await scenario(first.base_url, scenario_name, max_turns=switch_after_turns)
    first_leg = f"status={half.state.status}, turns={half.state.turns}"
    with ScriptedProvider() as second:
        moved = await approving(second.base_url, scenario_name, state=half.state, workspace=half.workspace,
                                trace=half.trace, max_turns=20)
    whole = await approving(base_url, scenario_name, max_turns=20)
    table = pd.DataFrame([{"run": _("two servers, one after the other"), **moved.row},
                          {"run": _("one server throughout"), **whole.row}]).set_index("run")
    return SwitchServers(first_leg, table)
