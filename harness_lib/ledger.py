"""The operator's record beside a workspace: which runs it was given to, and what a person decided.

``<workspace>.runs.jsonl`` holds one JSON line per fact, appended and fsynced, never rewritten:

    {"type": "run", "runId", "instance", "config"}      run was given this folder, with these options
    {"type": "config", "runId", "instance", "config"}   resume changed the options, on the command line
    {"type": "decision", "runId", "instance", "callId", "verdict": "approve" | "reject"}
    {"type": "spent", "runId", "instance", "turns", "costUsd"}   where a process left the run

The state file says the same things, and is what the loop reads; the ledger is what the CLI checks the
state file against before it acts, so that an edited state file cannot point the run at a folder the
operator never gave it, approve a call nobody approved, raise its own limits, or forget what it has spent
(see the README's threat model). A workspace made by ``Workspace.copy_of`` starts with an empty ledger:
the first run to use it claims it.
"""

from __future__ import annotations

import json
import os

from .state import RunState
from .terminal import visible
from .workspace import DATA_WORKSPACE, Workspace


class LedgerError(RuntimeError):
    """The state file asks for something the operator's record does not allow."""


def read(ws: Workspace) -> list[dict]:
    try:
        lines = ws.ledger.read_text(errors="replace").splitlines()
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


def append(ws: Workspace, state: RunState, kind: str, **fields) -> None:
    entry = {"type": kind, "runId": state.run_id, "instance": state.instance, **fields}
    with open(ws.ledger, "a") as f:
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def bind(ws: Workspace, state: RunState) -> None:
    """The operator gave ``ws`` to this run (``run --workspace``, or a fresh copy)."""
    if ws.root == DATA_WORKSPACE:
        raise LedgerError("the tools never act on data/workspace itself")
    append(ws, state, "run", config=state.config)


def _mine(entries: list[dict], state: RunState) -> list[dict]:
    return [e for e in entries if e.get("runId") == state.run_id and e.get("instance") == state.instance]


def check(ws: Workspace, state: RunState, given: str | None = None) -> None:
    """Refuse (``LedgerError``) a state file that disagrees with the operator's record; claim a fresh
    harness-made workspace that no run has used yet. ``given``: the call approved by this very command."""
    where = visible(str(ws.root))
    if ws.root == DATA_WORKSPACE:
        raise LedgerError("the state file points at data/workspace, which the tools never act on")
    if not ws.ledger.exists():
        raise LedgerError(f"the state file points at {where}, which was never given to a run (no ledger "
                          f"{visible(ws.ledger.name)} beside it)")
    entries = read(ws)
    mine = _mine(entries, state)
    if not any(e.get("type") == "run" for e in mine):
        if any(e.get("type") == "run" for e in entries):
            raise LedgerError(f"the state file points at {where}, which was given to another run, not to "
                              f"run {state.run_id} (instance {state.instance or 'none'})")
        bind(ws, state)  # a harness-made copy nobody has used: this run claims it
        return
    configs = [e.get("config") for e in mine if e.get("type") in ("run", "config")]
    # The last change is recorded here before the state file is saved with it: a crash between the two
    # leaves the state one change behind, which is still a configuration the operator gave.
    if configs and state.config not in configs[-2:]:
        changed = sorted(k for k in set(configs[-1]) | set(state.config)
                         if configs[-1].get(k) != state.config.get(k))
        raise LedgerError(f"the state file's options ({', '.join(changed)}) differ from the ones the run was "
                          f"given; change them with resume's own options, never in the file")
    approved = {e.get("callId") for e in mine if e.get("type") == "decision" and e.get("verdict") == "approve"}
    if unapproved := [c for c in state.approved if c not in approved and c != given]:
        raise LedgerError(f"the state file lists {visible(', '.join(unapproved))} as approved, but no "
                          f"approval was given through `resume --approve`")
    spent = [e for e in mine if e.get("type") == "spent"]
    if spent and (state.turns < spent[-1].get("turns", 0) or state.cost_usd < spent[-1].get("costUsd", 0) - 1e-9):
        raise LedgerError(f"the state file records {state.turns} turns and ${state.cost_usd:.6f}, less than "
                          f"the {spent[-1].get('turns')} turns and ${spent[-1].get('costUsd'):.6f} already spent")
