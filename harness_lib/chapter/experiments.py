"""The experiments: one async function per chapter table.

Each takes the base URL of a running provider (start one with ``ScriptedProvider``), runs the harness
for real, and returns ``(table, measured)``: a DataFrame to show, and a dict of figure id -> value to
lay beside the chapter's (see ``figures.compare``). Nothing here is a constant posing as a measurement:
every number comes from a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stops
from ..loop import Options, run
from ..scripted import ScriptedProvider
from ..state import RunState, StateFileError, approve, load, new_run, reject
from ..subagent import research_tool
from ..tokens import compact, count
from ..trace import Trace, read
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from .figures import DATA


@dataclass
class Outcome:
    state: RunState
    workspace: Workspace
    wall_ms: float
    trace: Trace = field(default_factory=lambda: Trace(timestamps=False))

    @property
    def row(self) -> dict:
        s = self.state
        return {"status": s.status, "turns": s.turns, "tool_runs": s.tool_runs, "in": s.prompt_tokens,
                "out": s.completion_tokens, "cost_usd": round(s.total_cost_usd, 6),
                "answer": s.output if s.output is not None else ""}


async def scenario(base_url: str, name: str, *, workspace: Workspace | None = None, task: str = TASK,
                   tools=None, state: RunState | None = None, trace: Trace | None = None, **options) -> Outcome:
    """Run one scripted scenario on a fresh copy of the workspace (or the one given)."""
    workspace = workspace or Workspace.copy_of()
    trace = trace or Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, task, name)
    started = time.perf_counter()
    state = await run(state, tools if tools is not None else workspace.tools(),
                      Options(base_url=base_url, trace=trace, **options))
    return Outcome(state, workspace, (time.perf_counter() - started) * 1000, trace)


async def continue_run(base_url: str, out: Outcome, **options) -> Outcome:
    return await scenario(base_url, out.state.model, workspace=out.workspace, state=out.state, trace=out.trace,
                          **options)


# -- 1. the loop --------------------------------------------------------------------------------------
async def loop_plan(base_url: str, max_turns: int = 20):
    """The plan run. Timed once warm: the first run of a process also pays for imports and the first
    connection, which is not what the chapter's ``ms=89`` measures."""
    await scenario(base_url, "plan", max_turns=max_turns)
    out = await scenario(base_url, "plan", max_turns=max_turns)
    s = out.state
    transcript = pd.DataFrame([{"#": i, "role": m["role"],
                                "what": m.get("content") if m.get("content") is not None else
                                ", ".join(f'{c["function"]["name"]}({c["function"]["arguments"]})'
                                          for c in m.get("tool_calls", []))}
                               for i, m in enumerate(s.messages)])
    measured = {"plan.turns": s.turns, "plan.tools": s.tool_runs, "plan.in": s.prompt_tokens,
                "plan.out": s.completion_tokens, "plan.cost": s.cost_usd, "plan.status": s.status,
                "plan.answer": s.output, "plan.prompts": [t["prompt_tokens"] for t in s.per_turn],
                "plan.ms": round(out.wall_ms)}
    return out, transcript, measured


def request_parts(state: RunState, tool_schemas: list[dict]) -> pd.DataFrame:
    """What each turn's request was made of, in prompt tokens: the tool schemas, then every message
    sent so far. A message's share is what adding it to the JSON array added (so the parts of a turn
    sum exactly to the prompt tokens the provider billed; BPE merges across ``}]`` make a message's
    share differ by a token from one turn to the next)."""
    asked = [i for i, m in enumerate(state.messages) if m.get("role") == "assistant"]
    rows = []
    for turn, end in enumerate(asked, 1):
        sent = state.messages[:end]
        rows.append({"turn": turn, "part": "tool schemas", "role": "tool schemas",
                     "tokens": count(compact(tool_schemas)) if tool_schemas else 0})
        before = 0
        for i in range(len(sent)):
            now = count(compact(sent[:i + 1]))
            rows.append({"turn": turn, "part": f"#{i} {sent[i]['role']}", "role": sent[i]["role"],
                         "tokens": now - before})
            before = now
    return pd.DataFrame(rows)


# -- 2. the turn cap ------------------------------------------------------------------------------------
async def cap_table(base_url: str, caps=(8, 20, 50, 100)):
    rows = []
    for cap in caps:
        out = await scenario(base_url, "runaway", max_turns=cap)
        rows.append({"cap": cap, **out.row, "wall_ms": round(out.wall_ms)})
    table = pd.DataFrame(rows).set_index("cap")
    measured = {}
    if {8, 20, 50, 100} <= set(caps):
        measured = {"cap.in8": int(table.loc[8, "in"]), "cap.in50": int(table.loc[50, "in"]),
                    "cap.in100": int(table.loc[100, "in"]), "cap.cost20": float(table.loc[20, "cost_usd"]),
                    "cap.cost_ratio": float(table.loc[100, "cost_usd"] / table.loc[50, "cost_usd"]),
                    "cap.in_ratio": float(table.loc[100, "in"] / table.loc[50, "in"])}
    return table, measured


def prefix_costs(state: RunState, pricing=None) -> pd.DataFrame:
    """Cost against cap for every cap up to the run's length, from one run's per-turn usage: a run
    capped at k is exactly the first k turns of a longer run (the scripted model is a pure function)."""
    turns = pd.DataFrame(state.per_turn)
    turns.index = pd.RangeIndex(1, len(turns) + 1, name="cap")
    return pd.DataFrame({"prompt_tokens": turns["prompt_tokens"],
                         "input_tokens": turns["prompt_tokens"].cumsum(),
                         "output_tokens": turns["completion_tokens"].cumsum(),
                         "cost_usd": turns["cost_usd"].cumsum().round(6)})


def quadratic_fit(table: pd.DataFrame) -> np.ndarray:
    """Least-squares a*n^2 + b*n + c through cumulative input tokens against n."""
    return np.polyfit(table.index.to_numpy(), table["input_tokens"].to_numpy(), 2)


# -- 3. the budget --------------------------------------------------------------------------------------
async def budget_table(base_url: str, budgets=(0.005, 0.010, 0.050)):
    rows = []
    for b in budgets:
        out = await scenario(base_url, "runaway", max_budget_usd=b)
        s = out.state
        rows.append({"budget_usd": b, "status": s.status, "turns": s.turns, "spent_usd": round(s.cost_usd, 6),
                     "overshoot_usd": round(s.cost_usd - b, 6), "last_turn_usd": s.per_turn[-1]["cost_usd"],
                     "overshoot_within_one_turn": s.cost_usd - b <= s.per_turn[-1]["cost_usd"]})
    table = pd.DataFrame(rows)
    measured = {}
    hit = table[table.budget_usd == 0.010]
    if len(hit):
        measured = {"budget.spent": float(hit.spent_usd.iloc[0]), "budget.turns": int(hit.turns.iloc[0]),
                    "budget.status": hit.status.iloc[0]}
    return table, measured


# -- 4. five exits ----------------------------------------------------------------------------------------
async def cancel_after(coro, seconds: float, reason: str = "user pressed Stop"):
    """Run ``coro`` as a task and press Stop after ``seconds``: ``task.cancel(reason)``."""
    task = asyncio.ensure_future(coro)
    asyncio.get_running_loop().call_later(seconds, task.cancel, reason)
    return await task


async def five_exits(base_url: str):
    outs = {
        "plan, cap 20": await scenario(base_url, "plan", max_turns=20),
        "runaway, cap 8": await scenario(base_url, "runaway", max_turns=8),
        "runaway, budget $0.010": await scenario(base_url, "runaway", max_budget_usd=0.010),
        "destructive (needs approval)": await scenario(base_url, "destructive"),
        "slow, Stop at 0.3 s": await cancel_after(scenario(base_url, "slow"), 0.3),
    }
    with ScriptedProvider() as bad:
        bad.inject("401")
        outs["plan, provider answers 401"] = await scenario(bad.base_url, "plan")
    rows = [{"run": k, "status": o.state.status, "interruption": (o.state.interruption or {}).get("type", ""),
             "resumable": o.state.resumable, "turns": o.state.turns, "cost_usd": round(o.state.cost_usd, 6),
             "error": o.state.error or ""} for k, o in outs.items()]
    return pd.DataFrame(rows), outs


# -- 5. tool errors ----------------------------------------------------------------------------------------
async def tool_errors(base_url: str, cap: int = 20, permanent_cap: int = 12):
    rows, outs = [], {}
    for policy in ("fatal", "generic", "descriptive"):
        out = outs[policy] = await scenario(base_url, "recover", tool_errors=policy, max_turns=cap)
        rows.append({"policy": policy, **out.row, "answered": "errors.log" in (out.state.output or ""),
                     "what the model read": next((m["content"] for m in out.state.messages
                                                  if m["role"] == "tool"), "")})
    table = pd.DataFrame(rows).set_index("policy")
    perm = await scenario(base_url, "forbidden", max_turns=permanent_cap)
    permanent = pd.DataFrame([{"run": "read a file the process may not open", **perm.row}])
    fatal, desc = table.loc["fatal", "cost_usd"], table.loc["descriptive", "cost_usd"]
    measured = {"errors.ratio": float(desc / fatal),
                "errors.answers": ", ".join(table.index[table.answered]),
                "perm.turns": perm.state.turns, "perm.toolruns": perm.state.tool_runs,
                "perm.in": perm.state.prompt_tokens, "perm.cost": perm.state.cost_usd,
                "perm.status": perm.state.status, "perm.answer": perm.state.output,
                "perm.ratio": float(perm.state.cost_usd / desc)}
    return table, permanent, measured


# -- 6. repeats and the dedupe cache ------------------------------------------------------------------------
async def approving(base_url: str, name: str, **options) -> Outcome:
    """Run ``name`` and approve every call it stops for, as a person clicking "yes" would."""
    out = await scenario(base_url, name, **options)
    while out.state.status == "interrupted" and out.state.interruption["type"] == "approval":
        approve(out.state, out.state.interruption["callId"])
        out = await continue_run(base_url, out, **options)
    return out


async def dedupe(base_url: str):
    runs = {"baseline (one read)": await scenario(base_url, "direct"),
            "repeated read, no cache": await scenario(base_url, "repeat"),
            "repeated read, read-only cache": await scenario(base_url, "repeat", dedupe="read-only")}
    table = pd.DataFrame([{"run": k, **o.row} for k, o in runs.items()]).set_index("run")
    base = table.loc["baseline (one read)", "cost_usd"]
    extra = table.loc["repeated read, no cache", "cost_usd"] - base
    cached_extra = table.loc["repeated read, read-only cache", "cost_usd"] - base
    writes = {"naive cache on every tool": await approving(base_url, "delete_twice", dedupe="all"),
              "cache only on read-only tools": await approving(base_url, "delete_twice", dedupe="read-only")}
    wtable = pd.DataFrame([{"run": k, "turns": o.state.turns, "tool_runs": o.state.tool_runs,
                            "delete_file ran on": o.workspace.delete_runs, "files removed": o.workspace.deleted}
                           for k, o in writes.items()]).set_index("run")
    naive, gate = writes["naive cache on every tool"], writes["cache only on read-only tools"]
    measured = {"repeat.extra": round(extra, 6), "repeat.increase": round(100 * extra / base),
                "repeat.cache_saves": round(extra - cached_extra, 6),
                "naive.turns": naive.state.turns, "naive.runs": naive.state.tool_runs,
                "naive.deleted": naive.workspace.delete_runs,
                "gate.turns": gate.state.turns, "gate.runs": gate.state.tool_runs,
                "gate.deleted": gate.workspace.delete_runs}
    return table, wtable, measured


# -- 7. approval ----------------------------------------------------------------------------------------
REJECT_REASON = "I only asked which file mentions a timeout; do not delete anything."


async def approval(base_url: str, reason: str = REJECT_REASON):
    stopped = await scenario(base_url, "destructive")
    i = stopped.state.interruption
    verdicts = {}
    for verdict in ("approve", "reject with a reason", "reject with nothing"):
        out = await scenario(base_url, "destructive")
        call_id = out.state.interruption["callId"]
        if verdict == "approve":
            approve(out.state, call_id)
        else:
            reject(out.state, call_id, reason, silent=verdict == "reject with nothing")
        verdicts[verdict] = await continue_run(base_url, out)
    table = pd.DataFrame([{"verdict": k, "turns": o.state.turns, "deleted": o.workspace.deleted,
                           "the slot says": next(m["content"] for m in o.state.messages
                                                 if m.get("tool_call_id") == i["callId"]),
                           "the agent then says": o.state.output} for k, o in verdicts.items()]).set_index("verdict")
    args = "{" + ",".join(f'"{k}":"{v}"' for k, v in i["args"].items()) + "}"
    measured = {"approval.stop": f"turn {stopped.state.turns}: {stopped.state.status} / {i['type']} -> "
                                 f"{i['toolName']}({args})",
                "approval.deleted_before": stopped.workspace.deleted}
    for key, verdict in (("approve", "approve"), ("reject", "reject with a reason"), ("silent", "reject with nothing")):
        o = verdicts[verdict]
        measured.update({f"{key}.turns": o.state.turns, f"{key}.deleted": o.workspace.deleted,
                         f"{key}.answer": o.state.output})
    measured.pop("silent.turns")
    return stopped, table, measured


# -- 8. persist and resume: a real process, really killed -----------------------------------------------------
async def resume_after_kill(base_url: str, workdir: str | Path | None = None, kill_after_tool_results: int = 2,
                            hold_ms: float = 2000):
    """Start ``plan`` in a child process, SIGKILL it once its second tool result is on disk (while it waits
    for turn 3), restore the run from disk here, and finish it against a freshly started provider."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="harness-resume-"))
    state_dir, trace_path = workdir / "runs", workdir / "trace.jsonl"
    workspace = Workspace.copy_of(into=workdir)
    run_id = "resume-demo"
    with ScriptedProvider(latency_ms=hold_ms) as slow_provider:   # holds the child inside turn 3's call
        child = subprocess.Popen(
            [sys.executable, "-m", "harness_lib", "run", "plan", "--base-url", slow_provider.base_url,
             "--state-dir", str(state_dir), "--trace", str(trace_path), "--run-id", run_id,
             "--workspace", str(workspace.root), "--max-turns", "20", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        # Wait for the checkpoint, not the trace line: the loop writes the tool_result line first and
        # saves the state right after it, so a kill in between would lose a result the trace shows.
        while time.monotonic() < deadline and _saved_tool_results(state_dir, run_id) < kill_after_tool_results:
            await asyncio.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait()
    before = [f'{e["toolName"]}' + (f':{_path(e)}' if _path(e) else "")
              for e in read(trace_path) if e["type"] == "tool_start"]
    restored = load(state_dir, run_id)
    snapshot = {"turns": restored.turns, "cost_usd": round(restored.cost_usd, 6),
                "messages": len(restored.messages), "status": restored.status}
    trace = Trace(trace_path)
    finished = await scenario(base_url, "plan", workspace=workspace, state=restored, trace=trace, max_turns=20,
                              state_dir=state_dir)
    events = read(trace_path)
    all_runs = [f'{e["toolName"]}' + (f':{_path(e)}' if _path(e) else "") for e in events if e["type"] == "tool_start"]
    table = pd.DataFrame([
        {"moment": f"child killed (SIGKILL, exit {child.returncode})", **snapshot,
         "tool runs so far": ", ".join(before)},
        {"moment": "resumed here and finished", "turns": finished.state.turns,
         "cost_usd": round(finished.state.cost_usd, 6), "messages": len(finished.state.messages),
         "status": finished.state.status, "tool runs so far": ", ".join(all_runs)}]).set_index("moment")
    measured = {"resume.restored_turns": snapshot["turns"], "resume.restored_cost": snapshot["cost_usd"],
                "resume.restored_messages": snapshot["messages"], "resume.restored_status": snapshot["status"],
                "resume.turns": finished.state.turns, "resume.cost": finished.state.cost_usd,
                "resume.status": finished.state.status, "resume.tool_runs": ", ".join(all_runs)}
    return table, events, measured


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


# -- 9. cancellation and progress --------------------------------------------------------------------------
async def cancellation(base_url: str, stop_at: float = 1.2):
    def timed(label_log: list, t0: list):
        return lambda label: label_log.append({"t_ms": round((time.perf_counter() - t0[0]) * 1000), "label": label})

    rows, timelines = [], {}
    for name, hears, stop in (("no cancellation", True, None), (f"Stop at {stop_at} s", True, stop_at),
                              (f"Stop at {stop_at} s, tool deaf to Stop", False, stop_at)):
        ws = Workspace.copy_of()
        tools = [t for t in ws.tools() if t.name != "scan_archive"] + [ws.scan_archive_tool(hears_stop=hears)]
        log, t0 = [], [0.0]
        # The clock starts when the tool starts: the chapter's times are measured from the scan.
        out = await _run_with_stop(_scan_run(base_url, tools, timed(log, t0), t0), t0, stop)
        stopped_ms = (out["end"] - t0[0]) * 1000
        rows.append({"run": name, "status": out["state"].status,
                     "reason": (out["state"].interruption or {}).get("reason", ""),
                     "stopped_after_ms": round(stopped_ms), "progress_events": len(log),
                     "stop_to_end_ms": round(stopped_ms - stop * 1000) if stop else None})
        timelines[name] = pd.DataFrame(log)
    table = pd.DataFrame(rows).set_index("run")
    plain, stopped = table.iloc[0], table.iloc[1]
    first = timelines["no cancellation"]
    measured = {"cancel.progress1": int(first.t_ms.iloc[0]), "cancel.progress2": int(first.t_ms.iloc[1]),
                "cancel.full": int(plain.stopped_after_ms), "cancel.full_status": plain.status,
                "cancel.stop": int(stopped.stopped_after_ms), "cancel.stop_status": stopped.status,
                "cancel.reason": stopped.reason, "cancel.click_to_stop": int(stopped.stop_to_end_ms)}
    return table, timelines, measured


async def _scan_run(base_url, tools, on_progress, t0):
    state = new_run(SYSTEM_PROMPT, "Scan the archive for timeouts.", "slow")

    class Clock(Trace):  # start the clock at tool_start, as the chapter does
        def emit(self, run_id, type, **fields):
            if type == "tool_start":
                t0[0] = time.perf_counter()
            return super().emit(run_id, type, **fields)

    return await run(state, tools, Options(base_url=base_url, trace=Clock(timestamps=False), on_progress=on_progress))


async def _run_with_stop(coro, t0, stop):
    """Press Stop ``stop`` seconds after the tool started (never, when ``stop`` is None)."""
    task = asyncio.ensure_future(coro)
    if stop is not None:
        while t0[0] == 0.0:
            await asyncio.sleep(0.001)
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + stop - (time.perf_counter() - t0[0]), task.cancel, "user pressed Stop")
    state = await task
    return {"state": state, "end": time.perf_counter()}



# -- 10. the trace --------------------------------------------------------------------------------------------
def chapter_trace() -> list[dict]:
    return [json.loads(line) for line in (DATA / "chapter_trace.jsonl").read_text().splitlines() if line]


def trace_diff(ours: list[dict], theirs: list[dict]) -> pd.DataFrame:
    """Field by field: every field the chapter prints, bar runId (ours is random) and ms (a time)."""
    rows = []
    for n, (a, b) in enumerate(zip(ours, theirs), 1):
        for key, want in b.items():
            if key in ("runId", "ms"):
                continue
            rows.append({"line": n, "field": key, "chapter": want, "ours": a.get(key), "same": a.get(key) == want})
    return pd.DataFrame(rows)


async def trace_demo(base_url: str, path: str | Path | None = None, run_id: str | None = None):
    """The approval run, traced to a file. ``run_id`` names the run (a random id when None)."""
    path = Path(path or tempfile.mkdtemp(prefix="harness-trace-")) / "trace.jsonl"
    out = await scenario(base_url, "destructive", trace=Trace(path),
                         state=new_run(SYSTEM_PROMPT, TASK, "destructive", run_id))
    ours, theirs = read(path), chapter_trace()
    diff = trace_diff(ours, theirs)
    same_lines = int(diff.groupby("line")["same"].all().sum()) if len(ours) == len(theirs) else 0
    return out, path, diff, {"trace.lines": same_lines}


def trace_lines(events: list[dict], drop=("ts",)) -> str:
    """The events as the JSONL a trace file holds, minus the fields in ``drop`` (wall-clock stamps)."""
    return "\n".join(json.dumps({k: v for k, v in e.items() if k not in drop}, separators=(",", ":"))
                     for e in events)


def turn_costs(events: list[dict], run_id: str | None = None) -> pd.DataFrame:
    """Per turn of one run (every run when None): tokens, the running cost the trace line carries,
    and that turn's own cost (the difference of running costs)."""
    columns = ["runId", "turn", "prompt_tokens", "completion_tokens", "costUsd"]
    turns = pd.DataFrame([e for e in events if e["type"] == "turn" and (run_id is None or e["runId"] == run_id)])
    if turns.empty:
        return pd.DataFrame(columns=[*columns, "turn_cost_usd"])
    turns = turns[columns].reset_index(drop=True)
    turns["turn_cost_usd"] = turns.groupby("runId")["costUsd"].diff().fillna(turns["costUsd"]).round(6)
    return turns


# -- 11. latency --------------------------------------------------------------------------------------------
async def latency(latencies_ms=(0, 25, 50, 100, 200), repeats: int = 3, name: str = "plan"):
    """Wall time of the same run against providers of growing latency. The provider reports how long it
    spent inside its handlers; what is left of the wall time is the harness's own (client included)."""
    rows = []
    for lat in latencies_ms:
        with ScriptedProvider(latency_ms=lat) as p:
            await scenario(p.base_url, name)  # warm up once: imports, first connection
            walls, harness = [], []
            for _ in range(repeats):
                busy = p.busy_ms
                out = await scenario(p.base_url, name)
                walls.append(out.wall_ms)
                harness.append(out.wall_ms - (p.busy_ms - busy))
        rows.append({"latency_ms": lat, "turns": out.state.turns, "wall_ms": round(statistics.median(walls), 1),
                     "harness_ms": round(statistics.median(harness), 1)})
    table = pd.DataFrame(rows)
    slope, intercept = np.polyfit(table.latency_ms, table.wall_ms, 1)
    return table, float(slope), float(intercept), {"latency.overhead": round(float(table.harness_ms.median()))}


# -- 12. a real local model ------------------------------------------------------------------------------------
LOCAL_TASKS = ["Which file mentions a timeout?", "How many files are in the directory?",
               "Read notes.txt and tell me what it says.", "List the files and then read each one.",
               "Which file is the largest?", "Is there a file about rotating logs?"]


def recorded_local_model() -> pd.DataFrame:
    return pd.read_csv(DATA / "local_model_recorded.csv", keep_default_na=False)


def local_summary(table: pd.DataFrame) -> dict:
    """The chapter's TOTAL line for a table of local-model tasks, keyed by figure id."""
    turns, wall = int(table["turns"].sum()), int(table["wall_ms"].sum())
    return {"local.turns": turns, "local.toolruns": int(table["tool_runs"].sum()), "local.wall": wall,
            "local.mean_turn": round(wall / turns) if turns else 0}


async def local_model(base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                      max_turns: int = 8):
    """The six tasks against any OpenAI-compatible server (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY).
    Returns None when no server is configured."""
    base_url = base_url or os.environ.get("LLM_BASE_URL")
    if not base_url:
        return None
    model = model or os.environ.get("LLM_MODEL", "qwen2.5-0.5b-instruct")
    rows = []
    for task in LOCAL_TASKS:
        out = await scenario(base_url, model, task=task, max_turns=max_turns,
                             api_key=api_key or os.environ.get("LLM_API_KEY", "not-needed"))
        rows.append({"task": task, "turns": out.state.turns, "tool_runs": out.state.tool_runs,
                     "wall_ms": round(out.wall_ms), "status": out.state.status, "answer": out.state.output})
    return pd.DataFrame(rows)


# -- 13. a subagent is a tool ------------------------------------------------------------------------------------
async def subagent(base_url: str, child_model: str = "plan", child_max_turns: int = 6,
                   child_budget_usd: float = 0.05, stop_at: float | None = None):
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), base_url, child_model, max_turns=child_max_turns,
                             max_budget_usd=child_budget_usd)
    trace = Trace(timestamps=False)
    coro = scenario(base_url, "delegate", workspace=ws, tools=[research, *ws.tools()], trace=trace)
    out = await (cancel_after(coro, stop_at) if stop_at else coro)
    child = out.state.subruns[0] if out.state.subruns else {}
    table = pd.DataFrame([
        {"run": "parent", "status": out.state.status, "turns": out.state.turns, "messages": len(out.state.messages),
         "own cost_usd": round(out.state.cost_usd, 6)},
        {"run": "child (research)", "status": child.get("status"), "turns": child.get("turns"),
         "messages": child.get("messages"), "own cost_usd": child.get("cost_usd")}]).set_index("run")
    return out, table


# -- 14. stop conditions ----------------------------------------------------------------------------------------
async def stop_conditions(base_url: str):
    cases = {
        "max_turns(8)": ("runaway", [stops.max_turns(8)]),
        "max_budget(0.01)": ("runaway", [stops.max_budget(0.01)]),
        "tool_called('read_file')": ("plan", [stops.tool_called("read_file")]),
        "turn_cost_above(0.002)": ("runaway", [stops.turn_cost_above(0.002)]),
        "when(prompt tokens > 2,000)": ("runaway", [stops.when(lambda s: s.prompt_tokens > 2000,
                                                                "stop condition: 2,000 prompt tokens")]),
        "the first of several": ("runaway", [stops.max_turns(50), stops.max_budget(0.01),
                                             stops.turn_cost_above(0.002)]),
    }
    rows = []
    for label, (name, conditions) in cases.items():
        out = await scenario(base_url, name, stops=conditions)
        i = out.state.interruption or {}
        rows.append({"stop when": label, "scenario": name, "status": out.state.status,
                     "why": i.get("reason", i.get("type", "")), "turns": out.state.turns,
                     "cost_usd": round(out.state.cost_usd, 6)})
    return pd.DataFrame(rows).set_index("stop when")
