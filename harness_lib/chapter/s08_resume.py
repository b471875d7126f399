"""Notebook 08, persist and resume: a run in a child process killed with SIGKILL, restored and finished here.

The notebook writes save, load, pending and a loop that drains what is owed before it asks, stops its own run at an
event of the run (``stop_when``) and resumes it from disk; what it does not show stays here: the child process
killed with SIGKILL and its run resumed in this one through ``runs.resume``, as ``python -m harness_lib resume``
resumes it (``resume_after_kill``), with the figures beside the chapter's.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from .. import runs
from ..scripted import ScriptedProvider
from ..state import RunState, StateFileError, load
from ..trace import read
from ..workspace import Workspace
from . import params
from .common import Measured
from .figures import relabel
from .language import C_, N_, _
from .stop_button import all_or_nothing

PLAN_TOOL_RESULTS = 2  # the plan run: list_files, then read_file, then the answer
HOLD_MS = 400  # the provider holds each request this long, so a stop lands while the run waits for a turn
PARAMETERS = {"KILL_AFTER_TOOL_RESULTS": params.Whole(1, PLAN_TOOL_RESULTS),
              "HOLD_MS": params.Number(0, 1000, closed=True, unit=" ms")}  # 1 s a held turn: two before the kill


async def stop_when(coro, moment: Callable[[], bool], reason: str = "stopped by the cell", poll_s: float = 0.005):
    """Run ``coro`` and cancel it (Stop, pressed by the cell) the first time ``moment()`` is true: at an event of
    the run, checked every ``poll_s``, never at a wall-clock instant. Returns (what the run returned, or None if the
    cancellation ended it; whether it was stopped, rather than ending first). However the cell ends, its own Stop
    included, the run does not outlive it."""
    task = asyncio.ensure_future(coro)
    try:
        while not task.done() and not moment():
            await asyncio.wait({task}, timeout=poll_s)
        stopped = not task.done()
        if stopped:
            task.cancel(reason)
            await asyncio.wait({task})
        return (None if task.cancelled() else task.result()), stopped
    finally:
        if not task.done():
            task.cancel(reason)


def results_on_disk(path: str | Path) -> int:
    """How many tool results the run saved as plain JSON in ``path`` holds (0 while there is no file). The
    notebook's ``save`` renames a whole file into place, so a reader never sees half of one."""
    try:
        return sum(m.get("role") == "tool" for m in json.loads(Path(path).read_text())["messages"])
    except FileNotFoundError:
        return 0


class ResumeAfterKill(NamedTuple):
    """08: a run killed in a child process, restored from disk and finished here."""
    table: pd.DataFrame     # the run as restored, then as finished
    events: list            # the trace's events, both processes
    measured: Measured
    restored: RunState      # the run as the killed child left it on disk
    finished: RunState      # the same run, finished here (or by the child, when it ended before the kill)


@all_or_nothing
async def resume_after_kill(base_url: str, workdir: str | Path | None = None, kill_after_tool_results: int = 2,
                            hold_ms: float = HOLD_MS) -> ResumeAfterKill:
    """Start ``plan`` in a child process (``python -m harness_lib run``), SIGKILL it once its
    ``kill_after_tool_results``-th tool result is on disk (while it waits for the next turn, held ``hold_ms``
    by its provider, which this process serves), and resume the run here as an operator does
    (``runs.resume``: its lock, its ledger, the options it was started with, that held provider among them).
    ``base_url``, the provider every chapter experiment is given, is not the one this run was started
    against, so the resume does not use it: moving the run there would be a change of its options, recorded
    and traced with the two servers' ports. Without ``workdir`` everything happens in a temporary folder
    that is gone when this returns (the table and the trace's events are returned in memory)."""
    params.check(PARAMETERS, KILL_AFTER_TOOL_RESULTS=kill_after_tool_results, HOLD_MS=hold_ms)
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="harness-resume-") as tmp:
            return await _resume_after_kill(base_url, Path(tmp), kill_after_tool_results, hold_ms)
    return await _resume_after_kill(base_url, Path(workdir), kill_after_tool_results, hold_ms)


async def _resume_after_kill(base_url: str, workdir: Path, kill_after_tool_results: int,
                             hold_ms: float) -> ResumeAfterKill:
    state_dir, trace_path = workdir / "runs", workdir / "trace.jsonl"
    workspace = Workspace.copy_of(into=workdir)
    run_id = "resume-demo"
    with ScriptedProvider(latency_ms=hold_ms) as slow_provider:   # holds the child inside its next call
        child = subprocess.Popen(
            [sys.executable, "-m", "harness_lib", "run", "plan", "--base-url", slow_provider.base_url,
             "--state-dir", str(state_dir), "--trace", str(trace_path), "--run-id", run_id,
             "--workspace", str(workspace.root), "--max-turns", "20", "--json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            # Wait for the checkpoint, not the trace line: the loop writes the tool_result line first and
            # saves the state right after it, so a kill in between would lose a result the trace shows.
            while (time.monotonic() < deadline and child.poll() is None
                   and _saved_tool_results(state_dir, run_id) < kill_after_tool_results):
                await asyncio.sleep(0.005)
            killed = child.poll() is None
            if killed:
                child.send_signal(signal.SIGKILL)
        finally:  # Stop pressed, or anything else: never leave the child behind
            if child.poll() is None:
                child.kill()
            child.wait()
        moment = (f"child killed (SIGKILL, exit {child.returncode})" if killed else
                  f"child ended by itself before the kill point (exit {child.returncode})")
        before = [f'{e["toolName"]}' + (f':{_path(e)}' if _path(e) else "")
                  for e in read(trace_path) if e["type"] == "tool_start"]
        restored = load(state_dir, run_id)
        snapshot = {"turns": restored.turns, "cost_usd": round(restored.own_cost_usd, 6),
                    "messages": len(restored.messages), "status": restored.status}
        # Resumed as an operator resumes it (runs.resume, what `python -m harness_lib resume` calls): owned
        # here (its lock), checked against the record the child's `run` left (its ledger), continued with the
        # options it was started with (its cap, its trace, the held provider it was started against).
        if restored.continuable:
            finished, last = (await runs.resume(state_dir, run_id)).state, C_("label", "resumed here and finished")
        else:  # the child ended the run between two looks at its state (a short hold): there is nothing to resume
            finished, last = restored, f"not resumed: the child's run is {restored.status}"
    events = read(trace_path)
    all_runs = [f'{e["toolName"]}' + (f':{_path(e)}' if _path(e) else "") for e in events if e["type"] == "tool_start"]
    so_far = _("tool runs so far")   # shown only; the moments stay English (code reads them)
    table = pd.DataFrame([
        {"moment": moment, **snapshot, so_far: ", ".join(before)},
        {"moment": last, "turns": finished.turns, "cost_usd": round(finished.own_cost_usd, 6),
         "messages": len(finished.messages), "status": finished.status,
         so_far: ", ".join(all_runs)}]).set_index("moment")
    measured = {"resume.restored_turns": snapshot["turns"], "resume.restored_cost": snapshot["cost_usd"],
                "resume.restored_messages": snapshot["messages"], "resume.restored_status": snapshot["status"],
                "resume.turns": finished.turns, "resume.cost": finished.own_cost_usd,
                "resume.status": finished.status, "resume.tool_runs": ", ".join(all_runs)}
    if not killed or kill_after_tool_results != 2:
        measured = relabel(measured, N_("killed elsewhere than the chapter") if killed else N_("never killed"))
    elif hold_ms != HOLD_MS:  # a reader's hold: the kill may land after the next turn is saved
        measured = relabel(measured, f"HOLD_MS={hold_ms:g}")
    return ResumeAfterKill(table, events, measured, restored, finished)


def _saved_tool_results(state_dir: Path, run_id: str) -> int:
    """How many tool results the run's state file on disk holds (0 while there is no file)."""
    try:
        return sum(m.get("role") == "tool" for m in load(state_dir, run_id).messages)
    except StateFileError:
        return 0


def _path(event: dict) -> str:
    try:
        return json.loads(event.get("args") or "{}").get("path", "")
    except ValueError:
        return ""
