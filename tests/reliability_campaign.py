"""Crash anywhere, resume exactly once; faults and bad input never lose a run. Measured.

    python tests/reliability_campaign.py                 # the figures of docs/reliability.md
    python tests/reliability_campaign.py --kills 400 --seed 7 --json

Three campaigns, each a real run of the harness, none of their figures typed in by hand:

* **crashes**: a run of ``plan``, ``destructive`` (approved) or ``runaway`` (cap 6) is driven through
  ``python -m harness_lib run`` / ``resume`` child processes against a scripted provider in this process,
  and the children are killed with SIGKILL: at every event boundary of the trace (after each turn, tool
  start, tool result, approval, stop, and after each state save: ``HARNESS_CRASH_AT``, see
  ``harness_lib.seam``) and at random instants. After each kill the state file must load and
  the trace must read; the run is then continued from disk the way an operator would (``resume``,
  ``resume --approve`` when it is waiting for approval, ``run`` again if it died before its first save)
  until it ends. Four chains in five start their children from a fork server that has imported the harness
  once (``tests/warm.py``: a forked child is still a process of its own, SIGKILLed alone, but skips the 0.3 s
  of Python's start-up); every fifth chain, at boundaries and at random instants, runs them on fresh
  interpreters, so kills during the real ``python -m harness_lib`` start-up stay covered (``--fresh``: all
  of them). Each chain is compared with a run that never crashed: same status, turns, tokens, dollars,
  transcript, files, and deletions (exactly once). A turn the provider answered whose reply died with the
  process is a real cost: it is counted as *paid but lost to a kill*, apart from a turn paid twice in the
  transcript (which must never happen). Some kills also leave a torn line at the end of the trace or of
  the delete journal, as a write cut short would. ``tests/test_crash.py`` runs it and checks every chain.
* **faults**: the provider answers 429 (with Retry-After), 500, 502, 503, drops the connection, stalls
  past the timeout, refuses (400, 401, 403) or answers garbage or truncated JSON (``FAULT_CASES``; each is
  a test of ``tests/test_faults.py``).
* **bad input**: malformed tool arguments, unknown tools, tools raising anything or returning non-text,
  paths that escape the workspace, broken state files, decisions that do not fit, limits that make no
  sense, torn trace and journal lines: the parametrised tests of ``tests/test_bad_input.py``, which this
  script runs with pytest and counts.

The crash and fault checks collect every difference as a problem (no ``assert``), and the bad-input tests
are pytest's asserts, which ``python -O`` would strip: the script refuses to run under ``-O``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import warm

from harness_lib.loop import Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import StateFileError, load, new_run, state_path
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python tests/reliability_campaign.py"
BAD_INPUT_TESTS = Path(__file__).resolve().parent / "test_bad_input.py"
RUN_ID = "crash"
READ_ONLY_TOOLS = {"list_files", "read_file", "scan_archive"}

# =====================================================================================================
# 1. Crashes
# =====================================================================================================
@dataclass(frozen=True)
class Scenario:
    name: str
    max_turns: int | None = None
    approve: str | None = None  # the call a person approves when the run stops for approval


SCENARIOS = {s.name: s for s in (Scenario("plan"), Scenario("destructive", approve="c2"),
                                 Scenario("runaway", max_turns=6))}


@dataclass
class Process:
    role: str                  # run | approve | resume
    kill: str | None           # "tool_start:2", "save:3", "after:0.213", "saved+0.041" (see _spawn), or None
    killed: bool
    returncode: int
    seconds: float
    new_events: int            # trace lines this process added
    new_requests: int          # requests the provider answered while it lived
    wall_ms: float | None = None
    stderr: str = ""


@dataclass
class Chain:
    scenario: str
    kind: str                  # reference | boundary | random
    target: str = ""           # boundary: "role/type:n"
    processes: list[Process] = field(default_factory=list)
    fresh: bool = True         # its children were fresh interpreters (else forked by tests/warm.py)
    final: dict | None = None
    requests: int = 0
    deleted: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    torn: int = 0              # torn lines this chain left at the end of the trace or journal
    stray_temp_files: int = 0
    lost_turns: int = 0        # requests the provider answered beyond the uncrashed run's turns
    problems: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(p.killed for p in self.processes)


def _final(state) -> dict:
    return {"status": state.status, "interruption": state.interruption, "turns": state.turns,
            "prompt_tokens": state.prompt_tokens, "completion_tokens": state.completion_tokens,
            "cost_usd": state.total_cost_usd, "per_turn": state.per_turn, "output": state.output,
            "error": state.error, "tool_runs": state.tool_runs, "messages": state.messages}


def _next_role(state_dir: Path, scenario: Scenario) -> str | None:
    """What an operator does next with the run on disk: None once it has ended."""
    if not state_path(state_dir, RUN_ID).exists():
        return "run"  # died before its first save: nothing was paid, nothing ran; start it again
    state = load(state_dir, RUN_ID)
    waiting = (state.interruption or {}).get("type") == "approval" and state.status == "interrupted"
    if waiting and scenario.approve and state.interruption["callId"] not in state.approved:
        return "approve"
    return "resume" if state.status in ("running", "interrupted") else None


def _command(role: str, scenario: Scenario, base_url: str, state_dir: Path, trace: Path, ws: Workspace) -> list:
    common = ["--base-url", base_url, "--state-dir", str(state_dir), "--trace", str(trace), "--json"]
    common += ["--max-turns", str(scenario.max_turns)] if scenario.max_turns else []
    if role == "run":
        return [sys.executable, "-m", "harness_lib", "run", scenario.name, "--run-id", RUN_ID,
                "--workspace", str(ws.root), *common]
    return [sys.executable, "-m", "harness_lib", "resume", RUN_ID, *common,
            *(["--approve", scenario.approve] if role == "approve" else [])]


def _file_id(path: Path):
    try:
        st = path.stat()
        return st.st_ino, st.st_mtime_ns
    except FileNotFoundError:
        return None


_launcher: warm.Launcher | None = None  # set by crash_campaign: the fork server its warm chains start from


def _spawn(cmd: list, kill: str | None, state_file: Path, fresh: bool) -> tuple[bool, int, float, str, str]:
    """Run one child, a fresh interpreter or forked warm. ``kill``: "type:n" (the crash seam), "after:S"
    (SIGKILL S seconds after the spawn), "saved+S" (SIGKILL S seconds after the child's first state save,
    i.e. once its run has begun)."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_CRASH_AT"}
    timed = kill and (kill.startswith("after:") or kill.startswith("saved+"))
    if kill and not timed:
        env["HARNESS_CRASH_AT"] = kill
    before = _file_id(state_file)
    started = time.perf_counter()
    launch = subprocess.Popen if fresh or _launcher is None else _launcher
    child = launch(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if timed:
        delay = float(kill.split(":")[1] if kill.startswith("after:") else kill.split("+")[1])
        if kill.startswith("saved+"):
            while child.poll() is None and _file_id(state_file) == before and time.perf_counter() - started < 30:
                time.sleep(0.001)
        try:
            child.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
    out, err = child.communicate(timeout=120)
    seconds = time.perf_counter() - started
    return child.returncode == -signal.SIGKILL, child.returncode, seconds, out, err


def tear_line(path: Path, fragment: bytes):
    """Append what a write cut short leaves: a fragment with no newline."""
    with open(path, "ab") as f:
        f.write(fragment)


def drive(scenario_name: str, kill_for: Callable[[str, list[Process]], str | None], *, kind: str,
          target: str = "", latency_ms: float = 0.0, tear: Callable[[int], bool] = lambda i: False,
          max_processes: int = 40, fresh: bool = True) -> Chain:
    """Drive one run to its end through child processes (fresh interpreters, or forked warm), killing the
    ones ``kill_for`` says to."""
    scenario = SCENARIOS[scenario_name]
    chain = Chain(scenario_name, kind, target, fresh=fresh or _launcher is None)
    with tempfile.TemporaryDirectory(prefix="harness-crash-") as tmp, \
            ScriptedProvider(latency_ms=latency_ms) as provider:
        tmp = Path(tmp)
        ws = Workspace.copy_of(into=tmp)
        state_dir, trace_path = tmp / "runs", tmp / "trace.jsonl"
        while len(chain.processes) < max_processes:
            try:
                role = _next_role(state_dir, scenario)
            except StateFileError as e:
                chain.problems.append(f"state file unusable after process {len(chain.processes)}: {e}")
                break
            if role is None:
                break
            kill = kill_for(role, chain.processes)
            lines_before = len(read(trace_path)) if trace_path.exists() else 0
            requests_before = provider.requests
            killed, code, seconds, out, err = _spawn(
                _command(role, scenario, provider.base_url, state_dir, trace_path, ws), kill,
                state_path(state_dir, RUN_ID), chain.fresh)
            try:
                lines_after = len(read(trace_path)) if trace_path.exists() else 0
            except ValueError as e:
                chain.problems.append(f"trace unreadable after process {len(chain.processes) + 1}: {e}")
                break
            wall = None
            if code == 0:
                with contextlib.suppress(ValueError, IndexError):
                    wall = json.loads(out.splitlines()[-1])["wall_ms"]
            chain.processes.append(Process(role, kill, killed, code, seconds, lines_after - lines_before,
                                           provider.requests - requests_before, wall, err[-400:]))
            if code not in (0, -signal.SIGKILL):
                chain.problems.append(f"{role} exited {code}: {err.strip()[-300:]}")
                break
            if killed and tear(len(chain.processes)):
                tear_line(trace_path, b'{"runId":"crash","type":"tool_res')  # the write a kill cut short
                chain.torn += 1
                if ws.journal.exists():
                    tear_line(ws.journal, b'{"op":"delete","key":"crash:c')
                    chain.torn += 1
        else:
            chain.problems.append(f"did not end within {max_processes} processes")
        try:
            chain.final = _final(load(state_dir, RUN_ID))
        except StateFileError as e:
            chain.problems.append(f"final state: {e}")
        chain.requests = provider.requests
        chain.deleted, chain.files = ws.deleted, ws.files()
        chain.events = read(trace_path) if trace_path.exists() else []
        chain.stray_temp_files = len(list(state_dir.glob(".*.tmp"))) if state_dir.exists() else 0
    return chain


def compare(chain: Chain, ref: Chain) -> Chain:
    """Fill ``chain.problems`` with every way it differs from the run that never crashed."""
    if chain.final is not None:
        for key, value in ref.final.items():
            if chain.final[key] != value:
                chain.problems.append(f"{key}: {str(chain.final[key])[:80]} != {str(value)[:80]} (uncrashed)")
    if chain.files != ref.files:
        chain.problems.append(f"files {chain.files} != {ref.files}")
    if chain.deleted != ref.deleted:
        chain.problems.append(f"deletions {chain.deleted} != {ref.deleted}: not exactly once")
    chain.lost_turns = chain.requests - ref.requests
    if not 0 <= chain.lost_turns <= chain.kills:
        chain.problems.append(f"{chain.requests} requests for {ref.requests} turns and {chain.kills} kills")
    return chain


def _event_counts(chain: Chain) -> dict[str, Counter]:
    """For each role of the uncrashed run, how many trace events of each type its process wrote."""
    counts, i = {}, 0
    for p in chain.processes:
        counts[p.role] = Counter(e["type"] for e in chain.events[i:i + p.new_events])
        i += p.new_events
    return counts


def _first_kill_of(role: str, spec: str) -> Callable[[str, list[Process]], str | None]:
    def kill_for(r: str, done: list[Process]) -> str | None:
        return spec if r == role and not any(p.kill for p in done) else None
    return kill_for


def boundary_chain(name: str, ref: Chain, role: str, spec: str, tear: bool = False, fresh: bool = False) -> Chain:
    """Kill the first ``role`` process of the run right after its event ``spec`` ("tool_result:2")."""
    return compare(drive(name, _first_kill_of(role, spec), kind="boundary", target=f"{role}/{spec}",
                         tear=lambda i: tear, fresh=fresh), ref)


def save_chains(name: str, ref: Chain, role: str) -> list[Chain]:
    """Kill the ``role`` process right after each of its state saves, counting up until a kill no
    longer lands (the process saved fewer times; that last run is not a kill and is not kept)."""
    chains = []
    while not chains or chains[-1].kills:
        chains.append(boundary_chain(name, ref, role, f"save:{len(chains) + 1}"))
    return chains[:-1]


def random_chain(name: str, ref: Chain, seed: int, windows: dict[str, tuple[float, float]],
                 latency_ms: float, fresh: bool = False) -> Chain:
    """Kill the first few processes of the run at random instants, then let it finish. Three kills in
    four fall uniformly within the run itself (after the process's first save, over as long as the
    uncrashed run took); the fourth anywhere in the process's life, start-up included."""
    rng = random.Random(seed)
    budget = rng.randint(2, 6)

    def kill_for(role: str, done: list[Process]) -> str | None:
        if len(done) >= budget:
            return None
        life, run_s = windows.get(role, windows["run"])
        if rng.random() < 0.25:
            return f"after:{rng.uniform(0, life):.3f}"
        return f"saved+{rng.uniform(0, run_s):.3f}"
    chain = drive(name, kill_for, kind="random", target=f"seed {seed}", latency_ms=latency_ms,
                  tear=lambda i: rng.random() < 0.3, fresh=fresh)
    return compare(chain, ref)


def _windows(ref: Chain) -> dict[str, tuple[float, float]]:
    """For each role of the uncrashed run: (its process's whole life, its run's own duration), seconds."""
    return {p.role: (p.seconds, (p.wall_ms or 0) / 1000 + 0.01) for p in reversed(ref.processes)}


def crash_campaign(min_kills: int = 200, seed: int = 0, workers: int | None = None,
                   latency_ms: float = 15.0, warm_children: bool = True) -> dict:
    """Every boundary of every role of the three scenarios, then random-instant chains until
    ``min_kills`` kills have landed. Returns the figures and every chain. With ``warm_children`` (the
    default), four chains in five start their children from the fork server of ``tests/warm.py``
    (no 0.3 s of Python start-up each); the fifth (``FRESH_EVERY``) on fresh interpreters, so kills during
    the real ``python -m harness_lib`` start-up, and at boundaries after it, stay in the campaign."""
    global _launcher
    with contextlib.ExitStack() as stack:
        _launcher = stack.enter_context(warm.Launcher()) if warm_children else None
        try:
            return _crash_campaign(min_kills, seed, workers, latency_ms)
        finally:
            _launcher = None


FRESH_EVERY = 5  # with a fork server, every 5th boundary chain and every 5th random chain runs fresh


def _crash_campaign(min_kills: int, seed: int, workers: int | None, latency_ms: float) -> dict:
    workers = workers or max(2, os.cpu_count() or 2)
    started = time.perf_counter()
    no_kill = lambda role, done: None  # noqa: E731
    with ThreadPoolExecutor(workers) as pool:
        refs = dict(zip(SCENARIOS, pool.map(lambda n: drive(n, no_kill, kind="reference", fresh=False), SCENARIOS),
                        strict=True))

        def timed_refs(fresh: bool) -> dict[str, Chain]:  # the random windows, timed as the chains will run
            return dict(zip(SCENARIOS, pool.map(lambda n: drive(n, no_kill, kind="reference", latency_ms=latency_ms,
                                                                fresh=fresh), SCENARIOS), strict=True))
        timed = {False: timed_refs(False), True: timed_refs(True) if _launcher else {}}
        for name, ref in [*refs.items(), *timed[False].items(), *timed[True].items()]:
            if ref.problems or ref.kills:
                raise RuntimeError(f"the uncrashed {name} run went wrong: {ref.problems}")
        jobs, boundaries = [], 0
        for name in SCENARIOS:
            for role, kinds in _event_counts(refs[name]).items():
                jobs.append(pool.submit(save_chains, name, refs[name], role))
                for kind, count in sorted(kinds.items()):
                    for n in range(1, count + 1):
                        jobs.append(pool.submit(boundary_chain, name, refs[name], role, f"{kind}:{n}",
                                                tear=boundaries % 4 == 0,  # every 4th leaves torn lines
                                                fresh=boundaries % FRESH_EVERY == 2))
                        boundaries += 1

        def random_batch(first: int, kills_wanted: int) -> list:
            names = list(SCENARIOS) * max(1, math.ceil(kills_wanted / 9))  # a chain lands ~3 kills
            fresh = [(first + k) % FRESH_EVERY == 0 and _launcher is not None for k in range(len(names))]
            return [pool.submit(random_chain, name, timed[f][name], seed * 100_000 + first + k,
                                _windows(timed[f][name]), latency_ms, f)
                    for k, (name, f) in enumerate(zip(names, fresh, strict=True))]
        # Random chains go in with the boundary ones, to keep every worker busy; top up if short.
        jobs += random_batch(0, min_kills - 2 * boundaries)
        chains, submitted = [], len(jobs)
        for j in jobs:
            result = j.result()
            chains += result if isinstance(result, list) else [result]
        while sum(c.kills for c in chains) < min_kills:
            batch = random_batch(submitted, min_kills - sum(c.kills for c in chains))
            submitted += len(batch)
            chains += [j.result() for j in batch]
    return {"figures": crash_figures(chains, refs), "chains": chains, "refs": refs,
            "seconds": time.perf_counter() - started}


def crash_figures(chains: list[Chain], refs: dict[str, Chain]) -> dict:
    def reruns(chain: Chain, read_only: bool) -> int:
        starts = Counter((e["callId"], e["toolName"]) for e in chain.events if e["type"] == "tool_start")
        return sum(n - 1 for (cid, tool), n in starts.items() if (tool in READ_ONLY_TOOLS) == read_only)

    killed = [p for c in chains for p in c.processes if p.killed]
    return {
        "kills": len(killed),
        "kills_at_boundaries": sum(c.kills for c in chains if c.kind == "boundary"),
        "kills_at_random_instants": sum(c.kills for c in chains if c.kind == "random"),
        "random_kills_after_the_run_began": sum(
            1 for c in chains if c.kind == "random" for p in c.processes
            if p.killed and (p.kill.startswith("saved+") or p.new_events or p.new_requests)),
        "kills_by_scenario": dict(Counter(c.scenario for c in chains for p in c.processes if p.killed)),
        "chains": len(chains),
        "kills_on_fresh_interpreters": sum(c.kills for c in chains if c.fresh),
        "random_kills_on_fresh_interpreters": sum(c.kills for c in chains if c.fresh and c.kind == "random"),
        "processes_on_fresh_interpreters": sum(len(c.processes) for c in chains if c.fresh),
        "processes": sum(len(c.processes) for c in chains),
        "runs_lost": sum(1 for c in chains if c.problems),
        "writes_duplicated": sum(max(0, len(c.deleted) - len(refs[c.scenario].deleted)) for c in chains),
        "deletions_exactly_once": sum(1 for c in chains if c.scenario == "destructive" and c.deleted == ["access.log"]),
        "destructive_chains": sum(1 for c in chains if c.scenario == "destructive"),
        "turns_paid_twice_in_transcript": sum(max(0, c.final["turns"] - refs[c.scenario].final["turns"])
                                              for c in chains if c.final),
        "turns_paid_but_lost_to_a_kill": sum(c.lost_turns for c in chains),
        "reads_run_again": sum(reruns(c, True) for c in chains),
        "writes_run_again_answered_from_the_journal": sum(reruns(c, False) for c in chains),
        "torn_lines_left_and_survived": sum(c.torn for c in chains),
        "stray_temp_state_files": sum(c.stray_temp_files for c in chains),
        "problems": [f"{c.scenario} {c.kind} {c.target}: {p}" for c in chains for p in c.problems][:20],
    }


# =====================================================================================================
# 2. Faults from the provider
# =====================================================================================================
@dataclass(frozen=True)
class FaultCase:
    name: str
    faults: tuple[str, ...]
    status: str                      # what the run must end as
    retries: int                     # how many retries the trace must record
    error: str = ""                  # a piece of the recorded error
    options: dict = field(default_factory=dict)
    served_but_unanswered: int = 0   # requests the provider finished after the client stopped waiting
    max_seconds: float = 5.0         # a timeout is a timeout, not a hang


FAST = {"backoff_s": 0.02}
FAULT_CASES = [
    FaultCase("429 honours Retry-After", ("429:0.3",), "completed", 1, options=FAST),
    FaultCase("500 ends the run: a retry cannot fix it", ("500",), "failed", 0, "HTTP 500: Injected fault"),
    FaultCase("502 is retried", ("502",), "completed", 1, options=FAST),
    FaultCase("503 is retried", ("503",), "completed", 1, options=FAST),
    FaultCase("a dropped connection is retried", ("drop",), "completed", 1, options=FAST),
    FaultCase("a timeout is retried, not waited out", ("slow:1.2",), "completed", 1,
              options={**FAST, "timeout_s": 0.3}, served_but_unanswered=1, max_seconds=1.1),
    FaultCase("mixed faults mid-run", ("slow:0", "503", "429:0.05", "drop", "504", "slow:0", "502"),
              "completed", 5, options=FAST),
    FaultCase("retries are bounded (503 x3, 2 retries)", ("503", "503", "503"), "interrupted", 2,
              "gave up after 3 attempts; last: HTTP 503", {**FAST, "max_retries": 2}),
    FaultCase("timeouts are bounded (2 stalls, 1 retry)", ("slow:1", "slow:1"), "interrupted", 1, "timeout",
              {**FAST, "timeout_s": 0.25, "max_retries": 1}, served_but_unanswered=2, max_seconds=0.9),
    FaultCase("401 ends the run", ("401",), "failed", 0, "HTTP 401: Injected fault"),
    FaultCase("403 ends the run", ("403",), "failed", 0, "HTTP 403: Injected fault"),
    FaultCase("400 ends the run", ("400",), "failed", 0, "HTTP 400: Injected fault"),
    FaultCase("401 mid-run keeps what was paid", ("slow:0", "401"), "failed", 0, "HTTP 401"),
    FaultCase("garbage body", ("garbage",), "failed", 0, "a body that is not JSON"),
    FaultCase("truncated JSON", ("truncated",), "failed", 0, "a body that is not JSON"),
]


def run_fault_case(case: FaultCase, reference: dict | None = None) -> dict:
    """Run ``plan`` against a provider playing ``case.faults``; return what happened, and the ways it
    differs from what the case demands (``problems``)."""
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory(prefix="harness-fault-") as tmp:
        provider.inject(*case.faults)
        trace = Trace(timestamps=False)
        started = time.perf_counter()
        state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of(into=tmp).tools(),
                                Options(base_url=provider.base_url, trace=trace, state_dir=tmp, **case.options)))
        seconds = time.perf_counter() - started
        deadline = time.monotonic() + 3  # a stalled request the client gave up on may still be served
        while provider.requests < state.turns + case.served_but_unanswered and time.monotonic() < deadline:
            time.sleep(0.02)
        saved = load(tmp, state.run_id)
        retries = [e for e in trace.events if e["type"] == "retry"]
        stopped = [e for e in trace.events if e["type"] == "run_stopped"]
        problems = []
        if state.status != case.status:
            problems.append(f"status {state.status}, expected {case.status} ({state.error})")
        if len(retries) != case.retries:
            problems.append(f"{len(retries)} retries in the trace, expected {case.retries}")
        if case.error and case.error not in (state.error or ""):
            problems.append(f"error {state.error!r} does not say {case.error!r}")
        if state.status == "failed" and (state.resumable or stopped[-1].get("error") != state.error):
            problems.append("a failed run must record its error in the trace and not be resumable")
        if provider.requests != state.turns + case.served_but_unanswered:
            problems.append(f"provider answered {provider.requests} requests for {state.turns} turns")
        if reference and state.status == "completed" and \
                (state.turns, state.own_cost_usd, state.messages) != (reference["turns"], reference["cost_usd"],
                                                                  reference["messages"]):
            problems.append(f"turns {state.turns} / cost {state.own_cost_usd} differ from the run without faults")
        if saved.to_dict() != state.to_dict():
            problems.append("the state on disk is not the state returned")
        if seconds > case.max_seconds:
            problems.append(f"took {seconds:.2f} s, more than {case.max_seconds} s")
        retry_after = [float(f.split(":")[1]) for f in case.faults if f.startswith("429:")]
        for r in retries:
            if r["problem"].startswith("HTTP 429"):
                if r["delayS"] != retry_after.pop(0):
                    problems.append(f"Retry-After not honoured: waited {r['delayS']} s")
            else:  # bounded, jittered exponential backoff
                base = min(case.options.get("backoff_s", 0.25) * 2 ** (r["attempt"] - 1), 8.0)
                if not base / 2 <= r["delayS"] <= base:
                    problems.append(f"backoff {r['delayS']} s outside [{base / 2}, {base}]")
        return {"case": case.name, "faults": list(case.faults), "status": state.status, "turns": state.turns,
                "retries": len(retries), "error": state.error, "seconds": round(seconds, 3),
                "requests": provider.requests, "problems": problems}


def fault_campaign() -> dict:
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory() as tmp:
        ref = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of(into=tmp).tools(),
                              Options(base_url=provider.base_url)))
    reference = {"turns": ref.turns, "cost_usd": ref.own_cost_usd, "messages": ref.messages}
    results = [run_fault_case(c, reference) for c in FAULT_CASES]
    return {"faults_injected": sum(f != "slow:0" for c in FAULT_CASES for f in c.faults),  # slow:0 = no fault
            "cases": len(results),
            "cases_as_specified": sum(not r["problems"] for r in results),
            "runs_lost": sum(1 for r in results if r["problems"]), "results": results}



# =====================================================================================================
# 3. Bad input: the parametrised tests of tests/test_bad_input.py, run with pytest and counted
# =====================================================================================================
class _Tally:
    """A pytest plugin that keeps each test's outcome."""

    def __init__(self):
        self.outcomes: dict[str, str] = {}
        self.failures: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.outcomes.setdefault(report.nodeid, report.outcome)
            if report.outcome != "passed":  # a failure in setup, call or teardown, or a skip
                self.outcomes[report.nodeid] = report.outcome
                self.failures[report.nodeid] = str(report.longrepr).strip().splitlines()[-1][:200]


def bad_input_campaign() -> dict:
    import pytest  # the test extra; only this campaign needs it

    tally = _Tally()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        code = pytest.main([str(BAD_INPUT_TESTS), "-q", "-p", "no:cacheprovider"], plugins=[tally])
    groups = Counter(nodeid.split("::")[-1].split("[")[0] for nodeid in tally.outcomes)
    passed = sum(outcome == "passed" for outcome in tally.outcomes.values())
    results = [{"case": nodeid.split("::")[-1], "outcome": outcome, "problem": tally.failures.get(nodeid)}
               for nodeid, outcome in tally.outcomes.items()]
    problems = [r for r in results if r["outcome"] != "passed"]
    if not tally.outcomes:
        problems.append({"case": str(BAD_INPUT_TESTS), "outcome": "error", "problem": f"pytest exited {code}"})
    return {"bad_inputs_tried": len(results), "handled": passed, "crashes": len(problems),
            "by_test": dict(groups), "results": results}

# =====================================================================================================
# The report
# =====================================================================================================
def measure(min_kills: int = 200, seed: int = 0, workers: int | None = None, warm_children: bool = True) -> dict:
    started = time.perf_counter()
    crashes = crash_campaign(min_kills, seed, workers, warm_children=warm_children)
    faults = fault_campaign()
    bad = bad_input_campaign()
    c = crashes["figures"]
    return {
        "kills_survived": sum(ch.kills for ch in crashes["chains"] if not ch.problems),
        "faults_injected": faults["faults_injected"],
        "bad_inputs_tried": bad["bad_inputs_tried"],
        "runs_lost": c["runs_lost"] + faults["runs_lost"] + bad["crashes"],
        "writes_duplicated": c["writes_duplicated"],
        "crashes": c, "faults": {k: v for k, v in faults.items()},
        "bad_input": bad, "seconds": round(time.perf_counter() - started, 1),
        "command": f"{COMMAND} --kills {min_kills} --seed {seed}",
    }


def report(m: dict) -> str:
    c, f, b = m["crashes"], m["faults"], m["bad_input"]
    lines = [
        f"kills survived:     {c['kills']} SIGKILLs ({c['kills_at_boundaries']} at event boundaries, "
        f"{c['kills_at_random_instants']} at random instants, {c['random_kills_after_the_run_began']} of those "
        f"after the run had begun) "
        f"over {c['chains']} runs and {c['processes']} processes; "
        + ", ".join(f"{k} {v}" for k, v in sorted(c["kills_by_scenario"].items())),
        f"faults injected:    {m['faults_injected']} in {f['cases']} cases, "
        f"{f['cases_as_specified']} ended as specified",
        f"bad inputs tried:   {m['bad_inputs_tried']}, {b['handled']} answered or refused as specified ("
        + ", ".join(f"{test} {n}" for test, n in b["by_test"].items()) + ")",
        f"runs lost:          {m['runs_lost']}",
        f"writes duplicated:  {m['writes_duplicated']} (destructive runs deleting access.log exactly once: "
        f"{c['deletions_exactly_once']} of {c['destructive_chains']})",
        f"turns paid twice in a transcript: {c['turns_paid_twice_in_transcript']}",
        f"turns paid but lost to a kill:    {c['turns_paid_but_lost_to_a_kill']} (the provider answered, the "
        f"process died before saving the reply; the resumed run asked again)",
        f"reads run again after a kill:     {c['reads_run_again']}; writes run again and answered from the "
        f"journal: {c['writes_run_again_answered_from_the_journal']}",
        f"torn lines left by kills, survived: {c['torn_lines_left_and_survived']}",
        f"measured in {m['seconds']} s; reproduce: {m['command']}",
    ]
    problems = c["problems"] + [f"fault {r['case']}: {r['problems']}" for r in f["results"] if r["problems"]] + \
        [f"bad input {r['case']}: {r['problem']}" for r in b["results"] if r["problem"]]
    return "\n".join(lines + [f"PROBLEM {p}" for p in problems])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=200, help="at least this many SIGKILLs (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int)
    p.add_argument("--fresh", action="store_true", help="every child a fresh interpreter (no fork server)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if sys.flags.optimize:
        p.error("run it without -O: the bad-input checks are asserts, which -O removes")
    m = measure(args.kills, args.seed, args.workers, warm_children=not args.fresh)
    if args.json:
        print(json.dumps(m, default=str))
    else:
        print(report(m))
    return 0 if m["runs_lost"] == 0 and m["writes_duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
