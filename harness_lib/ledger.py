"""The run's ledger: what the operator gave a run and decided about it, beside its state file.

``<state_dir>/<run_id>.ledger.jsonl`` holds one JSON line per fact, appended and fsynced, never rewritten:

    {"type": "run", "instance", "workspace", "config"}   ``run`` gave the run this folder and these options
    {"type": "config", "instance", "config"}             ``resume`` changed options, on its command line
    {"type": "decision", "instance", "callId", "verdict": "approve" | "reject"}
    {"type": "spent", "instance", "turns", "costUsd", "totalCostUsd"}   where a process left the run (its own
                                                         spend, and with its children's, which its budget counts)

The state file says the same things and is what the loop reads; the ledger is what the CLI checks the
state file against before it acts. It is found by the run id the operator typed, never by anything the
state file says, so an edited state file cannot point the run at a folder the operator never gave it,
approve a call nobody approved, raise its own limits or forget what it has spent (the README's threat
model). A run made and saved in-process (a notebook, a test) has no ledger: the first ``resume`` records
what its state says, and checks every later one against that.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from . import files
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


def bind(state_dir: str | Path, state: RunState) -> None:
    """The operator gave this run its workspace and options (``run``)."""
    workspace = state.meta.get("workspace")
    if workspace is not None and Path(workspace).resolve() == DATA_WORKSPACE:
        raise LedgerError("the tools never act on data/workspace itself")
    append(state_dir, state, "run", workspace=workspace and str(Path(workspace).resolve()), config=state.config)


def check(state_dir: str | Path, state: RunState, normal: Callable[[dict], dict], given: str | None = None) -> None:
    """Refuse (``LedgerError``) a state file that disagrees with the run's ledger. ``normal`` puts a saved
    configuration in its current form; ``given`` is the call this very command approves."""
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
        bind(state_dir, state)  # made in-process, first seen by the CLI: from now on, this is the record
        return
    given_ws = runs[-1].get("workspace")
    if (workspace and str(Path(workspace).resolve())) != given_ws:
        raise LedgerError(f"the state file points at {visible(workspace)}, but the run was given "
                          f"{visible(given_ws)}")
    configs = [normal(e.get("config") or {}) for e in mine if e.get("type") in ("run", "config")]
    # A change is recorded here before the state file is saved with it: a crash between the two leaves
    # the state one change behind, which is still a configuration the operator gave.
    if state.config not in configs[-2:]:
        changed = sorted(k for k in set(configs[-1]) | set(state.config)
                         if configs[-1].get(k) != state.config.get(k))
        raise LedgerError(f"the state file's options ({', '.join(changed)}) differ from the ones the run was "
                          f"given; change them with resume's own options, never in the file")
    approved = {e.get("callId") for e in mine if e.get("type") == "decision" and e.get("verdict") == "approve"}
    if unapproved := [c for c in state.approved if c not in approved and c != given]:
        raise LedgerError(f"the state file lists {visible(', '.join(unapproved))} as approved, but no "
                          f"approval was given through `resume --approve`")
    spent = [e for e in mine if e.get("type") == "spent"]
    if spent and (state.turns < spent[-1].get("turns", 0) or state.own_cost_usd < spent[-1].get("costUsd", 0) - 1e-9):
        raise LedgerError(f"the state file records {state.turns} turns and ${state.own_cost_usd:.6f}, less than "
                          f"the {spent[-1].get('turns')} turns and ${spent[-1].get('costUsd'):.6f} already spent")
    if spent and state.total_cost_usd < spent[-1].get("totalCostUsd", 0) - 1e-9:  # the subagents' spend forgotten
        raise LedgerError(f"the state file records ${state.total_cost_usd:.6f} with its subagents' runs, less than "
                          f"the ${spent[-1].get('totalCostUsd'):.6f} already spent")
