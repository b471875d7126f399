"""The check of notebook 08's pieces: the run as a dict (``new_state``), ``save``, ``load``, ``pending`` and
``agent_loop(url, state, tools, folder, max_turns)``, a function over a saved run: what is owed first, the model only
when nothing is, every step on disk.

Each case runs a script whole, or kills it once at one moment and resumes it from disk: waiting for the n-th turn
(the provider never answers; everything before is saved), as a tool starts (the turn that asked for it paid and
saved, its call owed), or after a tool ran and before its result was saved (the call still owed: a read runs again;
``delete_file`` runs again and, keyed by its idempotency key, deletes nothing twice). The half that dies leaves on
disk only what it saved; the resume is ``load``, then ``agent_loop`` again, with the same tools and workspace.
Compared: the run on disk at the crash (turns, transcript, owed calls, still ``running``), then the finished run
(status, turns, tool runs, tokens, dollars, answer, transcript, files deleted), the turns the provider answered
across both halves (paid: never twice) and every tool execution across both halves (the chapter's "tool runs across
BOTH processes"), and that what the loop returns is what is on disk.

Expected is ``harness_lib.run`` killed at the same moment (its client or the tool raises ``CancelledError``, which it
saves as ``interrupted``: on disk, a killed process leaves ``running``), its state through JSON and resumed. The
notebook's loop has no approval gate: ``delete_file`` runs without one on both sides (the library's tool told it
needs none), so the scripts that delete are cases too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import tempfile
import threading

from ..checking import (
    COST,
    DELETED,
    IN,
    MESSAGE_COUNT,
    OUT,
    QUICK_SCAN,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURN_COUNT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    close,
    dollars,
    plural,
    returned,
    same,
    workspace,
)
from ..language import N_, Text, _
from ..plain import one_line, plain
from . import served

MODEL, STARTS, RAN = "waiting for turn", "as tool run starts", "after tool run, before its save"


def _case(script: str, point: str, kill: str | None = None, n: int = 0, cap: int = 20, name: str = "") -> Case:
    """``kill``: where the first half dies, at the ``n``-th model call or tool run (None: it runs whole)."""
    what = {None: Text(N_("whole")), MODEL: Text(N_("killed waiting for turn {n}"), n=n),
            STARTS: Text(N_("killed as tool run {n} starts"), n=n),
            RAN: Text(N_("killed after tool run {n}, before its save"), n=n)}[kill]
    # TRANSLATORS: a case's name in a check's table: a script (`runaway`) run under a turn cap
    run = Text(N_("{script}, cap {cap}"), script=script, cap=cap) if cap != 20 else script
    return Case(name or Text("{run}, {what}", run=run, what=what), point,
                {"script": script, "kill": kill, "n": n, "cap": cap})


SAVING = Case(N_("save and load, a save killed halfway"),
              N_("a save is whole or not made: written beside the run's file, then renamed over it, in the folder it "
                 "is given; `load` reads that folder"), {"saving": True})

CASES = (  # the crashes that tell the mistakes apart first; then every script, whole
    SAVING,
    _case("plan", N_("a run that ends is on disk as it ended: what the loop returns is what `load` gives back")),
    _case("plan", N_("the chapter's moment: two results on disk, the process dies waiting for turn 3; resumed, it "
                     "pays for turn 3 once and runs nothing again"), MODEL, 3),
    _case("plan", N_("a crash after the paid turn: turn 2 is on disk with its call owed, so the resume runs "
                     "`read_file` first and pays for nothing twice"), STARTS, 2),
    _case("plan", N_("a crash after the tool ran and before its result was saved: the call is still owed, and the "
                     "read runs again (harmless for a read)"), RAN, 2),
    _case("destructive", N_("a finished write is on disk: the resume runs what is owed, and the delete is not"),
          MODEL, 3),
    _case("destructive", N_("a crash after the delete ran, before its save: the call is owed and runs again, its "
                            "idempotency key answering from the tool's journal, nothing deleted twice"), RAN, 2),
    _case("destructive", N_("a crash as the delete starts: the paid turn is on disk, the delete owed and run once"),
          STARTS, 2),
    _case("plan", N_("a crash before the first answer: the new run is on disk, and the resume starts it"), MODEL, 1),
    _case("plan", N_("a crash waiting for turn 2: one result on disk"), MODEL, 2),
    _case("plan", N_("a crash as the first tool starts: turn 1 on disk, its call owed"), STARTS, 1),
    _case("plan", N_("a crash after the first tool ran: its call still owed"), RAN, 1),
    _case("two_at_once", N_("a crash between the two calls of one turn: the first result is on disk, the second call "
                            "still owed though the transcript no longer ends with the reply that asked for it"),
          STARTS, 3),
    _case("runaway", N_("a resumed run keeps its cap: four turns in all, the last call owed"), MODEL, 3, cap=4),
    _case("runaway", N_("the cap counts the turns of both halves"), STARTS, 3, cap=4),
    _case("recover", N_("failed reads are results like any other: on disk, never run again"), MODEL, 3),
    _case("slow", N_("the scan killed as it starts is owed, and runs when the run resumes"), STARTS, 1),
    _case("delete_twice", N_("the second delete fails, on disk as an error, never run again"), MODEL, 3),
    _case("answer", N_("a crash waiting for the only turn: the resume pays for it once"), MODEL, 1),
    _case("runaway", N_("a run that reaches its cap is saved as it stopped"), cap=4),
    _case("recover", N_("a run whole: every result saved as it comes")),
    _case("direct", N_("a run whole: every result saved as it comes")),
    _case("repeat", N_("a run whole: every result saved as it comes")),
    _case("slow", N_("a run whole: every result saved as it comes")),
    _case("answer", N_("a run whole: every result saved as it comes")),
)


class Killed(BaseException):
    """The reader's process dying: raised from a tool, caught by no ``except Exception``."""


def _watched(tools, ran: list, kill: str | None, n: int, dies):
    """The tools, each execution written into ``ran`` (``read_file:errors.log``), the ``n``-th run dying as it starts
    or after it ran, by ``dies()``; no tool needs approval (the notebook's loop has no gate)."""
    count = [0]

    def watch(tool):
        async def run_it(args, ctx):
            count[0] += 1
            if (kill, n) == (STARTS, count[0]):
                raise dies()
            ran.append(tool.name + (f":{args['path']}" if "path" in args else ""))
            result = await tool.run(args, ctx)
            if (kill, n) == (RAN, count[0]):
                raise dies()
            return result
        return dataclasses.replace(tool, run=run_it, needs_approval=False)
    return [watch(t) for t in tools]


def _dropping_provider():
    from ...scripted import ScriptedProvider

    class Dropping(ScriptedProvider):
        """The scripted provider, dropping the connection of the ``n``-th request from ``arm(n)`` on (the process
        dies waiting for that turn: never answered, never paid); ``requests`` counts those it answered."""

        def __init__(self):
            super().__init__()
            self.seen, self.drop, self.dropped = 0, 0, False
            self._server.next_fault = self._fault   # the server's own fault queue, read per request

        def _fault(self):
            self.seen += 1
            self.dropped = self.dropped or self.seen == self.drop
            return "drop" if self.seen == self.drop else None

        def arm(self, n: int) -> int:
            self.seen, self.drop, self.dropped = 0, n, False
            return self.requests

    return Dropping().start().name_thread("check: dropping provider")


_dropping: list = []   # [(the process's id, the provider)]
_lock = threading.Lock()


def dropping():
    """The check's own provider, started once per process like ``ScriptedProvider.shared()`` (a case's child process
    starts its own: the kernel's would count another process's requests)."""
    with _lock:
        if not _dropping or _dropping[0][0] != os.getpid():
            _dropping[:] = [(os.getpid(), _dropping_provider())]
        return _dropping[0][1]


KEYS = ("status", "turns", "tool_runs", "in", "out", "cost_usd", "answer", "messages")


def _disk(turns, cost, messages, owes) -> dict:
    return {"turns": turns, "cost_usd": cost, "messages": messages, "owes": [c.get("id") for c in owes]}


async def yours(pieces: dict, case: Case, url: str) -> dict:
    import httpx

    from ...workspace import TASK

    a = case.args
    if a.get("saving"):
        return {"saving": _saving(pieces)}
    ws, ran = workspace(), []
    own = a["script"] in served.OWN   # a check's own script: served, and billed, by ``served`` (never dropped)
    provider = None if own else dropping()
    base = served.url("08", case.name, "yours") if own else provider.base_url
    answered = 0 if own else provider.arm(a["n"] if a["kill"] == MODEL else 0)
    tools = _watched(ws.tools(**QUICK_SCAN), ran, a["kill"], a["n"], Killed)
    with tempfile.TemporaryDirectory(prefix="check-08-") as folder:
        loop, disk = pieces["agent_loop"], None
        try:
            state = await loop(base, pieces["new_state"]("r", a["script"], TASK), tools, folder, max_turns=a["cap"])
        except (Killed, httpx.TransportError) as death:
            if isinstance(death, httpx.TransportError) and not (provider and provider.dropped):
                raise
            state = pieces["load"](folder, "r")
            disk = json.loads(json.dumps({**_disk(state["turns"], state.get("cost_usd"), state["messages"],
                                                  pieces["pending"](state)), "status": state["status"]}))
            state = await loop(base, state, tools, folder, max_turns=a["cap"])
        got = returned(state, KEYS, "agent_loop")
        saved = same(plain(pieces["load"](folder, "r")), json.loads(json.dumps(state)))
    paid = len(served.billed(base)) if own else provider.requests - answered
    return {**got, "disk": disk, "paid": paid, "ran": ran, "saved": saved, "deleted": list(ws.deleted)}


def _saving(pieces: dict) -> dict:
    """``save`` a new run, then a longer one killed halfway through its writing (every file it opens to write
    takes ``TORN_AT`` bytes, then the process dies); ``load`` must give back one of the two whole, from the folder
    saved into, and find nothing in another."""
    from ...workspace import TASK

    folder, other = tempfile.mkdtemp(prefix="check-08-"), tempfile.mkdtemp(prefix="check-08-other-")
    first = json.loads(json.dumps(pieces["new_state"]("r", "plan", TASK)))
    pieces["save"](first, folder)
    in_folder = bool(os.listdir(folder))
    second = {**first, "messages": list(first.get("messages") or []) + [{"role": "assistant", "content": "x" * 2000}]}
    try:
        with _torn_writes():
            pieces["save"](second, folder)
    except Killed:
        pass
    try:
        loaded = plain(pieces["load"](folder, "r"))
        after = "whole" if same(loaded, first) or same(loaded, plain(second)) else "another run"
    except Exception as error:  # noqa: BLE001 - what a load of a torn file raises is the finding
        after = one_line(error)
    try:
        pieces["load"](other, "r")
        elsewhere = "found"
    except Exception:  # noqa: BLE001 - nothing there: any exception says so
        elsewhere = "not found"
    return {"in folder": in_folder, "after a kill": after, "another folder": elsewhere}


TORN_AT = 64   # bytes a save gets written before the process dies


class _Torn:
    """A file opened for writing whose process dies once ``TORN_AT`` bytes are on disk (what was written stays)."""

    def __init__(self, file, left: list):
        self._file, self._left = file, left

    def write(self, data):
        if len(data) < self._left[0]:
            self._left[0] -= len(data)
            return self._file.write(data)
        self._file.write(data[:self._left[0]])
        self._file.flush()
        self._file.close()
        raise Killed()

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


@contextlib.contextmanager
def _torn_writes():
    """Every file opened to write meanwhile (``open``, ``Path.write_text``, a temporary file) dies halfway."""
    import _io
    import builtins
    import io

    real, left = io.open, [TORN_AT]

    def opening(file, mode="r", *args, **kwargs):
        opened = real(file, mode, *args, **kwargs)
        return _Torn(opened, left) if any(c in mode for c in "wax+") else opened

    places = [(builtins, "open"), (io, "open"), (_io, "open")]
    saved = [getattr(module, name) for module, name in places]
    for module, name in places:
        setattr(module, name, opening)
    try:
        yield
    finally:
        for (module, name), value in zip(places, saved):
            setattr(module, name, value)


class _Killing:
    """The library's client, dying (``CancelledError``) at its ``n``-th call, before sending it; counts the answered."""

    def __init__(self, url: str, n: int):
        self.url, self.n, self.calls, self.answered = url, n, 0, 0

    async def complete(self, model, messages, tools=None, **extra):
        import httpx

        from ..common import tls

        self.calls += 1
        if self.calls == self.n:
            raise asyncio.CancelledError("killed waiting for the model")
        async with httpx.AsyncClient(timeout=60, verify=tls()) as http:
            response = await http.post(f"{self.url}/chat/completions",
                                       json={"model": model, "messages": messages, "tools": tools})
        self.answered += 1
        return response.json()


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import RunState, new_run, pending
    from ...workspace import SYSTEM_PROMPT, TASK

    if case.args.get("saving"):   # harness_lib's save is whole or not made; its load reads the folder it is given
        return {"saving": {"in folder": True, "after a kill": "whole", "another folder": "not found"}}
    a, ws, ran = case.args, workspace(), []
    if a["script"] in served.OWN:
        url = served.url("08", case.name, "library")
    tools = _watched(ws.tools(**QUICK_SCAN), ran, a["kill"], a["n"], lambda: asyncio.CancelledError("killed"))
    client = _Killing(url, a["n"] if a["kill"] == MODEL else 0)
    options = Options(client=client, max_turns=a["cap"])
    state = await asyncio.create_task(run(new_run(SYSTEM_PROMPT, TASK, a["script"], run_id="r"), tools, options))
    disk = None
    if a["kill"] and state.status == "interrupted":   # what a killed process leaves: the last save, still running
        disk = {**_disk(state.turns, state.own_cost_usd, state.messages, pending(state)), "status": "running"}
        state = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
        state = await asyncio.create_task(run(state, tools, options))
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.own_cost_usd, "answer": state.output or "",
            "messages": state.messages, "disk": disk, "paid": client.answered, "ran": ran, "saved": True,
            "deleted": list(ws.deleted)}


def _show_disk(d) -> str:
    if d is None:
        return _("never killed")
    if not isinstance(d, dict):
        return repr(d)[:40]
    owes = ", ".join(map(str, d.get("owes") or [])) or _("nothing")
    # TRANSLATORS: the run a crash left on disk: "on disk: 2 turns, $0.001570, 5 messages, owes c2"
    return _("on disk: {turns}, {cost}, {messages}, owes {owes}").format(
        turns=plural(d.get("turns", 0), TURN_COUNT), cost=dollars(d.get("cost_usd")),
        messages=plural(len(d.get("messages") or []), MESSAGE_COUNT), owes=owes)


def _disk_difference(e, y) -> str:
    if e is None or y is None:
        said = _("the run was not killed: expected {expected}, yours {yours}") if y is None else \
            _("the run was killed: expected {expected}, yours {yours}")
        return said.format(expected=_show_disk(e), yours=_show_disk(y))
    what = [k for k in ("turns", "cost_usd", "owes", "status", "messages") if not _same(e, y, k)]
    # TRANSLATORS: {expected_status}, {yours_status}: a run's status (`running`); {fields}: names in the code
    return _("at the crash, {expected} ({expected_status}); yours {yours} ({yours_status}), differing in "
             "{fields}").format(expected=_show_disk(e), expected_status=e.get("status"), yours=_show_disk(y),
                                yours_status=y.get("status"), fields=", ".join(what))


def _same(e: dict, y: dict, key: str) -> bool:
    return close(e.get(key), y.get(key)) if key == "cost_usd" else same(e.get(key), y.get(key))


def _same_disk(e, y) -> bool:
    if not isinstance(e, dict) or not isinstance(y, dict):
        return same(e, y)
    return set(e) == set(y) and all(_same(e, y, k) for k in e)


def _disk_differs(e, y, key: str) -> bool:
    return e["disk"] is not None and y["disk"] is not None and not _same(e["disk"], y["disk"], key)


DISK = Field("disk", show=_show_disk, same=_same_disk, describe=_disk_difference)
PAID = Field("paid", show=lambda n: _("paid {turns}").format(turns=plural(n, TURN_COUNT))
             if isinstance(n, int) else repr(n), label=N_("turns the provider answered, both halves"))
RAN_ = Field("ran", show=lambda r: _("ran {tools}").format(tools=", ".join(r)) if r else _("ran nothing"),
             label=N_("tool runs, both halves"))
SAVED = Field("saved", show=lambda s: _("returned = on disk") if s else _("returned ≠ on disk"),
              describe=lambda e, y: _("what your loop returned is not what `load` gives back from its folder"))
ANSWER = Field("answer", show=lambda a: repr(a if not isinstance(a, str) or len(a) <= 30 else a[:27] + "..."),
               label=N_("answer"))

def _show_saving(s) -> str:
    if not isinstance(s, dict):
        return repr(s)[:40]
    # TRANSLATORS: "saved in its folder, whole after a kill, not found in another": three facts about save and load
    return _("{where}, {after}, {other}").format(
        where=_("saved in its folder") if s.get("in folder") else _("not saved in its folder"),
        after=_("whole after a kill") if s.get("after a kill") == "whole" else _("after a kill: {what}").format(
            what=s.get("after a kill")),
        other=_("not found in another") if s.get("another folder") == "not found" else _("found in another folder"))


SAVING_FIELD = Field("saving", show=_show_saving, label=N_("save and load"),
                     describe=lambda e, y: _("expected {expected}, yours {yours}").format(
                         expected=_show_saving(e), yours=_show_saving(y)))


def _saving_is(y: dict, key: str, value) -> bool:
    return isinstance(y.get("saving"), dict) and y["saving"].get(key) != value


HINTS = (
    Hint(N_("a save is whole or not made: write the run beside its file first, then rename it over the file "
            "(`os.replace`); a process killed in the middle of a save in place leaves half a run that `load` cannot "
            "read"), lambda c, e, y: _saving_is(y, "after a kill", "whole")),
    Hint(N_("`save` writes into the folder it is given, `os.path.join(folder, f\"{state['run_id']}.json\")`: a run "
            "saved anywhere else is lost to the process that looks for it there"),
         lambda c, e, y: _saving_is(y, "in folder", True)),
    Hint(N_("`load` reads the folder it is given: a run saved in another folder is not there, and loading it must "
            "fail"), lambda c, e, y: _saving_is(y, "another folder", "not found")),
    Hint(N_("`pending` names every call of the last reply that asked for calls, not only when the transcript ends "
            "with it: a crash between two calls of one turn leaves the first result last, the second call still owed"),
         lambda c, e, y: c.args.get("script") == "two_at_once" and len(y["ran"]) < len(e["ran"])),
    Hint(N_("your loop went round without end: `pending` leaves out the calls that already have a result (a tool "
            "message with their `tool_call_id`), or the same calls run for ever"), lambda c, e, y: y.get("hung")),
    Hint(N_("nothing was on disk when the run died before its first turn: save the run before anything is paid for"),
         lambda c, e, y: "FileNotFoundError" in (y.get("raised") or "") and "`load`" in y["raised"]),
    Hint(N_("a tool that fails is a result, not the end of the run: catch `Exception` around `tool.run` and put the "
            "error in its slot, `f\"Error: {error}\"`, as notebook 05's descriptive policy does"),
         lambda c, e, y: "`agent_loop`" in (y.get("raised") or "") and c.args.get("script") in ("recover",
                                                                                               "delete_twice")),
    Hint(N_("the run on disk at the crash is not the run that died: `save` the run before the first turn, after each "
            "paid turn before its calls run, and after each result, so that a crash anywhere loses nothing paid"),
         lambda c, e, y: any(_disk_differs(e, y, k) for k in ("turns", "cost_usd", "messages"))),
    Hint(N_("`pending` names the calls of the last assistant message whose ids have no result (`tool_call_id`) in "
            "the transcript yet"), lambda c, e, y: _disk_differs(e, y, "owes")),
    Hint(N_("your resume ran a tool whose result was already on disk: a finished call, a write above all, is never "
            "run again; only what `pending` names runs"), lambda c, e, y: len(y["ran"]) > len(e["ran"])),
    Hint(N_("the resume paid for a turn the run already had: each pass runs what the transcript owes first and asks "
            "the model only when nothing is owed, so a run loaded after a crash never pays for the same turn twice"),
         lambda c, e, y: isinstance(y["paid"], int) and y["paid"] > e["paid"]),
    Hint(N_("a call the run owed was never run: each pass first runs what `pending` names, saving each result, and "
            "asks the model only when nothing is owed (a resume that asks first pays for a turn while the one it has "
            "is still unanswered)"), lambda c, e, y: len(y["ran"]) < len(e["ran"])),
    Hint(N_("what your loop returns is not what is on disk: save the run once more when it ends, so that a process "
            "restarted later finds it finished"), lambda c, e, y: not y["saved"]),
    Hint(N_("a run loaded from disk goes on from wherever it stands: a last message without calls means it answered "
            "(before a crash, perhaps), and the cap counts the turns of both halves"),
         lambda c, e, y: y["status"] != e["status"]),
)

FIELDS = (SAVING_FIELD, STATUS, TURNS, TOOL_RUNS, IN, OUT, COST, ANSWER, DISK, PAID, RAN_, SAVED, DELETED,
          TRANSCRIPT)
# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('run_id', 'status', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'answer', 'messages', 'completed',
            'max_turns_exceeded', 'os.replace')
CHECK = Check("08-resume", ("agent_loop", "new_state", "save", "load", "pending"), CASES, FIELDS, yours, expected,
              HINTS)


async def check(agent_loop, new_state, save, load, pending, url: str | None = None):
    """Run your ``agent_loop`` (with your ``new_state``, ``save``, ``load`` and ``pending``) on every case of
    section 8 beside ``harness_lib``: whole, and killed at each kind of moment and resumed from disk. A table,
    ``N of M cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, new_state=new_state, save=save, load=load, pending=pending)
