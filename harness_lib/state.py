"""A run is a plain, serialisable object; the loop is a function over it.

Everything needed to continue a run lives here: the transcript, the counters, the status and why it
stopped, and the decisions a person made about tool calls. ``save`` never leaves a torn file (write a
temporary file, flush, fsync, rename), and ``load`` names the file when it cannot read it.

A file that says ``running`` belongs to a process that died mid-run (or is still running: there is no
lock). Such a run is ``continuable`` like a resumable one, and the loop picks up where the last save left it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import crashpoint

STATE_VERSION = 1
STATUSES = ("running", "completed", "failed", "max_turns_exceeded", "budget_exceeded", "interrupted")
RESUMABLE = {"max_turns_exceeded", "budget_exceeded", "interrupted"}
CONTINUABLE = RESUMABLE | {"running"}  # "running" on disk: the process that ran it died


@dataclass
class RunState:
    run_id: str
    model: str
    messages: list[dict]
    status: str = "running"
    interruption: dict | None = None
    turns: int = 0
    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    per_turn: list[dict] = field(default_factory=list)    # {prompt_tokens, completion_tokens, cost_usd}
    tool_log: list[dict] = field(default_factory=list)    # {callId, toolName, args, ok, cached, ms}
    approved: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # call id -> what the transcript slot says
    started: list[str] = field(default_factory=list)      # write calls begun (saved before they run)
    subruns: list[dict] = field(default_factory=list)     # children's {runId, status, turns, cost_usd}
    output: str | None = None
    error: str | None = None
    meta: dict = field(default_factory=dict)              # free-form: scenario, workspace, ...
    version: int = STATE_VERSION

    # -- what can be derived is derived -----------------------------------------------------------
    @property
    def tool_runs(self) -> int:
        return sum(1 for r in self.tool_log if not r.get("cached") and not r.get("rejected"))

    @property
    def subrun_cost_usd(self) -> float:
        return round(sum(s.get("cost_usd", 0.0) for s in self.subruns), 12)

    @property
    def total_cost_usd(self) -> float:
        return round(self.cost_usd + self.subrun_cost_usd, 12)

    @property
    def resumable(self) -> bool:
        return self.status in RESUMABLE

    @property
    def continuable(self) -> bool:
        """Resumable, or left ``running`` by a process that died: ``resume`` continues both."""
        return self.status in CONTINUABLE

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunState":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def new_run(system: str, task: str, model: str, run_id: str | None = None) -> RunState:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    return RunState(run_id=run_id or uuid.uuid4().hex[:12], model=model, messages=messages)


def pending(state: RunState) -> list[dict]:
    """Tool calls the model asked for that have no answer in the transcript yet."""
    if not state.messages or state.messages[-1].get("role") not in ("assistant", "tool"):
        return []
    last_assistant = next((m for m in reversed(state.messages) if m.get("role") == "assistant"), None)
    if last_assistant is None:
        return []
    answered = {m.get("tool_call_id") for m in state.messages if m.get("role") == "tool"}
    return [c for c in (last_assistant.get("tool_calls") or []) if c.get("id") not in answered]


# -- decisions a person makes ------------------------------------------------------------------------
class DecisionError(ValueError):
    """An approval or rejection that does not fit the run (no such pending call, already decided...)."""


def _check_decidable(state: RunState, call_id: str):
    if state.status not in CONTINUABLE:
        raise DecisionError(f"run {state.run_id} is {state.status}: there is nothing to approve or reject")
    if call_id in state.approved or call_id in state.rejected:
        verdict = "approved" if call_id in state.approved else "rejected"
        raise DecisionError(f"call {call_id!r} was already {verdict} in run {state.run_id}")
    ids = [c["id"] for c in pending(state)]
    if call_id not in ids:
        raise DecisionError(f"call {call_id!r} is not pending in run {state.run_id} (pending: {ids or 'none'})")


def approve(state: RunState, call_id: str) -> RunState:
    """Allow a pending call to run. Resuming the run then runs it: approval is the same code path."""
    _check_decidable(state, call_id)
    state.approved.append(call_id)
    return state


def rejection_text(reason: str | None) -> str:
    return f"The user declined this call: {reason}" if reason else "The user declined this call."


def reject(state: RunState, call_id: str, reason: str | None = None, *, silent: bool = False) -> RunState:
    """Refuse a pending call. The refusal is written into the transcript slot in words (with the
    reason, if any). ``silent=True`` leaves the slot empty, to show what a model does without words."""
    _check_decidable(state, call_id)
    state.rejected[call_id] = "" if silent else rejection_text(reason)
    return state


# -- persistence ------------------------------------------------------------------------------------
class StateFileError(RuntimeError):
    """A state file that cannot be used. Nothing is overwritten when this is raised."""


def state_path(directory: str | Path, run_id: str) -> Path:
    if not run_id or any(ch in run_id for ch in "/\\\0") or run_id.startswith("."):
        raise StateFileError(f"invalid run id {run_id!r}")
    return Path(directory) / f"{run_id}.json"


def save(state: RunState, directory: str | Path) -> Path:
    """Write the run atomically: a reader sees the old file or the new one, never half of one."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = state_path(directory, state.run_id)
    fd, tmp = tempfile.mkstemp(prefix=f".{state.run_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state.to_dict(), f, separators=(",", ":"), allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    crashpoint.reached("save")
    return path


def load(directory: str | Path, run_id: str) -> RunState:
    path = state_path(directory, run_id)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StateFileError(f"{path}: no such state file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise StateFileError(f"{path}: not valid JSON ({e}); the file is left as it is") from None
    except OSError as e:
        raise StateFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise StateFileError(f"{path}: expected a JSON object")
    if data.get("version") != STATE_VERSION:
        raise StateFileError(f"{path}: state version {data.get('version')!r}, this harness reads {STATE_VERSION}")
    problems = []
    if data.get("run_id") != run_id:
        problems.append(f"run_id is {data.get('run_id')!r}")
    if data.get("status") not in STATUSES:
        problems.append(f"status {data.get('status')!r} is not one of {STATUSES}")
    if not isinstance(data.get("messages"), list) or not all(isinstance(m, dict) for m in data["messages"]):
        problems.append("messages is not a list of objects")
    for key in ("turns", "prompt_tokens", "completion_tokens"):
        if not isinstance(data.get(key), int) or data[key] < 0:
            problems.append(f"{key} is not a non-negative integer")
    if not isinstance(data.get("cost_usd"), (int, float)) or not math.isfinite(data["cost_usd"]):
        problems.append("cost_usd is not a number")
    if not isinstance(data.get("model"), str):
        problems.append("model is not a string")
    for key, kind in (("approved", list), ("started", list), ("rejected", dict), ("tool_log", list),
                      ("per_turn", list), ("subruns", list), ("meta", dict)):
        if key in data and not isinstance(data[key], kind):
            problems.append(f"{key} is not a {kind.__name__}")
    if data.get("interruption") is not None and not isinstance(data["interruption"], dict):
        problems.append("interruption is not an object")
    if problems:
        raise StateFileError(f"{path}: " + "; ".join(problems))
    return RunState.from_dict(data)
