"""Operating a run safely (issue 9): the operator's campaign.

The crash campaign proves a run survives SIGKILL; this one proves it survives its operator. Every case runs
the real command line (``python -m harness_lib``, in child processes where timing or signals matter, in
process where they do not) against a scripted provider that counts the requests it is billed for, and
checks what an operator could lose. The children are forked from a fork server that imported the harness once
(``tests/warm.py``: each a process of its own, signalled alone, without Python's 0.3 s start-up), but for a
sample on fresh interpreters, so the real ``python -m harness_lib`` start-up stays covered: every 7th race,
and the signals timed from the spawn (those meant to land while Python starts); ``--fresh``: all of them.

* **races**: two commands on one run at the same instant (approve + approve, approve + reject, resume +
  resume under a budget, run + run with one run id, resume of a run that is still live);
* **signals** at random instants: SIGTERM or Ctrl-C, sometimes twice;
* **a full disk** (a small tmpfs filled while the run goes), and a disk full before it starts;
* **tampered state files** (each a way the issue found to turn a state file against the workspace, the
  decisions or the budget) and **bad environments** (a 250-character run id, folders that are files,
  read-only mounts);
* **hostile text** (escape sequences in a call id and an answer) and the rest of the issue's list;
* **links, planted files, cut streams and rounding** (issue 20): ``tests/test_hostile.py``, each test a
  way the harness was led astray and shown to fail without its fix, run with pytest in a child process
  and counted here, one case a test: links and hard links in the workspace and in the state folder, files
  too big to read, an edited budget, model or ledger, a lock file removed under a running run, a stream cut
  short or drawing the approval line, numbers past their bounds, costs too small to round, a server that
  bills less than it sends.

Figures: cases tried, writes doubled (``access.log`` deleted more than once, or a file deleted that should
not have been), turns paid twice (requests billed beyond the turns the saved run holds, when no signal
cut a reply short), runs lost (a run that cannot be continued to the end an uninterrupted run reaches, or
is left ``running`` by a process that exited), tracebacks (any ``Traceback`` a user would see).

    python tests/operator_campaign.py [--races N] [--signals N] [--disk N] [--seed S] [--no-hostile] [--json]

prints the figures of docs/reliability.md. ``tests/test_operator.py`` runs it and asserts every figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import warm

from harness_lib import cli
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import StateFileError, load
from harness_lib.tools import ToolContext
from harness_lib.trace import read
from harness_lib.workspace import DATA_WORKSPACE, Workspace

ROOT = Path(__file__).resolve().parent.parent
PY = [sys.executable, "-m", "harness_lib"]
REFERENCE = {  # what the uninterrupted runs end as (the chapter's own figures)
    "runaway_budget": {"status": "budget_exceeded", "turns": 9, "cost_usd": 0.01078},
    "destructive_approved": {"status": "completed", "turns": 3, "answer": "Deleted access.log to free space."},
    "destructive_rejected": {"status": "completed", "turns": 3,
                             "answer": "I did not delete anything: you declined the deletion."},
    "plan": {"status": "completed", "turns": 3, "cost_usd": 0.00247},
}
LOSER_SAYS = ("is in use by", "already approved", "already rejected", "is completed", "already exists",
              "not pending")


@dataclass
class Case:
    group: str
    name: str
    problems: list[str] = field(default_factory=list)
    tracebacks: int = 0
    startup_tracebacks: int = 0
    writes_doubled: int = 0
    turns_paid_twice: int = 0
    turns_lost_to_a_second_signal: int = 0
    run_lost: bool = False
    note: str = ""
    fresh: bool = False  # its children were fresh interpreters

    def expect(self, ok: bool, problem: str):
        if not ok:
            self.problems.append(problem)


# -- running the CLI -------------------------------------------------------------------------------------
def in_process(*argv: str) -> tuple[int, str, str]:
    """The CLI in this process (fast; only where no signal or timing is involved)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
        except BaseException as e:  # noqa: BLE001 - what a user would see as a traceback
            code, err = 99, io.StringIO(f"Traceback (in process): {type(e).__name__}: {e}")
    return code, out.getvalue(), err.getvalue()


_launcher: warm.Launcher | None = None  # set by campaign(): the fork server its warm children start from


def spawn(*argv: str, fresh: bool = False) -> subprocess.Popen | warm.Child:
    """``python -m harness_lib ARGV`` in a child: forked from the campaign's fork server when there is one
    (``tests/warm.py``: a process of its own, without Python's 0.3 s start-up), else a fresh interpreter."""
    launch = subprocess.Popen if fresh or _launcher is None else _launcher
    return launch([*PY, *map(str, argv)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen | warm.Child) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


def continue_to_the_end(case: Case, d, rid: str):
    """What an operator does after a stop: ``resume`` until the run ends (three tries at most), then check
    it ended as the uninterrupted budget run did. Returns the final state, or None (the run is lost)."""
    for _ in range(3):
        state = load(d, rid)
        if state.status not in ("interrupted", "running"):
            break
        c, _, e = in_process("resume", rid, "--state-dir", d, "--json")
        count_tracebacks(case, e)
        case.expect(c == 0, f"resume exited {c}: {e}")
    state = final(case, d, rid)
    ref = REFERENCE["runaway_budget"]
    if state is None or (state.status, state.turns, round(state.own_cost_usd, 6)) != (ref["status"], ref["turns"],
                                                                               ref["cost_usd"]):
        case.run_lost = True
        case.problems.append(f"did not end as the uninterrupted run: {state and (state.status, state.turns)}")
        return None
    return state


def count_tracebacks(case: Case, *errs: str):
    for err in errs:
        if "Traceback" not in err:
            continue
        in_site = "KeyboardInterrupt" in err and err.rstrip().endswith("Remainder of file ignored")
        if (err.rstrip().endswith("KeyboardInterrupt") or in_site) and not re.search(r'File "[^"]*/harness_lib/', err):
            # Ctrl-C while the interpreter itself was starting (importing ``site``), before the first line of
            # harness_lib/__main__.py ran: no program can catch that. Once that line has run, no handler of
            # the harness raises KeyboardInterrupt, so this is the only way to see one. Counted apart, shown.
            # ``in_site``: it landed while site ran a .pth file's import and Python 3.11 wrapped it in a
            # RuntimeError (raised inside a ``__set_name__``), which site prints, ignores, and starts anyway.
            case.startup_tracebacks += 1
            case.note = "Ctrl-C during Python's own start-up"
            continue
        case.tracebacks += 1
        case.problems.append(f"traceback: {err.strip()[-300:]}")


def settled(provider, timeout_s: float = 5.0) -> None:
    """Until the provider holds no connection of the ended process: a request it sent just before it was stopped is
    billed (``requests``) after the provider's latency, once the process is gone. Read before, the count missed it,
    and the same request was found again after resuming ("10 requests for 9 turns after resuming", once)."""
    deadline = time.monotonic() + timeout_s
    while provider._server.connections and time.monotonic() < deadline:
        time.sleep(0.005)


def final(case: Case, state_dir: Path, run_id: str):
    try:
        return load(state_dir, run_id)
    except StateFileError as e:
        case.run_lost = True
        case.problems.append(f"state unusable: {e}")
        return None


def deletions(ws_root: Path) -> int:
    ws = Workspace(ws_root)
    return sum(1 for p in ws.deleted if p == "access.log")


# -- 1. races ----------------------------------------------------------------------------------------------
RACES = ("approve+approve", "approve+reject", "resume+resume", "run+run", "resume-while-live")


def race(kind: str, rng: random.Random, fresh: bool = False) -> Case:
    case = Case("race", kind, fresh=fresh or _launcher is None)
    latency = 20 if kind == "resume-while-live" else rng.choice([0, 5, 20])
    with tempfile.TemporaryDirectory(prefix="harness-race-") as tmp, ScriptedProvider(latency_ms=latency) as provider:
        d, url, rid = Path(tmp) / "runs", provider.base_url, "r"
        common = ("--state-dir", d, "--base-url", url, "--json")
        if kind in ("approve+approve", "approve+reject"):
            code, _, err = in_process("run", "destructive", "--run-id", rid, *common)
            case.expect(code == 0, f"setup exited {code}: {err}")
            second = ["resume", rid, *common, "--reject" if kind == "approve+reject" else "--approve", "c2"]
            first = ["resume", rid, *common, "--approve", "c2"]
        elif kind in ("resume+resume", "resume-while-live"):
            code, _, err = in_process("run", "runaway", "--run-id", rid, "--budget", "0.01", "--max-turns", "2",
                                      *common)
            case.expect(code == 0, f"setup exited {code}: {err}")
            first = ["resume", rid, *common, "--max-turns", "50"]
            second = ["resume", rid, *common] if kind == "resume-while-live" else first
        else:
            first = second = ["run", "plan", "--run-id", rid, *common]
        a = spawn(*first, fresh=fresh)
        time.sleep(rng.uniform(0.1, 0.35) if kind == "resume-while-live" else rng.uniform(0, 0.08))
        b = spawn(*second, fresh=fresh)
        (ca, _, ea), (cb, _, eb) = finish(a), finish(b)
        count_tracebacks(case, ea, eb)
        codes = sorted([ca, cb])
        loser = ea if ca else eb
        if kind.startswith("resume") and codes == [0, 0]:
            case.note = "came after the other had ended: stopped at the budget at once"
        else:
            case.expect(codes == [0, 2], f"exit codes {ca}, {cb}: {ea.strip()[-200:]} | {eb.strip()[-200:]}")
            case.expect(any(s in loser for s in LOSER_SAYS), f"the loser said {loser!r}")
        if "is in use by" in loser:
            case.note = "refused while the other held the run"
        state = final(case, d, rid)
        if state is None:
            return case
        case.turns_paid_twice = max(0, provider.requests - state.turns)
        case.expect(provider.requests == state.turns, f"{provider.requests} requests billed for {state.turns} turns")
        ws = Path(state.meta["workspace"])
        if kind.startswith("approve"):
            n = deletions(ws)
            case.writes_doubled = max(0, n - 1)
            gone = not (ws / "access.log").exists()
            declined = state.output == REFERENCE["destructive_rejected"]["answer"]
            case.expect((state.status, state.turns) == ("completed", 3), f"ended {state.status} at {state.turns}")
            case.expect(gone == (n == 1) and declined == (not gone),
                        f"inconsistent: deleted {n}x, access.log {'gone' if gone else 'there'}, says {state.output!r}")
        elif kind == "run+run":
            case.expect((state.status, state.turns) == ("completed", 3), f"ended {state.status}")
            case.expect(len(list(d.glob("*.workspace"))) == 1, "two workspaces for one run")
        elif kind == "resume-while-live" and ca != 0:
            # the plain resume got the run first (a slow start-up): it kept the saved cap of 2 and stopped
            # at once; the one raising the cap was refused, and the run waits at its cap, as it should
            case.expect((state.status, state.turns) == ("max_turns_exceeded", 2), f"ended {state.status}")
        else:
            ref = REFERENCE["runaway_budget"]
            case.expect((state.status, state.turns, round(state.own_cost_usd, 6)) ==
                        (ref["status"], ref["turns"], ref["cost_usd"]), f"ended {state.status} at {state.turns}")
    return case


# -- 2. signals --------------------------------------------------------------------------------------------
def signal_case(rng: random.Random) -> Case:
    sig = rng.choice([signal.SIGTERM, signal.SIGINT])
    twice = rng.random() < 0.35
    # Most land once the run has begun (timed from its first save); the rest from the spawn, start-up included.
    begun = rng.random() < 0.7
    delay = rng.uniform(0, 0.3) if begun else rng.uniform(0.02, 0.5)
    when = f"{'saved' if begun else 'spawn'}+{delay:.3f} s"
    case = Case("signal", f"{signal.Signals(sig).name}{' x2' if twice else ''} at {when}")
    with tempfile.TemporaryDirectory(prefix="harness-sig-") as tmp, ScriptedProvider(latency_ms=25) as provider:
        d, rid = Path(tmp) / "runs", "r"
        trace = Path(tmp) / "trace.jsonl"
        args = ("run", "runaway", "--run-id", rid, "--budget", "0.01", "--state-dir", d, "--trace", trace,
                "--base-url", provider.base_url, "--json")
        p = spawn(*args, fresh=not begun)  # timed from the spawn: Python's own start-up is in the window
        case.fresh = not begun or _launcher is None
        deadline = time.monotonic() + 20
        while begun and not (d / f"{rid}.json").exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        p.send_signal(sig)
        if twice:
            time.sleep(rng.uniform(0, 0.05))
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(sig)
        code, out, err = finish(p)
        settled(provider)
        count_tracebacks(case, err)
        startup = {1, -signal.SIGINT} if case.startup_tracebacks else set()
        # 128 + n is what main returns; -n is a signal landing while the interpreter shuts down, after
        # main returned (Python restores the default handlers then): a shell shows both as 128 + n.
        expected = {0, 128 + sig, -sig, 2} | startup
        case.expect(code in expected, f"exit {code}: {err.strip()[-200:]}")
        if code == 2:
            case.expect(not (d / f"{rid}.json").exists() and provider.requests == 0,
                        f"exit 2 after the run began: {err.strip()[-200:]}")
        if not (d / f"{rid}.json").exists():
            case.expect(provider.requests == 0, f"{provider.requests} requests and no state file")
            case.note = case.note or "before the run began"
            c, _, e = in_process(*args)  # nothing was paid: the operator gives the same command again
            count_tracebacks(case, e)
            case.expect(c == 0, f"the same run again exited {c}: {e.strip()[-200:]}")
        state = final(case, d, rid)
        if state is None:
            return case
        if state.status == "running":
            case.run_lost = True
            case.problems.append("left running by a process that exited")
        lost = provider.requests - state.turns
        if twice:
            case.turns_lost_to_a_second_signal = max(0, lost)
            case.expect(lost <= 1, f"{lost} paid turns lost")
        else:
            case.turns_paid_twice = max(0, lost)
            case.expect(lost == 0, f"{lost} paid turns not in the saved run")
        if case.note:
            pass
        elif state.status == "interrupted":
            case.note = f"stopped at turn {state.turns}"
            events = read(trace)
            case.expect(events and events[-1]["type"] == "run_stopped", "no run_stopped line at the end of the trace")
            case.expect(code in (128 + sig, -sig), f"exit {code} for a run stopped by {signal.Signals(sig).name}")
        else:
            case.note = f"ended {state.status} before the signal"
        state = continue_to_the_end(case, d, rid)  # the operator continues it
        if state is not None and provider.requests - state.turns != case.turns_lost_to_a_second_signal:
            case.turns_paid_twice += provider.requests - state.turns - case.turns_lost_to_a_second_signal
            case.problems.append(f"{provider.requests} requests for {state.turns} turns after resuming")
    return case


# -- 3. a full disk ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(size: str, read_only: bool = False):
    """A small tmpfs of its own (we are root in the test environment); ``None`` if mounting is refused."""
    point = Path(tempfile.mkdtemp(prefix="harness-tmpfs-"))
    options = f"size={size}" + (",ro" if read_only else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
    if r.returncode != 0:
        point.rmdir()
        yield None, r.stderr.strip() or f"mount exited {r.returncode}"
        return
    try:
        yield point, ""
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        with contextlib.suppress(OSError):
            point.rmdir()


def fill(path: Path) -> int:
    """Write ``path`` until the disk refuses; returns the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 4096, 512, 1):
            block = b"\0" * chunk
            while True:
                try:
                    written += f.write(block)
                except OSError:
                    break
    return written


def disk_case(mount: Path, rng: random.Random, i: int, before_start: bool = False) -> Case:
    case = Case("full disk", "full before the run" if before_start else f"filled during the run (#{i})")
    base = mount / f"c{i}"
    base.mkdir()
    filler = mount / f"filler{i}"
    with ScriptedProvider(latency_ms=20) as provider:
        d, rid, trace = base / "runs", "r", base / "trace.jsonl"
        args = ("run", "runaway", "--run-id", rid, "--budget", "0.01", "--state-dir", d, "--trace", trace,
                "--base-url", provider.base_url, "--json")
        if before_start:
            fill(filler)
            code, out, err = finish(spawn(*args))
            count_tracebacks(case, err)
            case.expect(code == 2 and len(err.strip().splitlines()) == 1 and "free some space" in err,
                        f"exit {code}: {err!r}")
            case.expect(provider.requests == 0, f"{provider.requests} requests paid on a full disk")
            filler.unlink()
            return case
        p = spawn(*args)
        deadline = time.monotonic() + 10
        while not (d / f"{rid}.json").exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.15))
        fill(filler)
        code, out, err = finish(p)
        count_tracebacks(case, err)
        state = final(case, d, rid)
        if state is None:
            filler.unlink()
            return case
        case.expect(provider.requests == state.turns,
                    f"{provider.requests} turns paid, {state.turns} saved: a paid turn's record was lost")
        case.turns_paid_twice = max(0, provider.requests - state.turns)
        if code == 2:
            case.expect(len(err.strip().splitlines()) == 1 and "every paid turn is saved" in err, f"said {err!r}")
            case.note = f"stopped at turn {state.turns} ({state.status} on disk)"
        else:
            case.expect(code == 0 and state.status == "budget_exceeded", f"exit {code}: {err!r}")
            case.note = "ended before the disk filled"
        filler.unlink()  # the operator makes room, then continues the run
        continue_to_the_end(case, d, rid)
        case.expect(provider.requests == 9, f"{provider.requests} requests billed for 9 turns")
        case.turns_paid_twice = max(case.turns_paid_twice, provider.requests - 9)
    return case


# -- 4. tampered state files -------------------------------------------------------------------------------
def _edit(path: Path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _waiting(tmp: Path, url: str) -> tuple[Path, Path]:
    d = tmp / "runs"
    code, _, err = in_process("run", "destructive", "--run-id", "r", "--state-dir", d, "--base-url", url, "--json")
    assert code == 0, err
    return d, Path(load(d, "r").meta["workspace"])


def _budget_stopped(tmp: Path, url: str) -> tuple[Path, Path]:
    d = tmp / "runs"
    code, _, err = in_process("run", "runaway", "--run-id", "r", "--budget", "0.01", "--state-dir", d,
                              "--base-url", url, "--json")
    assert code == 0, err
    return d, Path(load(d, "r").meta["workspace"])


def _forget(data):
    data.update(turns=0, per_turn=[], cost_usd=0.0, prompt_tokens=0, completion_tokens=0)


def _no_id(data):
    del data["messages"][-1]["tool_calls"][0]["id"]


TAMPERS = {  # name: (setup, edit, extra resume arguments, what the refusal must say)
    "meta.workspace points at another folder, then approve":
        ("waiting", lambda d, other: d["meta"].update(workspace=str(other)), ["--approve", "c2"], "was given"),
    "meta.workspace removed, then approve (a fresh copy, no checks?)":
        ("waiting", lambda d, other: d["meta"].pop("workspace"), ["--approve", "c2"], "was given"),
    "meta.workspace points at data/workspace, then approve":
        ("waiting", lambda d, other: d["meta"].update(workspace=str(DATA_WORKSPACE)), ["--approve", "c2"],
         "data/workspace"),
    "meta.workspace points at another run's workspace":
        ("waiting", "other-run", ["--approve", "c2"], "was given"),
    "an id added to approved, no decision given":
        ("waiting", lambda d, other: d.update(approved=["c2"]), [], "no approval was given"),
    "cost_usd: -1000": ("budget", lambda d, other: d.update(cost_usd=-1000), [], "cost_usd"),
    "the budget raised in the saved options": ("budget", lambda d, other: d["config"].update(max_budget_usd=100.0), [],
                                               "differ from the latest the run was given"),
    "the spend forgotten, consistently": ("budget", lambda d, other: _forget(d), [], "already spent"),
    "tool_log: [1]": ("waiting", lambda d, other: d.update(tool_log=[1]), [], "tool_log[0]"),
    "a tool call without an id": ("waiting", lambda d, other: _no_id(d), [], "tool_calls[0]"),
    "the instance swapped": ("waiting", lambda d, other: d.update(instance="0" * 16), ["--approve", "c2"],
                             "has no record of"),
    "turns: true": ("budget", lambda d, other: d.update(turns=True), [], "turns"),
    "a cost of 1e400": ("budget", lambda d, other: d.update(cost_usd=1e400), [], "cost_usd"),
    "per_turn that does not add up": ("budget", lambda d, other: d["per_turn"][0].update(cost_usd=0.0), [],
                                      "sum of per_turn"),
    "a message with an unknown role": ("waiting", lambda d, other: d["messages"].append({"role": "root"}), [],
                                       "role"),
    "started names a call that never was": ("waiting", lambda d, other: d.update(started=["c99"]), [],
                                            "not in the transcript"),
    "meta.workspace is a number": ("waiting", lambda d, other: d["meta"].update(workspace=123), [], "not a folder"),
    "tool_errors: loud": ("budget", lambda d, other: d["config"].update(tool_errors="loud"), [], "tool_errors"),
    "an interruption of an unknown type": ("waiting", lambda d, other: d.update(interruption={"type": "root"}),
                                           [], "interruption"),
    "a negative token count in a turn": ("budget", lambda d, other: d["per_turn"][0].update(prompt_tokens=-5), [],
                                         "per_turn[0]"),
}


def tamper_case(name: str, url_provider: ScriptedProvider) -> Case:
    setup, edit, extra, says = TAMPERS[name]
    case = Case("tampered state", name)
    with tempfile.TemporaryDirectory(prefix="harness-tamper-") as tmp:
        tmp = Path(tmp)
        d, ws = (_waiting if setup == "waiting" else _budget_stopped)(tmp, url_provider.base_url)
        other = Workspace.copy_of(into=tmp / "other")
        other.keep()
        if edit == "other-run":
            _, ows = _waiting(tmp / "second", url_provider.base_url)

            def edit(data, o):
                data["meta"].update(workspace=str(ows))
        path = d / "r.json"
        _edit(path, lambda data: edit(data, other.root))
        before = path.read_bytes(), sorted(os.listdir(ws)), sorted(os.listdir(other.root))
        requests = url_provider.requests
        code, out, err = in_process("resume", "r", "--state-dir", d, *extra, "--json")
        count_tracebacks(case, err)
        case.expect(code == 2, f"exit {code}: {err.strip()[-200:]}")
        case.expect(says in err and len(err.strip().splitlines()) == 1, f"said {err!r}, not {says!r}")
        after = path.read_bytes(), sorted(os.listdir(ws)), sorted(os.listdir(other.root))
        case.expect(after == before, "the state file or a workspace changed")
        case.expect(url_provider.requests == requests, "a turn was paid")
        case.expect((DATA_WORKSPACE / "access.log").exists(), "data/workspace lost a file")
        deleted = 0 if after[1:] == before[1:] else 1
        case.writes_doubled = deleted
        case.note = err.strip()[:110]
    return case


# -- 5. environments, hostile text and the issue's other cases -------------------------------------------------
def env_cases(provider: ScriptedProvider) -> list[Case]:
    url = provider.base_url
    cases = []

    def one(name: str, argv: list, says: str, tmp: Path):
        case = Case("environment", name)
        before = provider.requests
        code, out, err = in_process(*argv)
        count_tracebacks(case, err)
        case.expect(code == 2 and says in err and len(err.strip().splitlines()) == 1, f"exit {code}: {err!r}")
        case.expect(provider.requests == before, "a turn was paid")
        case.note = err.strip()[:110]
        cases.append(case)

    with tempfile.TemporaryDirectory(prefix="harness-env-") as tmp:
        tmp = Path(tmp)
        (tmp / "afile").write_text("x")
        (tmp / "afolder").mkdir()
        run = ["run", "plan", "--base-url", url]
        one("a 250-character run id", [*run, "--run-id", "r" * 250, "--state-dir", tmp / "s"], "invalid run id", tmp)
        one("a run id with a slash", [*run, "--run-id", "../x", "--state-dir", tmp / "s"], "invalid run id", tmp)
        one("resume of a 250-character run id", ["resume", "r" * 250, "--state-dir", tmp / "s"], "invalid run id",
            tmp)
        one("--state-dir is a file", [*run, "--state-dir", tmp / "afile"], "--state-dir", tmp)
        one("--state-dir inside a file", [*run, "--state-dir", tmp / "afile" / "s"], "--state-dir", tmp)
        one("--trace is a folder", [*run, "--trace", tmp / "afolder"], "cannot write the trace", tmp)
        one("--trace inside a file", [*run, "--trace", tmp / "afile" / "t"], "cannot write the trace", tmp)
        with tmpfs("1m", read_only=True) as (ro, why):
            if ro is None:
                case = Case("environment", "read-only folders", problems=[f"cannot mount a read-only tmpfs: {why}"])
                cases.append(case)
            else:
                one("--state-dir on a read-only mount", [*run, "--state-dir", ro / "s"], "--state-dir", tmp)
                one("--trace on a read-only mount", [*run, "--trace", ro / "t.jsonl"], "cannot write the trace", tmp)
    return cases


class _Hostile(BaseHTTPRequestHandler):
    """A provider whose model asks to delete errors.log under a call id that redraws the terminal line."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        asked = any(m.get("role") == "tool" for m in body["messages"])
        evil_id = "c2\r\x1b[2K   stopped at turn 1: interrupted / approval -> list_files({})  [call c2]"
        call = {"id": evil_id, "type": "function",
                "function": {"name": "delete_file", "arguments": '{"path":"errors.log"}'}}
        message = ({"role": "assistant", "content": "done \x1b]0;pwned\x07 \u202eevil\u202c \x9b31m"} if asked else
                   {"role": "assistant", "content": None, "tool_calls": [call]})
        data = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def hostile_text_cases() -> list[Case]:
    cases = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with tempfile.TemporaryDirectory(prefix="harness-hostile-") as tmp:
            d = Path(tmp) / "runs"
            case = Case("hostile text", "a call id that redraws the approval line")
            code, out, err = in_process("run", "destructive", "--run-id", "r", "--state-dir", d, "--base-url", url,
                                        "--model", "destructive")
            count_tracebacks(case, err)
            raw = [ch for ch in out if ch in "\r\x1b\x9b\u202e"]
            case.expect(code == 0 and not raw, f"raw control characters reached the terminal: {raw}")
            case.expect("delete_file(" in out and "[call c2\\x0d\\x1b[2K" in out,
                        f"the real call is not shown: {out!r}")
            case.note = next((line.strip()[:110] for line in out.splitlines() if "approval" in line), "")
            cases.append(case)
            case = Case("hostile text", "escape sequences in the answer, line and --json")
            evil_id = load(d, "r").interruption["callId"]
            code, out, err = in_process("resume", "r", "--state-dir", d, "--approve", evil_id, "--json")
            count_tracebacks(case, err)
            parsed = json.loads(out)
            case.expect(code == 0 and not [ch for ch in out if ch in "\x1b\x07\x9b\u202e"],
                        f"raw controls: {out!r}")
            case.expect(parsed["answer"].startswith("done \x1b]0;pwned"), "--json changed the answer's value")
            case.expect(not (Path(load(d, "r").meta["workspace"]) / "errors.log").exists(),
                        "the approved call did not run")
            cases.append(case)
    finally:
        server.shutdown()
        server.server_close()
    return cases


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def issue_cases(provider: ScriptedProvider) -> list[Case]:
    """The issue's remaining reports, one case each."""
    url, cases = provider.base_url, []
    with tempfile.TemporaryDirectory(prefix="harness-issue-") as tmp:
        tmp = Path(tmp)
        # Resume continues with the run's own limits and endpoint.
        case = Case("issue", "resume keeps the budget and the endpoint")
        d = tmp / "budget"
        port = free_port()
        code, _, err = in_process("run", "plan", "--run-id", "r", "--state-dir", d, "--base-url",
                                  f"http://127.0.0.1:{port}/v1", "--model", "plan", "--json")
        state = load(d, "r")
        case.expect(code == 0 and state.status == "interrupted" and
                    state.interruption["reason"].startswith("provider unreachable"), f"{state.status} {state.error}")
        with ScriptedProvider(port=port) as back:
            code, out, err = in_process("resume", "r", "--state-dir", d, "--json")
            case.expect(code == 0 and json.loads(out)["status"] == "completed", f"resume: {code} {err}")
            case.expect(back.requests == 3, f"{back.requests} requests to the saved endpoint")
        count_tracebacks(case, err)
        case.note = "provider down: interrupted / cancelled (provider unreachable); resumed on the saved URL"
        cases.append(case)
        # The delete: moved aside, then a new file at the same path is not touched.
        case = Case("issue", "killed after the move-aside, a new access.log appears")
        ws = Workspace.copy_of(into=tmp / "aside")
        ctx = ToolContext("r", "c2", instance="i1")
        # What a process killed right after the move-aside leaves: the "started" line, the file set aside.
        ws._journal({"op": "delete", "key": ctx.idempotency_key, "path": "access.log", "started": True})
        ws.trash.mkdir()
        (ws.root / "access.log").rename(ws.aside(ctx.idempotency_key))
        (ws.root / "access.log").write_text("new lines from the logger\n")
        again = asyncio.run(ws.delete_file({"path": "access.log"}, ctx))
        case.expect(again == "deleted access.log" and (ws.root / "access.log").read_text().startswith("new"),
                    "the new access.log was deleted")
        case.writes_doubled = 0 if (ws.root / "access.log").exists() else 1
        cases.append(case)
        # A run id reused with a new state dir on the same workspace deletes again.
        case = Case("issue", "a run id reused on the same workspace")
        shared = Workspace.copy_of(into=tmp / "shared")
        for n in (1, 2):
            dn = tmp / f"state{n}"
            if n == 2:
                (shared.root / "access.log").write_text("recreated\n")
            in_process("run", "destructive", "--run-id", "r", "--state-dir", dn, "--workspace", shared.root,
                       "--base-url", url)
            code, out, err = in_process("resume", "r", "--state-dir", dn, "--approve", "c2", "--json")
            count_tracebacks(case, err)
            case.expect(code == 0 and json.loads(out)["answer"] == REFERENCE["destructive_approved"]["answer"],
                        f"run {n}: {out} {err}")
        case.expect(not (shared.root / "access.log").exists() and deletions(shared.root) == 2,
                    "the second instance's delete was answered from the first one's journal")
        cases.append(case)
        # A workspace file name that is not UTF-8.
        case = Case("issue", "a workspace file name that is not UTF-8")
        odd = Workspace.copy_of(into=tmp / "odd")
        with open(os.path.join(os.fsencode(odd.root), b"bad\xff.log"), "w") as f:
            f.write("timeout\n")
        code, out, err = in_process("run", "plan", "--workspace", odd.root, "--base-url", url, "--json")
        count_tracebacks(case, err)
        case.expect(code == 0 and json.loads(out)["status"] == "completed", f"{code} {err}")
        cases.append(case)
        # delegate has its research tool.
        case = Case("issue", "delegate on the command line")
        code, out, err = in_process("run", "delegate", "--base-url", url, "--json")
        s = json.loads(out) if code == 0 else {}
        case.expect(s.get("status") == "completed" and "unknown tool" not in (s.get("answer") or "") and
                    "subagent reports" in (s.get("answer") or ""), f"{code} {s.get('answer')!r} {err}")
        cases.append(case)
        # A --state-dir run keeps its workspace with the run.
        case = Case("issue", "a --state-dir run keeps its workspace beside its state")
        d = tmp / "kept"
        in_process("run", "plan", "--run-id", "r", "--state-dir", d, "--base-url", url)
        case.expect(load(d, "r").meta["workspace"] == str((d / "r.workspace" / "workspace").resolve()),
                    f"workspace at {load(d, 'r').meta['workspace']}")
        cases.append(case)
    return cases


# -- 6. links, planted files, cut streams and rounding (issue 20) ------------------------------------------------
HOSTILE_TESTS = Path(__file__).resolve().parent / "test_hostile.py"


def hostile_cases() -> list[Case]:
    """``tests/test_hostile.py`` in a child pytest (its own process: pytest does not run inside itself), each
    test a case, its failure (if any) the case's problem, read from pytest's JUnit report."""
    import xml.etree.ElementTree as ET
    with tempfile.TemporaryDirectory(prefix="harness-hostile-") as tmp:
        report = Path(tmp) / "report.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", str(HOSTILE_TESTS), "-q", "-p", "no:cacheprovider",
                               f"--junitxml={report}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        tests = ET.parse(report).getroot().iter("testcase") if report.exists() else []
        cases = []
        for t in tests:
            bad = [f"{e.tag}: {(e.get('message') or '').strip()[:200]}" for e in t
                   if e.tag in ("failure", "error", "skipped")]
            cases.append(Case("issue 20", t.get("name", "?"), problems=bad, note=(t.get("name") or "")[:110]))
    if not cases:
        cases.append(Case("issue 20", str(HOSTILE_TESTS), problems=[f"pytest exited {done.returncode}: "
                                                                    f"{done.stdout[-300:]}{done.stderr[-300:]}"]))
    return cases


# -- the campaign --------------------------------------------------------------------------------------------
def campaign(races: int = 100, signals: int = 24, disk: int = 8, seed: int = 0, hostile: bool = True,
             warm_children: bool = True, quick: bool = True) -> dict:
    """Every group of cases; with ``warm_children`` (the default) the command-line children are forked
    from a fork server (``tests/warm.py``) but for a sample on fresh interpreters: every 7th race, and the
    signals timed from the spawn (those meant to land in Python's own start-up). ``quick=False`` leaves out
    the groups that need no timing (tampered state files, bad environments, the issue's other reports, hostile
    text) and ``hostile=False`` issue 20's: ``make test`` runs those as tests of their own
    (``tests/test_operator.py``, ``tests/test_hostile.py``), and runs each case once."""
    global _launcher
    with contextlib.ExitStack() as stack:
        _launcher = stack.enter_context(warm.Launcher()) if warm_children else None
        try:
            return _campaign(races, signals, disk, seed, hostile, quick)
        finally:
            _launcher = None


def _campaign(races: int, signals: int, disk: int, seed: int, hostile: bool, quick: bool) -> dict:
    rng = random.Random(seed)
    started = time.perf_counter()
    cases: list[Case] = []
    for i in range(races):
        cases.append(race(RACES[i % len(RACES)], rng, fresh=i % 7 == 3))
    for _ in range(signals):
        cases.append(signal_case(rng))
    with tmpfs("6m") as (mount, why):
        if mount is None:
            cases.append(Case("full disk", "mount a tmpfs", problems=[f"cannot mount a tmpfs: {why}"]))
        else:
            cases.append(disk_case(mount, rng, 0, before_start=True))
            for i in range(1, disk + 1):
                cases.append(disk_case(mount, rng, i))
    if quick:
        with ScriptedProvider() as provider:
            for name in TAMPERS:
                cases.append(tamper_case(name, provider))
            cases += env_cases(provider)
            cases += issue_cases(provider)
        cases += hostile_text_cases()
    if hostile:
        cases += hostile_cases()
    groups = {}
    for c in cases:
        groups[c.group] = groups.get(c.group, 0) + 1
    figures = {
        "cases": len(cases), "by_group": groups,
        "races_refused_while_the_other_held_the_run": sum(c.note.startswith("refused") for c in cases),
        "writes_doubled": sum(c.writes_doubled for c in cases),
        "turns_paid_twice": sum(c.turns_paid_twice for c in cases),
        "turns_lost_to_a_second_signal": sum(c.turns_lost_to_a_second_signal for c in cases),
        "second_signals": sum(c.group == "signal" and "x2" in c.name for c in cases),
        "runs_lost": sum(c.run_lost for c in cases),
        "tracebacks": sum(c.tracebacks for c in cases),
        "tracebacks_from_python_start_up": sum(c.startup_tracebacks for c in cases),
        "cases_with_problems": sum(bool(c.problems) for c in cases),
        "races_on_fresh_interpreters": sum(c.group == "race" and c.fresh for c in cases),
        "signals_on_fresh_interpreters": sum(c.group == "signal" and c.fresh for c in cases),
        "signals_stopping_a_run": sum(c.group == "signal" and c.note.startswith("stopped") for c in cases),
        "full_disk_stops": sum(c.group == "full disk" and c.note.startswith("stopped") for c in cases),
    }
    return {"figures": figures, "cases": cases, "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--races", type=int, default=100)
    p.add_argument("--signals", type=int, default=24)
    p.add_argument("--disk", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-hostile", action="store_true", help="leave out tests/test_hostile.py (issue 20)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--fresh", action="store_true", help="every child a fresh interpreter (no fork server)")
    a = p.parse_args(argv)
    result = campaign(a.races, a.signals, a.disk, a.seed, hostile=not a.no_hostile, warm_children=not a.fresh)
    if a.json:
        print(json.dumps(result["figures"], indent=1))
    else:
        for c in result["cases"]:
            flag = "FAIL" if c.problems else "ok  "
            print(f"{flag} {c.group:<15} {c.name[:60]:<60} {c.note[:70]}")
            for problem in c.problems:
                print(f"       {problem[:200]}")
        print(json.dumps(result["figures"]), f"in {result['seconds']} s")
    return 1 if result["figures"]["cases_with_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
