"""Notebook 04, five exits: what the notebook's cells need and do not show. A provider that refuses every request
(HTTP 401, as to a revoked key), and the table that lays the reader's loop and the library beside each other, exit
by exit.

The notebook writes the run as data, the loop that returns each exit, the hook that presses Stop once the slow
tool has started (an event of the run, not an instant a busy machine can move), and the runs, in its own cells.
"""

from __future__ import annotations

import threading

import pandas as pd

from ..scripted import ScriptedProvider
from . import params
from .common import as_row
from .language import _

# The capped runaway continued up to RAISED_CAP turns, by the reader's loop (a connection a turn) and the library.
PARAMETERS = {"RAISED_CAP": params.Whole(1, 50)}


class Refusing(ScriptedProvider):
    """The scripted provider, answering every request with HTTP 401 (the chapter's failed run: a key the provider
    no longer accepts). ``inject`` spends one fault a request; this one never runs out."""

    def __init__(self):
        super().__init__()
        self._server.next_fault = lambda: "401"  # the server's own fault queue, read per request


_refusing: Refusing | None = None
_lock = threading.Lock()


def refusing_url() -> str:
    """The base URL of a provider that answers 401 to everything: started once, for the kernel's lifetime, like
    ``ScriptedProvider.shared()``, so that every cell can be run again."""
    global _refusing
    with _lock:
        if _refusing is None:
            _refusing = Refusing().start()
        return _refusing.base_url


def exit_row(run) -> dict:
    """How a run ended, from a ``RunState`` or the notebook's own run (the same field names)."""
    why = run.interruption or {}
    return {"status": run.status, "interruption": why.get("type", ""), "resumable": run.resumable,
            **{k: v for k, v in as_row(run).items() if k != "status"}}


def _detail(run) -> tuple:
    """What an exit says beyond its type: the call an approval waits for, the reason a Stop gave, the answer, and
    whether there is an error (its text is each harness's own)."""
    return dict(run.interruption or {}), run.output, bool(run.error)


def exits_table(mine: dict, library: dict):
    """One row per exit, as ``harness_lib.run`` ended it, and whether the reader's loop ended it the same way (status,
    interruption and its fields, resumable, turns, tool runs, tokens, dollars, answer, an error or not). Prints
    a line saying so; returns the table for display."""
    rows, differ = [], []
    for label, state in library.items():
        row = exit_row(state)
        theirs = exit_row(mine[label]) if label in mine else None
        same = theirs == row and _detail(mine[label]) == _detail(state)
        if not same:
            differ.append(label)
        rows.append({"run": label, **row, "error": state.error or "",
                     _("your loop"): _("the same") if same else _("DIFFERS") if theirs else _("not run")})
    print(_("your loop and harness_lib.run end every run the same way") if not differ
          else _("your loop and harness_lib.run DIFFER on: {runs}").format(runs="; ".join(differ)))
    return params.table(pd.DataFrame(rows).set_index("run"))
