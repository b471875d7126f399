"""A run is a plain, serialisable object; the loop is a function over it.

Everything needed to continue a run lives here: the transcript, the counters, the status and why it
stopped, and the decisions a person made about tool calls. ``save`` appends what changed to the run's
journal, or rewrites the whole run without ever leaving a torn file (temporary file, flush, fsync,
rename); ``load`` is the snapshot plus its journal (``journal.py``), and names the file it cannot use.

A file that says ``running`` belongs to a process that died mid-run, or to one still running it: the CLI
tells them apart by the run's lock (``lock.py``). A crashed run is ``continuable`` like a resumable one,
and the loop picks up where the last save left it.

``load`` checks the file whole (types, shapes, numbers, ids, counters that agree with the per-turn
record) and refuses, naming every problem, a file this harness did not write: a state file is input, and
the threat model (docs/reliability.md) says what even a well-formed but edited one can and cannot make the harness do.

Names. The state file's own fields are the dataclass's names, snake_case (``run_id``, ``tool_log``,
``per_turn``; the file keeps ``cost_usd`` for ``own_cost_usd``). Every record inside them (a tool_log entry,
a child's summary in ``subruns``, an interruption) and every trace line use the chapter's camelCase
(``runId``, ``callId``, ``toolName``, ``costUsd``, ``unknownOutcome``, ``cutReply``), except the API's token
counts, ``prompt_tokens`` and ``completion_tokens``, which keep the wire's spelling as the chapter's trace
does. A ``per_turn`` entry is a usage record, ``{prompt_tokens, completion_tokens, cost_usd}``: the
API's usage object with the turn's own price beside it in the same spelling, as the CLI's ``--json``
spells its usage. It stays snake_case on purpose: ``costUsd`` in the chapter's ``turn`` line is the run's
spend so far, a turn's own price is another number and gets another name. The keys of ``config`` are the
CLI's option names (``max_turns``, ``base_url``), and of ``rejected`` call ids: names, not fields. A file
saved before this rule (version 1) is read in the new names (``upgrade``) and saved in them.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, get_args

from . import files, journal, numbers, seam
from .journal import Bound
from .pricing import add

STATE_VERSION = 2  # 2: records in camelCase (``upgrade`` reads 1); a harness that reads 1 refuses a 2
READS = (1, 2)
Status = Literal["running", "completed", "failed", "max_turns_exceeded", "budget_exceeded", "interrupted"]
STATUSES: tuple[Status, ...] = get_args(Status)
RESUMABLE = {"max_turns_exceeded", "budget_exceeded", "interrupted"}
CONTINUABLE = RESUMABLE | {"running"}  # "running" on disk: the process that ran it died


@dataclass
class RunState:
    run_id: str
    model: str
    messages: list[dict]
    status: Status = "running"
    interruption: dict | None = None
    turns: int = 0
    own_cost_usd: float = 0.0                             # this run's own spend (the file's "cost_usd")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    per_turn: list[dict] = field(default_factory=list)    # {prompt_tokens, completion_tokens, cost_usd} (+ flags)
    tool_log: list[dict] = field(default_factory=list)    # {callId, toolName, args, signature, ok, ms} + flags
    # (rejected, cached, unknownOutcome, rerun, permanent: each present only when true)
    approved: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # call id -> what the transcript slot says
    started: list[str] = field(default_factory=list)      # write calls begun (saved before they run)
    subruns: list[dict] = field(default_factory=list)     # children's {runId, status, turns, costUsd, messages}
    output: str | None = None
    error: str | None = None
    meta: dict = field(default_factory=dict)              # free-form: scenario, workspace, ...
    config: dict = field(default_factory=dict)            # the options it was started with (the CLI's)
    instance: str = ""                                    # this run, not another one with the same id
    version: int = STATE_VERSION
    # Not saved, not copied: the journal this process's saves append to (``save`` binds it when it writes the
    # run whole). A copy, a pickle or a load of the run starts without one: its first save writes it whole.
    journal: Bound | None = field(default=None, init=False, repr=False, compare=False, metadata={"saved": False})

    def __getstate__(self) -> dict:  # copy.copy, copy.deepcopy, pickle: another object, not bound to the file
        return {**self.__dict__, "journal": None}

    # -- what can be derived is derived -----------------------------------------------------------
    @property
    def tool_runs(self) -> int:
        return sum(1 for r in self.tool_log if not r.get("cached") and not r.get("rejected"))

    @property
    def subrun_cost_usd(self) -> float:
        return add(*(s.get("costUsd", 0.0) for s in self.subruns))

    @property
    def total_cost_usd(self) -> float:
        return add(self.own_cost_usd, self.subrun_cost_usd)

    @property
    def resumable(self) -> bool:
        return self.status in RESUMABLE

    @property
    def continuable(self) -> bool:
        """Resumable, or left ``running`` by a process that died: ``resume`` continues both."""
        return self.status in CONTINUABLE

    def to_dict(self) -> dict:
        """The fields as the state file names them (copies)."""
        return copy.deepcopy(_fields(self))

    @classmethod
    def from_dict(cls, data: dict) -> "RunState":
        named = {_ATTRIBUTES.get(k, k): v for k, v in data.items()}
        return cls(**{k: v for k, v in named.items() if k in SAVED})


SAVED = tuple(f.name for f in fields(RunState) if f.metadata.get("saved", True))  # the file's fields
_FILE_NAMES = {"own_cost_usd": "cost_usd"}  # the attribute says whose spend; the file keeps its key
_ATTRIBUTES = {v: k for k, v in _FILE_NAMES.items()}


def new_run(system: str, task: str, model: str, run_id: str | None = None) -> RunState:
    """A new run. Its ``instance`` is a fresh nonce: a run id can be reused, an instance never is, so the
    idempotency keys of its writes cannot be answered from another run's journal."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    return RunState(run_id=run_id or uuid.uuid4().hex[:12], model=model, messages=messages,
                    instance=uuid.uuid4().hex[:16])


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


MAX_RUN_ID = 100  # a file name is at most 255 bytes; the run's files add a suffix to it
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+=-]*")


def check_run_id(run_id) -> str:
    """A run id names files: letters, digits and ``_.@+=-``, not starting with a dot, at most 100."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or len(run_id) > MAX_RUN_ID:
        from .terminal import visible
        shown = visible(run_id if isinstance(run_id, str) else repr(run_id))
        raise StateFileError(f"invalid run id {shown[:60]}{'...' if len(shown) > 60 else ''} "
                             f"({len(run_id) if isinstance(run_id, str) else 0} characters): use 1 to "
                             f"{MAX_RUN_ID} letters, digits or _.@+=- , not starting with a dot")
    return run_id


def state_path(directory: str | Path, run_id: str) -> Path:
    return Path(directory) / f"{check_run_id(run_id)}.json"


class DiskFullError(OSError):
    """The disk filled up while saving. The run's last state was still written, using the space its
    reserve file held (``reserve_path``), so no paid turn is lost; the run must stop now."""


def reserve_path(directory: str | Path, run_id: str) -> Path:
    return Path(directory) / f".{check_run_id(run_id)}.reserve"


def make_reserve(directory: str | Path, run_id: str, size: int) -> Path:
    """Set aside ``size`` bytes beside the state, for the save a full disk would otherwise refuse."""
    path = reserve_path(directory, run_id)
    fd = files.create_own(path)  # anew, never through a link planted at its name (files.py)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            for offset in range(0, size, 1 << 16):  # a file system that cannot allocate: write the bytes
                os.pwrite(fd, b"\0" * min(1 << 16, size - offset), offset)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return path


def _fields(state: RunState) -> dict:
    """The fields as they are, not copied: ``asdict`` deep-copies the whole transcript first, which cost
    ten times the encoding itself at turn 50 (twice a turn). The values are plain JSON already; the bytes
    written are the same."""
    return {_FILE_NAMES.get(name, name): getattr(state, name) for name in SAVED}


# What a journal line may set: attribute -> its key in the file (a line is written in the file's names)
SCALARS = {name: _FILE_NAMES.get(name, name) for name in SAVED if name not in journal.LISTS}


def journal_path(directory: str | Path, run_id: str) -> Path:
    return state_path(directory, run_id).with_suffix(".journal")


def _write(state: RunState, directory: Path, path: Path) -> tuple[int, str]:
    """The snapshot, atomically; returns its size and its digest (which its journal's lines carry)."""
    data = json.dumps(_fields(state), separators=(",", ":"), allow_nan=False).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{state.run_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data), journal.digest(data)


def _compact(state: RunState, directory: Path, path: Path, final: bool):
    """The whole run into the snapshot, then the journal let go (removed if the run stopped, else emptied
    at its next append): this order leaves, at any kill, a snapshot that holds everything saved so far."""
    _unbind(state)
    directory.mkdir(parents=True, exist_ok=True)
    size, base = _write(state, directory, path)
    jpath = journal_path(directory, state.run_id)
    if final:
        jpath.unlink(missing_ok=True)
    else:
        state.journal = Bound(state, jpath, base, path, size, SCALARS)


def _unbind(state: RunState) -> None:
    if state.journal is not None:
        state.journal.close()
        state.journal = None


def save(state: RunState, directory: str | Path, *, sync: bool = True) -> Path:
    """Save the run: a line appended to its journal, or the whole run rewritten (``journal.py`` says when).
    A reader sees the old state or the new one, never half of one. ``sync=False`` leaves the line to the
    next synced save (a read's result: running it again is harmless); every other save is on disk when
    this returns, so a reply is never paid for twice and a write never begins unrecorded."""
    directory = Path(directory)
    path = state_path(directory, state.run_id)
    final = state.status != "running"
    try:
        b = None if final else state.journal  # appended to only while its snapshot is the one on disk
        if b is not None and not b.extends(journal_path(directory, state.run_id), path):
            b = None
        line = b.delta(state) if b is not None else None
        if b is None or line is None or b.appended + len(line) > b.limit:
            _compact(state, directory, path, final)
        else:
            b.append(state, line, sync)
    except OSError as e:
        reserve = reserve_path(directory, state.run_id)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) or not reserve.exists():
            raise
        reserve.unlink()  # give the reserved space back, and save into it
        _compact(state, directory, path, final)
        journal_path(directory, state.run_id).unlink(missing_ok=True)  # all in the snapshot: free its space
        raise DiskFullError(e.errno, f"the disk holding {directory} is full; the run was saved using its "
                                     f"reserve, and must stop") from None
    seam.reached("save")  # the crash seam: a no-op unless a test plugs into it (seam.py)
    return path


def load(directory: str | Path, run_id: str) -> RunState:
    """The snapshot, and the changes its journal holds since: the run as its last save left it."""
    path = state_path(directory, run_id)
    jpath = journal_path(directory, run_id)
    try:
        raw = files.read(path, files.MAX_STATE_BYTES, "a state file")  # never through a link, never too big
        data = json.loads(raw.decode())
    except FileNotFoundError:
        beside = f" (its journal {jpath.name} is there without it: refused)" if jpath.exists() else ""
        raise StateFileError(f"{path}: no such state file{beside}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise StateFileError(f"{path}: not valid JSON ({e}); the file is left as it is") from None
    except OSError as e:
        raise StateFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise StateFileError(f"{path}: expected a JSON object")
    if data.get("version") not in READS:
        raise StateFileError(f"{path}: state version {data.get('version')!r}, this harness reads "
                             f"{' and '.join(map(str, READS))}")
    try:
        applied = journal.replay(data, jpath, journal.digest(raw), set(SCALARS.values()))
    except journal.JournalError as e:
        from .terminal import visible
        raise StateFileError(f"{jpath}: {visible(str(e))}; the files are left as they are") from None
    except OSError as e:
        raise StateFileError(f"{jpath}: cannot be read ({e.strerror or e})") from None
    upgrade(data)
    problems = check(data, run_id)
    if problems:
        from .terminal import visible
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        with_journal = f" (with the {applied} changes of {jpath.name})" if applied else ""
        raise StateFileError(f"{path}{with_journal}: {visible(shown)}; the file is left as it is")
    return RunState.from_dict(data)


# -- a file saved before the naming rule ----------------------------------------------------------------------
# Keys renamed inside records: (the field holding them, the old key, the new). Version 1 wrote the old.
RENAMED = (("tool_log", "unknown_outcome", "unknownOutcome"), ("subruns", "cost_usd", "costUsd"),
           ("interruption", "cut_reply", "cutReply"))


def upgrade(data: dict) -> None:
    """A version 1 file (snapshot and journal, replayed) in the current names, in place. A record holding
    both spellings keeps its old key, which ``check`` then refuses: no harness writes both."""
    if data.get("version") != 1:
        return
    for name, old, new in RENAMED:
        held = data.get(name)
        for record in held if isinstance(held, list) else [held]:
            if isinstance(record, dict) and old in record and new not in record:
                record[new] = record.pop(old)
    data["version"] = STATE_VERSION


# -- the whole-file check -----------------------------------------------------------------------------
INTERRUPTIONS = {"approval": {"callId", "toolName", "args"}, "max_turns": set(), "max_budget": set(),
                 "cancelled": {"reason"}}
_BIG = 10 ** 15  # more tokens than any run could pay for; keeps every sum a plain float


def _count(v) -> bool:
    return numbers.whole(v, most=_BIG - 1)


def _money(v) -> bool:
    # (a reply may claim 10^12 tokens, at up to $0.01 a token: a run the budget stopped must still load)
    return numbers.finite(v) and 0 <= v < _BIG


def _text(v, optional=False) -> bool:
    return isinstance(v, str) or (optional and v is None)


def _check_message(i: int, m) -> list[str]:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        return [f"{where} is not an object"]
    role = m.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        return [f"{where} has role {role!r}"]
    problems = [] if _text(m.get("content"), optional=role == "assistant") else [f"{where}.content is not text"]
    if role == "tool" and not (_text(m.get("tool_call_id")) and _text(m.get("name", ""))):
        problems.append(f"{where} (a tool result) has no call id")
    calls = m.get("tool_calls")
    if role == "assistant" and calls is not None:
        if not isinstance(calls, list):
            return problems + [f"{where}.tool_calls is not a list"]
        for j, c in enumerate(calls):
            f = c.get("function") if isinstance(c, dict) else None
            if not (isinstance(f, dict) and _text(c.get("id")) and c["id"] and _text(f.get("name"))
                    and _text(f.get("arguments"))):
                problems.append(f"{where}.tool_calls[{j}] is not a call with an id, a name and arguments")
    return problems


def check(data: dict, run_id: str) -> list[str]:
    """Every way ``data`` is not a state this harness could have written for ``run_id``."""
    p = []
    if data.get("version") != STATE_VERSION:  # (load checks the snapshot's first; this, what its journal made)
        p.append(f"state version {data.get('version')!r}, this harness reads {STATE_VERSION}")
    if data.get("run_id") != run_id:
        p.append(f"run_id is {data.get('run_id')!r}")
    if data.get("status") not in STATUSES:
        p.append(f"status {data.get('status')!r} is not one of {STATUSES}")
    if not _text(data.get("model")):
        p.append("model is not a string")
    if not isinstance(data.get("instance", ""), str) or len(data.get("instance", "")) > 64:
        p.append("instance is not a short string")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        p.append("messages is not a non-empty list")
        messages = []
    for i, m in enumerate(messages):
        p += _check_message(i, m)
    for key in ("turns", "prompt_tokens", "completion_tokens"):
        if not _count(data.get(key)):
            p.append(f"{key} is not a whole number from 0 to 10^15")
    if not _money(data.get("cost_usd")):
        p.append("cost_usd is not a number of dollars from 0 to 10^15")
    kinds = (("approved", list), ("started", list), ("rejected", dict), ("tool_log", list), ("per_turn", list),
             ("subruns", list), ("meta", dict), ("config", dict))
    for key, kind in kinds:
        if not isinstance(data.get(key, kind()), kind):
            p.append(f"{key} is not a {kind.__name__}")
    if p:
        return p  # the rest reads these fields as the shapes just checked
    per_turn = data.get("per_turn", [])
    for i, t in enumerate(per_turn):
        if not (isinstance(t, dict) and _count(t.get("prompt_tokens")) and _count(t.get("completion_tokens"))
                and _money(t.get("cost_usd"))):
            p.append(f"per_turn[{i}] is not {{prompt_tokens, completion_tokens, cost_usd}} of non-negative numbers")
    if not p:
        if len(per_turn) != data["turns"]:
            p.append(f"turns is {data['turns']} but per_turn records {len(per_turn)}")
        for key in ("prompt_tokens", "completion_tokens"):
            if sum(t[key] for t in per_turn) != data[key]:
                p.append(f"{key} is not the sum of per_turn")
        if abs(sum(t["cost_usd"] for t in per_turn) - data["cost_usd"]) > 1e-9:
            p.append("cost_usd is not the sum of per_turn")
    ids = {c["id"] for m in messages if isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]}
    for key in ("approved", "started"):
        if not all(isinstance(c, str) and c in ids for c in data.get(key, [])):
            p.append(f"{key} names a call that is not in the transcript")
    if not all(k in ids and isinstance(v, str) for k, v in data.get("rejected", {}).items()):
        p.append("rejected names a call that is not in the transcript, or gives it no text")
    for i, r in enumerate(data.get("tool_log", [])):
        if not (isinstance(r, dict) and _text(r.get("callId")) and _text(r.get("toolName")) and _text(r.get("args"))
                and isinstance(r.get("ok"), bool)):
            p.append(f"tool_log[{i}] is not a tool run record")
    for i, r in enumerate(data.get("subruns", [])):
        if not (isinstance(r, dict) and _money(r.get("costUsd", 0))):
            p.append(f"subruns[{i}] has no cost from 0 to 10^15")
    for name, old, new in RENAMED:  # left by ``upgrade`` only beside the new name; never in a version 2 file
        held = data.get(name)
        for i, r in enumerate(held if isinstance(held, list) else [held]):
            if isinstance(r, dict) and old in r:
                p.append(f"{name}{f'[{i}]' if isinstance(held, list) else ''} has {old}, the old name of {new}")
    for key in ("output", "error"):
        if not _text(data.get(key), optional=True):
            p.append(f"{key} is not text or null")
    why = data.get("interruption")
    if why is not None and not (isinstance(why, dict) and why.get("type") in INTERRUPTIONS
                                and INTERRUPTIONS[why["type"]] <= set(why)
                                and all(_text(why[k]) for k in ("callId", "toolName", "reason") if k in why)):
        p.append("interruption is not one of the chapter's shapes")
    if why is not None and data["status"] != "interrupted" and why.get("type") in ("approval", "cancelled"):
        p.append(f"a {data['status']} run cannot be interrupted for {why.get('type')}")
    for key, value in data.get("config", {}).items():
        if not (isinstance(key, str) and (value is None or isinstance(value, (str, int, float, bool)))):
            p.append(f"config.{key} is not a plain value")
    return p
