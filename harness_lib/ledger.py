"""The run's ledger: what the operator gave a run and decided about it, beside its state file.

``<state_dir>/<run_id>.ledger.jsonl`` holds one JSON line per fact, appended and fsynced, never rewritten:

    {"type": "run", "instance", "workspace", "config", "model", "scenario"}    ``run`` gave the run these
    {"type": "config", "instance", "config"}             ``resume`` changed options, given to it
    {"type": "binding", "instance", "model", "scenario"} the model, recorded late (a ledger from before it was)
    {"type": "decision", "instance", "callId", "verdict": "approve" | "reject"}
    {"type": "spent", "instance", "turns", "costUsd", "totalCostUsd"}   where a process left the run (its own
                                                         spend, and with its children's, which its budget counts)

The state file says the same things and is what the loop reads; the ledger is what ``runs.py`` checks the
state file against before it acts. It is found by the run id the operator typed, never by anything the
state file says, so an edited state file cannot point the run at a folder the operator never gave it,
approve a call nobody approved, raise its own limits or forget what it has spent (the threat model in
docs/reliability.md). Every option and decision that changes what a run may do is bound to its latest value:
the budget, the caps, the model, the endpoint, the prices, the policies, the workspace, the approvals; an older value
is refused like any other edit. A run made and saved in-process by ``loop.run`` (a notebook, a test) has no
ledger: the first ``resume`` records what its state says (but never an approval its file lists), and checks
every later one against that. A run ``runs.start`` made (the command line's ``run``) always has one: its
ledger missing is refused, never bound again to what its file says then.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from . import files
from .config import read as read_config
from .pricing import dollars
from .state import RunState, state_path
from .terminal import visible
from .workspace import DATA_WORKSPACE


class LedgerError(RuntimeError):
    """The state file asks for something the operator's record does not allow."""


def ledger_path(state_dir: str | Path, run_id: str) -> Path:
    return state_path(state_dir, run_id).with_suffix(".ledger.jsonl")


def read(path: Path) -> list[dict]:
    try:
        lines = files.read(path, files.MAX_RECORD_BYTES, "a ledger").decode(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn last line: the fact it was writing was never relied on
        if isinstance(entry, dict):
            out.append(entry)
    return out


def append(state_dir: str | Path, state: RunState, kind: str, **fields) -> None:
    entry = {"type": kind, "instance": state.instance, **fields}
    fd = files.open_own(ledger_path(state_dir, state.run_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, in_place=True)
    with open(fd, "a") as f:
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _binding(state: RunState) -> dict:
    """What a run is bound to besides its options: the model it asks for and its scenario (``delegate``
    gives it a subagent tool). Neither can change on resume."""
    return {"model": state.model, "scenario": state.meta.get("scenario")}


def bind(state_dir: str | Path, state: RunState) -> None:
    """The operator gave this run its workspace, model and options (``run``)."""
    workspace = state.meta.get("workspace")
    if workspace is not None and Path(workspace).resolve() == DATA_WORKSPACE:
        raise LedgerError("the tools never act on data/workspace itself")
    append(state_dir, state, "run", workspace=workspace and str(Path(workspace).resolve()), config=state.config,
           **_binding(state))


def check(state_dir: str | Path, state: RunState, normal: Callable[[dict], dict] = read_config,
          given: str | None = None, saved_options: bool = True) -> None:
    """Refuse (``LedgerError``) a state file that disagrees with the run's ledger. ``normal`` puts a saved
    configuration in its current form (``config.read``: today's names, every option); ``given`` is the call
    this very command approves; ``saved_options``:
    the file held options of its own (the command line saves them with every run it makes; a run made
    in-process has none). The one case it
    mends instead: options the ledger recorded that the state file never got (``resume`` recorded a change
    and died before saving it), which it sets in ``state.config``."""
    path = ledger_path(state_dir, state.run_id)
    workspace = state.meta.get("workspace")
    if workspace is not None:
        if not isinstance(workspace, str) or not Path(workspace).is_dir():
            raise LedgerError(f"the run's workspace {visible(workspace)} is not a folder")
        if Path(workspace).resolve() == DATA_WORKSPACE:
            raise LedgerError("the state file points at data/workspace, which the tools never act on")
    entries = read(path)
    mine = [e for e in entries if e.get("instance") == state.instance]
    runs = [e for e in mine if e.get("type") == "run"]
    if not runs:
        if entries:
            raise LedgerError(f"the state file names run instance {visible(state.instance) or 'none'}, which "
                              f"{visible(path.name)} has no record of: the file was replaced or edited")
        if saved_options:  # the command line saves its options with every run it makes, and binds it first
            raise LedgerError(f"the run's ledger {visible(path.name)} is missing, and its state file says the "
                              f"command line made it: a run is never bound again to what its file says now; "
                              f"put the ledger back, or start a new run")
        bind(state_dir, state)  # made in-process, first seen by runs.resume: from now on, this is the record
        mine = runs = read(path)[-1:]
    given_ws = runs[-1].get("workspace")
    if (workspace and str(Path(workspace).resolve())) != given_ws:
        raise LedgerError(f"the state file points at {visible(workspace)}, but the run was given "
                          f"{visible(given_ws)}")
    bound = next((e for e in reversed(mine) if e.get("type") in ("run", "binding") and "model" in e), None)
    if bound is None:  # a ledger written before the model was recorded: recorded now, checked from now on
        append(state_dir, state, "binding", **_binding(state))
    elif changed := [k for k, v in _binding(state).items() if bound.get(k) != v]:
        said = ", ".join(f"{k} {_binding(state)[k]!r}, given {bound.get(k)!r}" for k in changed)
        raise LedgerError(f"the state file's {' and '.join(changed)} {'differ' if changed[1:] else 'differs'} from "
                          f"what the run was given "
                          f"({visible(said)}): a run's model is chosen when it starts, never in its file")
    _check_config(state, mine, normal)
    approved = {e.get("callId") for e in mine if e.get("type") == "decision" and e.get("verdict") == "approve"}
    if unapproved := [c for c in state.approved if c not in approved and c != given]:
        raise LedgerError(f"the state file lists {visible(', '.join(unapproved))} as approved, but no "
                          f"approval was given through `resume --approve`")
    spent = [e for e in mine if e.get("type") == "spent"]
    if spent and (state.turns < spent[-1].get("turns", 0) or state.own_cost_usd < spent[-1].get("costUsd", 0)):
        raise LedgerError(f"the state file records {state.turns} turns and ${dollars(state.own_cost_usd)}, less "
                          f"than the {spent[-1].get('turns')} turns and ${dollars(spent[-1].get('costUsd', 0))} "
                          f"already spent")
    if spent and state.total_cost_usd < spent[-1].get("totalCostUsd", 0):  # the subagents' spend forgotten
        raise LedgerError(f"the state file records ${dollars(state.total_cost_usd)} with its subagents' runs, less "
                          f"than the ${dollars(spent[-1].get('totalCostUsd', 0))} already spent")


def _check_config(state: RunState, mine: list[dict], normal: Callable[[dict], dict]) -> None:
    """The state's options are the latest the operator gave (``run``, then each ``resume`` that changed one).
    An older value is an edit like any other, refused: it may be the higher budget a resume lowered. Unless
    nothing was recorded after the latest change: then the process that recorded it died before the state
    file was saved with it (the ledger is written first), and the run goes on with the latest."""
    changes = [i for i, e in enumerate(mine) if e.get("type") in ("run", "config")]
    latest = normal(mine[changes[-1]].get("config") or {})
    if state.config == latest:
        return
    before = normal(mine[changes[-2]].get("config") or {}) if len(changes) > 1 else None
    if state.config == before and changes[-1] == len(mine) - 1:
        state.config = latest
        return
    changed = sorted(k for k in set(latest) | set(state.config) if latest.get(k) != state.config.get(k))
    raise LedgerError(f"the state file's options ({', '.join(changed)}) differ from the latest the run was "
                      f"given; change them with resume's own options, never in the file")
