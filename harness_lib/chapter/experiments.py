"""The experiments: one async function per chapter table.

Each takes the base URL of a running provider (``ScriptedProvider.shared()`` in a notebook), runs the
harness for real, and returns a small named record (``results.py``): DataFrames to show, and
``.measured``, a dict of figure id -> value to lay beside the chapter's (see ``figures.compare``).
Nothing here is a constant posing as a measurement: every number comes from a run.

Every parameter a notebook exposes is checked here under the notebook's name for it (``CAPS``,
``BUDGETS``...): an unreasonable value raises ``params.ParameterError`` (one line in a notebook). Values
the chapter printed no figure for are measured all the same and listed as such (``figures.relabel``).
Awaited from a cell, every experiment is ``stop_button.all_or_nothing``: the toolbar's Stop ends it
with one line and no half result; the runs themselves end as interrupted, "user pressed Stop".
"""

from __future__ import annotations

import asyncio
import copy
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
from ..pricing import UNPRICED, Pricing
from ..scripted import ScriptedProvider
from ..state import RunState, StateFileError, approve, load, new_run, reject
from ..subagent import research_tool
from ..tokens import compact, count
from ..trace import Trace, read
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from . import params
from . import results as R
from .figures import DATA, relabel
from .stop_button import all_or_nothing, check, stoppable

SCENARIOS_THAT_FINISH = ("plan", "recover", "direct", "repeat", "answer", "destructive", "delete_twice")


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


@all_or_nothing
async def scenario(base_url: str, name: str, *, workspace: Workspace | None = None, task: str = TASK,
                   tools=None, state: RunState | None = None, trace: Trace | None = None, **options) -> Outcome:
    """Run one scripted scenario on a fresh copy of the workspace (or the one given)."""
    check()  # Stop pressed during an earlier run of the same cell: start no other
    workspace = workspace or Workspace.copy_of()
    trace = trace or Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, task, name)
    started = time.perf_counter()
    state = await run(state, tools if tools is not None else workspace.tools(),
                      Options(base_url=base_url, trace=trace, **options))
    check()  # the run ended because Stop was pressed: the cell's experiment ends with it
    return Outcome(state, workspace, (time.perf_counter() - started) * 1000, trace)



async def streamed(base_url: str, name: str = "plan", *, on_step=None, on_text=None, **options) -> Outcome:
    """The run with ``stream=True``: every reply arrives as server-sent events. ``on_text`` gets the text
    of a reply as it arrives (the answer, in an agent: the turns before it are tool calls), ``on_step`` one
    line per finished turn and per tool call, the progress that fills the silence before it."""
    def steps(event: dict) -> None:
        if on_step is not None and event["type"] == "turn":
            on_step(f"step {event['turn']}: {event['prompt_tokens']:,} tokens in, "
                    f"{event['completion_tokens']:,} out ({event.get('finish')})")
        elif on_step is not None and event["type"] == "tool_start":
            on_step(f"   {event['toolName']}({event['args']})")

    return await scenario(base_url, name, trace=Trace(timestamps=False, on_event=steps), stream=True,
                          on_text=on_text, **options)


async def continue_run(base_url: str, out: Outcome, **options) -> Outcome:
    return await scenario(base_url, out.state.model, workspace=out.workspace, state=out.state, trace=out.trace,
                          **options)


# -- 0. the scripted provider ----------------------------------------------------------------------------
def script_catalogue() -> pd.DataFrame:
    from ..scripted import scripts
    return pd.DataFrame({"scenario": list(scripts.SCRIPTS),
                         "what it does": [f.__doc__.splitlines()[0] for f in scripts.SCRIPTS.values()]}
                        ).set_index("scenario")


@all_or_nothing
async def switch_servers(base_url: str, scenario_name: str = "plan", switch_after_turns: int = 2) -> R.SwitchServers:
    """Run ``scenario_name`` for ``switch_after_turns`` turns on one server, shut it down, finish the same
    state on a brand-new server; beside it, the same run on one server throughout."""
    params.one_of("SCENARIO", scenario_name, SCENARIOS_THAT_FINISH)
    params.whole_number("SWITCH_AFTER_TURNS", switch_after_turns, 1, 19)
    with ScriptedProvider() as first:
        half = await scenario(first.base_url, scenario_name, max_turns=switch_after_turns)
    first_leg = f"status={half.state.status}, turns={half.state.turns}"
    with ScriptedProvider() as second:
        moved = await approving(second.base_url, scenario_name, state=half.state, workspace=half.workspace,
                                trace=half.trace, max_turns=20)
    whole = await approving(base_url, scenario_name, max_turns=20)
    table = pd.DataFrame([{"run": "two servers, one after the other", **moved.row},
                          {"run": "one server throughout", **whole.row}]).set_index("run")
    return R.SwitchServers(first_leg, table)


# -- 1. the loop --------------------------------------------------------------------------------------
@all_or_nothing
async def loop_plan(base_url: str, max_turns: int = 20) -> R.LoopPlan:
    """The plan run. Timed once warm: the first run of a process also pays for imports and the first
    connection, which is not what the chapter's ``ms=89`` measures."""
    params.whole_number("MAX_TURNS", max_turns, 1, 1000)
    await scenario(base_url, "plan", max_turns=max_turns)
    out = await scenario(base_url, "plan", max_turns=max_turns)
    s = out.state
    transcript = pd.DataFrame([{"#": i, "role": m["role"],
                                "what": m.get("content") if m.get("content") is not None else
                                ", ".join(f'{c["function"]["name"]}({c["function"]["arguments"]})'
                                          for c in m.get("tool_calls", []))}
                               for i, m in enumerate(s.messages)])
    measured = {"plan.turns": s.turns, "plan.tools": s.tool_runs, "plan.in": s.prompt_tokens,
                "plan.out": s.completion_tokens, "plan.cost": s.own_cost_usd, "plan.status": s.status,
                "plan.answer": s.output, "plan.prompts": [t["prompt_tokens"] for t in s.per_turn],
                "plan.ms": round(out.wall_ms)}
    if max_turns != 20:
        measured = relabel(measured, f"MAX_TURNS={max_turns}")
    return R.LoopPlan(out, transcript, measured)


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
MAX_CAP = 500  # the runaway's prompts grow by 64 tokens a turn: cap 500 is ~8 M input tokens, a few seconds


@all_or_nothing
async def cap_table(base_url: str, caps=(8, 20, 50, 100)) -> R.CapTable:
    """One runaway run per cap. The chapter printed input tokens at caps 8, 50 and 100, the cost at 20,
    and the 100/50 ratios; any other cap is measured and listed as having no chapter figure."""
    caps = params.whole_numbers("CAPS", caps, 1, MAX_CAP)
    rows = []
    for cap in caps:
        out = await scenario(base_url, "runaway", max_turns=cap)
        rows.append({"cap": cap, **out.row, "wall_ms": round(out.wall_ms)})
    table = pd.DataFrame(rows).set_index("cap")
    ins, costs = table["in"], table["cost_usd"]
    measured = {f"cap.in{c}": int(ins[c]) for c in (8, 50, 100) if c in ins}
    if 20 in costs:
        measured["cap.cost20"] = float(costs[20])
    if 50 in ins and 100 in ins:
        measured.update({"cap.cost_ratio": float(costs[100] / costs[50]), "cap.in_ratio": float(ins[100] / ins[50])})
    for cap in caps:
        if cap not in (8, 20, 50, 100):
            measured[f"runaway, cap {cap}: input tokens"] = int(ins[cap])
    return R.CapTable(table, measured)


@all_or_nothing
async def runaway_prefix(base_url: str, long_cap: int = 100) -> pd.DataFrame:
    """``prefix_costs`` of one runaway run of ``long_cap`` turns: the cost of every cap from 1 to it."""
    long_cap = params.whole_number("LONG_CAP", long_cap, 3, MAX_CAP)
    return prefix_costs((await scenario(base_url, "runaway", max_turns=long_cap)).state)


def prefix_check(prefix: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The separate runs beside the long run's prefixes at the same caps (blank beyond the long run)."""
    beside = prefix.reindex(table.index)[["input_tokens", "cost_usd"]].astype({"input_tokens": "Int64"})
    return pd.concat({"prefix of one long run": beside,
                      "separate runs": table[["in", "cost_usd"]]}, axis=1)


def doubling(prefix: pd.DataFrame) -> dict:
    """What doubling the cap does, from the long run's prefixes: 50 -> 100 when the run is that long,
    else the longest doubling it holds."""
    high = 100 if prefix.index.max() >= 100 else int(prefix.index.max()) // 2 * 2
    low = high // 2
    return {"from": low, "to": high,
            "in_ratio": float(prefix.loc[high, "input_tokens"] / prefix.loc[low, "input_tokens"]),
            "cost_ratio": float(prefix.loc[high, "cost_usd"] / prefix.loc[low, "cost_usd"])}


def prefix_costs(state: RunState) -> pd.DataFrame:
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
@all_or_nothing
async def budget_table(base_url: str, budgets=(0.005, 0.010, 0.050)) -> R.BudgetTable:
    """The runaway, no turn cap, once per budget. The chapter printed the $0.010 run only."""
    budgets = params._several("BUDGETS", budgets, lambda b: params.number("BUDGETS", b, above=0, high=1.0),
                              "a number of dollars above 0 and at most 1, or a tuple of them")
    rows = []
    for b in budgets:
        out = await scenario(base_url, "runaway", max_budget_usd=b)
        s = out.state
        rows.append({"budget_usd": b, "status": s.status, "turns": s.turns, "spent_usd": round(s.own_cost_usd, 6),
                     "overshoot_usd": round(s.own_cost_usd - b, 6), "last_turn_usd": s.per_turn[-1]["cost_usd"],
                     "overshoot_within_one_turn": s.own_cost_usd - b <= s.per_turn[-1]["cost_usd"]})
    table = pd.DataFrame(rows)
    measured = {}
    hit = table[table.budget_usd == 0.010]
    if len(hit):
        measured = {"budget.spent": float(hit.spent_usd.iloc[0]), "budget.turns": int(hit.turns.iloc[0]),
                    "budget.status": hit.status.iloc[0]}
    for row in table[table.budget_usd != 0.010].itertuples():
        measured[f"budget ${row.budget_usd:.3f}, no cap: spent"] = f"{row.spent_usd:.6f}"
    return R.BudgetTable(table, measured)


@all_or_nothing
async def budget_curve(base_url: str, table: pd.DataFrame) -> pd.DataFrame:
    """The runaway's running cost a few turns past the longest budget run, for the stairs plot."""
    return prefix_costs((await scenario(base_url, "runaway", max_turns=int(table["turns"].max()) + 3)).state)


# -- 4. five exits ----------------------------------------------------------------------------------------
async def cancel_after(coro, seconds: float, reason: str = "user pressed Stop"):
    """Run ``coro`` as a task and press Stop after ``seconds``: ``task.cancel(reason)``."""
    task = asyncio.ensure_future(coro)
    asyncio.get_running_loop().call_later(seconds, task.cancel, reason)
    return await task


@all_or_nothing
async def five_exits(base_url: str) -> R.FiveExits:
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
             "resumable": o.state.resumable, "turns": o.state.turns, "cost_usd": round(o.state.own_cost_usd, 6),
             "error": o.state.error or ""} for k, o in outs.items()]
    return R.FiveExits(pd.DataFrame(rows), outs)


@all_or_nothing
async def resume_the_resumable(base_url: str, outs: dict, raised_cap: int = 10) -> R.Resumed:
    """Continue copies of two of ``five_exits``'s runs: the capped one with its cap raised, the one that
    stopped for approval with its call approved. Copies, so the cell can be run again and again."""
    raised_cap = params.whole_number("RAISED_CAP", raised_cap, 1, MAX_CAP)
    capped = outs["runaway, cap 8"]
    more = await scenario(base_url, "runaway", state=copy.deepcopy(capped.state), max_turns=raised_cap)
    waiting = outs["destructive (needs approval)"]
    state = copy.deepcopy(waiting.state)
    approve(state, state.interruption["callId"])
    # The same workspace: a second approval of the same call is answered from delete_file's journal.
    approved = await scenario(base_url, "destructive", state=state, workspace=waiting.workspace)
    return R.Resumed(more, approved)


# -- 5. tool errors ----------------------------------------------------------------------------------------
@all_or_nothing
async def tool_errors(base_url: str, cap: int = 20, permanent_cap: int = 12) -> R.ToolErrors:
    params.whole_number("CAP", cap, 1, 200)
    params.whole_number("PERMANENT_CAP", permanent_cap, 1, 200)
    rows, outs = [], {}
    for policy in ("fatal", "generic", "descriptive"):
        out = outs[policy] = await scenario(base_url, "recover", tool_errors=policy, max_turns=cap)
        rows.append({"policy": policy, **out.row, "answered": "errors.log" in (out.state.output or ""),
                     "what the model read": _model_read(out.state)})
    table = pd.DataFrame(rows).set_index("policy")
    perm = await scenario(base_url, "forbidden", max_turns=permanent_cap)
    permanent = pd.DataFrame([{"run": "read a file the process may not open", **perm.row}])
    fatal, desc = table.loc["fatal", "cost_usd"], table.loc["descriptive", "cost_usd"]
    errors = {"errors.ratio": float(desc / fatal), "errors.answers": ", ".join(table.index[table.answered])}
    perm_figures = {"perm.turns": perm.state.turns, "perm.toolruns": perm.state.tool_runs,
                    "perm.in": perm.state.prompt_tokens, "perm.cost": perm.state.own_cost_usd,
                    "perm.status": perm.state.status, "perm.answer": perm.state.output,
                    "perm.ratio": float(perm.state.own_cost_usd / desc)}
    measured = {**(errors if cap == 20 else relabel(errors, f"CAP={cap}")),
                **(perm_figures if (cap, permanent_cap) == (20, 12) else
                   relabel(perm_figures, f"CAP={cap}, PERMANENT_CAP={permanent_cap}"))}
    return R.ToolErrors(table, permanent, measured)


def policy_story(table: pd.DataFrame) -> str:
    """05's conclusion, in words computed from its table (Markdown)."""
    answered = list(table.index[table["answered"]])
    costs = ", ".join(f"`{p}` `${c:.6f}`" for p, c in table["cost_usd"].items())  # code: no "$" math
    if not answered:
        d = table.loc["descriptive"]
        return (f"No policy got to an answer ({costs}): even the `descriptive` run ended `{d['status']}` after "
                f"{d['turns']} turns, before it could use what the error told it. Try a larger `CAP`.")
    who = " and ".join(f"`{p}`" for p in answered)
    line = f"Only {who} got to an answer ({costs})."
    if "generic" not in answered:
        line += (" The `generic` policy keeps the loop alive and still loses, because the one thing the model "
                 "needed, the hint in the error text, never reached it.")
    return line


def _model_read(state: RunState) -> str:
    """The first tool result, if the model was ever shown it (a run stopped by a fatal error never was)."""
    for i, m in enumerate(state.messages):
        if m["role"] == "tool":
            if any(later["role"] == "assistant" for later in state.messages[i + 1:]):
                return m["content"]
            return "(nothing: the run stopped before the model saw the result)"
    return ""


# -- 6. repeats and the dedupe cache ------------------------------------------------------------------------
async def approving(base_url: str, name: str, *, state: RunState | None = None, workspace: Workspace | None = None,
                    trace: Trace | None = None, **options) -> Outcome:
    """Run ``name`` and approve every call it stops for, as a person clicking "yes" would."""
    out = await scenario(base_url, name, state=state, workspace=workspace, trace=trace, **options)
    while out.state.status == "interrupted" and out.state.interruption["type"] == "approval":
        approve(out.state, out.state.interruption["callId"])
        out = await continue_run(base_url, out, **options)
    return out


@all_or_nothing
async def try_dedupe(base_url: str, scenario_name: str = "delete_twice", dedupe_mode: str = "all") -> Outcome:
    """06's "your turn": ``scenario_name`` under ``dedupe_mode``, approving every call that asks."""
    from ..loop import DEDUPE
    from ..scripted.scripts import SCRIPTS
    params.one_of("TRY_SCENARIO", scenario_name, [s for s in SCRIPTS if s not in ("slow", "delegate")])
    params.one_of("TRY_DEDUPE", dedupe_mode, DEDUPE)
    return await approving(base_url, scenario_name, dedupe=dedupe_mode, max_turns=20)


@all_or_nothing
async def dedupe(base_url: str) -> R.Dedupe:
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
    return R.Dedupe(table, wtable, measured)


# -- 7. approval ----------------------------------------------------------------------------------------
REJECT_REASON = "I only asked which file mentions a timeout; do not delete anything."


@all_or_nothing
async def approval(base_url: str, reason: str = REJECT_REASON) -> R.Approval:
    params.text("REASON", reason)
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
    return R.Approval(stopped, table, measured)


# -- 8. persist and resume: a real process, really killed -----------------------------------------------------
PLAN_TOOL_RESULTS = 2  # the plan run: list_files, then read_file, then the answer
HOLD_MS = 400  # the child's provider holds each request this long, so the kill lands while it waits for a turn


@all_or_nothing
async def resume_after_kill(base_url: str, workdir: str | Path | None = None, kill_after_tool_results: int = 2,
                            hold_ms: float = HOLD_MS) -> R.ResumeAfterKill:
    """Start ``plan`` in a child process, SIGKILL it once its ``kill_after_tool_results``-th tool result is
    on disk (while it waits for the next turn, held ``hold_ms`` by its provider), restore the run from disk
    here, and finish it against ``base_url``. Without ``workdir`` everything happens in a temporary folder
    that is gone when this returns (the table and the trace's events are returned in memory)."""
    params.whole_number("KILL_AFTER_TOOL_RESULTS", kill_after_tool_results, 1, PLAN_TOOL_RESULTS)
    params.number("HOLD_MS", hold_ms, at_least=0, high=30_000, unit=" ms")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="harness-resume-") as tmp:
            return await _resume_after_kill(base_url, Path(tmp), kill_after_tool_results, hold_ms)
    return await _resume_after_kill(base_url, Path(workdir), kill_after_tool_results, hold_ms)


async def _resume_after_kill(base_url: str, workdir: Path, kill_after_tool_results: int,
                             hold_ms: float) -> R.ResumeAfterKill:
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
    trace = Trace(trace_path)
    finished = await scenario(base_url, "plan", workspace=workspace, state=restored, trace=trace, max_turns=20,
                              state_dir=state_dir)
    events = read(trace_path)
    all_runs = [f'{e["toolName"]}' + (f':{_path(e)}' if _path(e) else "") for e in events if e["type"] == "tool_start"]
    table = pd.DataFrame([
        {"moment": moment, **snapshot, "tool runs so far": ", ".join(before)},
        {"moment": "resumed here and finished", "turns": finished.state.turns,
         "cost_usd": round(finished.state.own_cost_usd, 6), "messages": len(finished.state.messages),
         "status": finished.state.status, "tool runs so far": ", ".join(all_runs)}]).set_index("moment")
    measured = {"resume.restored_turns": snapshot["turns"], "resume.restored_cost": snapshot["cost_usd"],
                "resume.restored_messages": snapshot["messages"], "resume.restored_status": snapshot["status"],
                "resume.turns": finished.state.turns, "resume.cost": finished.state.own_cost_usd,
                "resume.status": finished.state.status, "resume.tool_runs": ", ".join(all_runs)}
    if not killed or kill_after_tool_results != 2:
        measured = relabel(measured, "killed elsewhere than the chapter" if killed else "never killed")
    elif hold_ms != HOLD_MS:  # a reader's hold: the kill may land after the next turn is saved
        measured = relabel(measured, f"HOLD_MS={hold_ms:g}")
    return R.ResumeAfterKill(table, events, measured)


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
SCAN_SECONDS = 3.0


@all_or_nothing
async def cancellation(base_url: str, stop_at: float = 1.2, progress=None) -> R.Cancellation:
    """Three timed scans: no Stop; Stop ``stop_at`` s after the tool starts; the same with a tool deaf to
    Stop. ``progress(line)`` hears one line as each run ends (a notebook passes ``print``). A Stop later
    than the scan's end is never pressed: the run completes first, and the table says so."""
    stop_at = params.number("STOP_AT", stop_at, above=0, high=60, unit=" s")

    def timed(label_log: list, t0: list):
        return lambda label: label_log.append({"t_ms": round((time.perf_counter() - t0[0]) * 1000), "label": label})

    rows, timelines = [], {}
    runs = (("no cancellation", True, None), (f"Stop at {stop_at:g} s", True, stop_at),
            (f"Stop at {stop_at:g} s, tool deaf to Stop", False, stop_at))
    for n, (name, hears, stop) in enumerate(runs, 1):
        ws = Workspace.copy_of()
        tools = [t for t in ws.tools() if t.name != "scan_archive"] + [ws.scan_archive_tool(hears_stop=hears)]
        log, t0 = [], [0.0]
        # The clock starts when the tool starts: the chapter's times are measured from the scan.
        out = await _run_with_stop(_scan_run(base_url, tools, timed(log, t0), t0), t0, stop)
        stopped_ms = (out["end"] - t0[0]) * 1000
        pressed = stop is not None and out["pressed"]
        rows.append({"run": name, "status": out["state"].status,
                     "reason": (out["state"].interruption or {}).get("reason", ""),
                     "stopped_after_ms": round(stopped_ms), "progress_events": len(log),
                     "stop_to_end_ms": round(stopped_ms - stop * 1000) if pressed else None,
                     "stop": ("pressed" if pressed else "never pressed: the run ended first") if stop else ""})
        timelines[name] = pd.DataFrame(log, columns=["t_ms", "label"])
        if progress:
            progress(f"run {n} of {len(runs)}, {name}: {out['state'].status} after {stopped_ms:,.0f} ms")
    table = pd.DataFrame(rows).set_index("run")
    plain, stopped = table.iloc[0], table.iloc[1]
    first = timelines["no cancellation"]
    measured = {"cancel.progress1": int(first.t_ms.iloc[0]), "cancel.progress2": int(first.t_ms.iloc[1]),
                "cancel.full": int(plain.stopped_after_ms), "cancel.full_status": plain.status}
    at_stop = {"cancel.stop": int(stopped.stopped_after_ms), "cancel.stop_status": stopped.status,
               "cancel.reason": stopped.reason}
    if stopped.stop_to_end_ms is not None and not pd.isna(stopped.stop_to_end_ms):
        at_stop["cancel.click_to_stop"] = int(stopped.stop_to_end_ms)
    measured.update(at_stop if stop_at == 1.2 else relabel(at_stop, f"STOP_AT={stop_at:g}"))
    return R.Cancellation(table, timelines, measured)


async def _scan_run(base_url, tools, on_progress, t0):
    state = new_run(SYSTEM_PROMPT, "Scan the archive for timeouts.", "slow")

    class Clock(Trace):  # start the clock at tool_start, as the chapter does
        def emit(self, run_id, type, **fields):
            if type == "tool_start":
                t0[0] = time.perf_counter()
            return super().emit(run_id, type, **fields)

    return await run(state, tools, Options(base_url=base_url, trace=Clock(timestamps=False), on_progress=on_progress))


def cancel_story(table: pd.DataFrame) -> str:
    """09's conclusion, in words computed from its table (Markdown)."""
    plain, hears, deaf = table.iloc[0], table.iloc[1], table.iloc[2]
    if pd.isna(hears.stop_to_end_ms):
        return (f"Stop was never pressed: at the time asked for, the scan had already ended, "
                f"{plain.stopped_after_ms:,.0f} ms after it started. Try a `STOP_AT` below that.")
    return (f"With cancellation reaching into the tool, the run ended {hears.stop_to_end_ms:,.0f} ms after Stop "
            f"(status `{hears.status}`, reason \"{hears.reason}\"). With a tool deaf to it, the run is marked "
            f"`{deaf.status}` too, but only {deaf.stop_to_end_ms:,.0f} ms after Stop, when the tool had finished "
            f"its whole scan ({deaf.stopped_after_ms:,.0f} ms).")


SCAN_SESSION: ScanSession | None = None


def scan_session() -> ScanSession:
    """The kernel's ScanSession (its temporary folder goes when the kernel does)."""
    global SCAN_SESSION
    if SCAN_SESSION is None:
        SCAN_SESSION = ScanSession()
    return SCAN_SESSION


async def _run_with_stop(coro, t0, stop):
    """Press Stop ``stop`` seconds after the tool started (never, when ``stop`` is None)."""
    task = asyncio.ensure_future(coro)
    pressed = []
    if stop is not None:
        while t0[0] == 0.0 and not task.done():
            await asyncio.sleep(0.001)
        loop = asyncio.get_running_loop()

        def press():
            if not task.done():
                pressed.append(time.perf_counter())
                task.cancel("user pressed Stop")
        handle = loop.call_at(loop.time() + stop - (time.perf_counter() - t0[0]), press)
    try:
        state = await task
    finally:
        if stop is not None:
            handle.cancel()
        if not task.done():
            task.cancel()
    end = time.perf_counter()
    check()  # the reader's own Stop ended this run: end the whole experiment
    return {"state": state, "end": end, "pressed": bool(pressed)}


class ScanSession:
    """09's Stop-button run: one scan saved to a state folder that lives as long as the kernel, so the
    next cell can load it from disk and resume it."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-stop-")
        self.state_dir = Path(self._tmp.name) / "runs"
        self.workspace = Workspace.copy_of()
        self.run_id = None

    async def press_stop_during_scan(self, base_url: str, progress=print):
        """Run the slow scan; the toolbar's Stop (a kernel interrupt) ends it as the chapter's Stop does.
        Returns (state, press): ``press.to_end_ms`` is the time from the interrupt to the run's end."""
        state = new_run(SYSTEM_PROMPT, "Scan the archive for timeouts.", "slow")
        self.run_id = state.run_id
        t0 = time.perf_counter()
        state, press = await stoppable(run(state, self.workspace.tools(), Options(
            base_url=base_url, state_dir=self.state_dir,
            on_progress=lambda label: progress(f"progress: {label}  (t+{(time.perf_counter() - t0) * 1000:,.0f} ms)"))))
        return state, press

    def load(self) -> RunState:
        return load(self.state_dir, self.run_id)

    def describe(self, state: RunState, press) -> str:
        if press.pressed:
            return (f"status={state.status}  reason={(state.interruption or {}).get('reason')!r}  "
                    f"ended {press.to_end_ms:,.1f} ms after you pressed Stop")
        return (f"status={state.status}: you did not press Stop this time. Run the cell again and press "
                "the toolbar's Stop (or Kernel > Interrupt) while it scans.")

    async def resume(self, base_url: str, progress=print) -> RunState:
        """Continue the saved run from disk, as another process would."""
        return await whole_run(run(self.load(), self.workspace.tools(), Options(
            base_url=base_url, state_dir=self.state_dir, on_progress=lambda label: progress(f"progress: {label}"))))


async def whole_run(coro):
    from .stop_button import whole
    return await whole(coro)



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


@all_or_nothing
async def trace_demo(base_url: str, path: str | Path | None = None, run_id: str | None = None) -> R.TraceDemo:
    """The approval run, traced to ``path``/trace.jsonl (a temporary folder, removed before this returns,
    when None). ``run_id`` names the run (a random id when None)."""
    if run_id is not None:
        params.text("RUN_ID", run_id)
    if path is None:
        with tempfile.TemporaryDirectory(prefix="harness-trace-") as tmp:
            return await trace_demo(base_url, tmp, run_id)
    path = Path(path) / "trace.jsonl"
    out = await scenario(base_url, "destructive", trace=Trace(path),
                         state=new_run(SYSTEM_PROMPT, TASK, "destructive", run_id))
    ours, theirs = read(path), chapter_trace()
    diff = trace_diff(ours, theirs)
    same_lines = int(diff.groupby("line")["same"].all().sum()) if len(ours) == len(theirs) else 0
    return R.TraceDemo(out, ours, diff, {"trace.lines": same_lines})


@all_or_nothing
async def two_process_run(base_url: str, run_id: str = "two-process"):
    """One run, two processes, one trace file: a child process (the CLI) runs ``destructive`` until it
    stops for approval and exits; this process loads the run from disk, approves, and finishes it,
    appending to the same trace. Everything lives in a temporary folder removed before this returns."""
    with tempfile.TemporaryDirectory(prefix="harness-two-") as tmp:
        tmp = Path(tmp)
        state_dir, trace_path = tmp / "runs", tmp / "trace.jsonl"
        workspace = Workspace.copy_of(into=tmp)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "harness_lib", "run", "destructive", "--base-url", base_url,
            "--state-dir", str(state_dir), "--trace", str(trace_path), "--run-id", run_id,
            "--workspace", str(workspace.root), "--json",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        state = load(state_dir, run_id)
        approve(state, state.interruption["callId"])
        await scenario(base_url, "destructive", workspace=workspace, state=state, trace=Trace(trace_path),
                       state_dir=state_dir)
        return read(trace_path)


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
@all_or_nothing
async def latency(latencies_ms=(0, 25, 50, 100, 200), repeats: int = 3, name: str = "plan", progress=None) -> R.Latency:
    """Wall time of the same run against providers of growing latency. The provider reports how long it
    spent inside its handlers; what is left of the wall time is the harness's own (client included).
    ``progress(line)`` hears one line per latency as soon as it is measured."""
    latencies_ms = params.numbers("LATENCIES_MS", latencies_ms, at_least=0, unit=" ms")
    params.check_param("LATENCIES_MS", latencies_ms, "two latencies or more, each at most 2000 ms",
                       lambda xs: len(xs) >= 2 and max(xs) <= 2000)
    params.whole_number("REPEATS", repeats, 1, 50)
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
        if progress:
            row = rows[-1]
            progress(f"latency {lat:g} ms: {row['turns']} turns, wall {row['wall_ms']:,.1f} ms, "
                     f"harness's own {row['harness_ms']:,.1f} ms")
    table = pd.DataFrame(rows)
    slope, intercept = np.polyfit(table.latency_ms, table.wall_ms, 1)
    measured = {"latency.overhead": round(float(table.harness_ms.median()))}
    return R.Latency(table, float(slope), float(intercept), measured)


# -- 12. a real local model ------------------------------------------------------------------------------------
LOCAL_TASKS = ["Which file mentions a timeout?", "How many files are in the directory?",
               "Read notes.txt and tell me what it says.", "List the files and then read each one.",
               "Which file is the largest?", "Is there a file about rotating logs?"]


def recorded_local_model() -> pd.DataFrame:
    """The chapter's recorded local-model run; ``attrs["recorded"]`` makes the plots say so."""
    table = pd.read_csv(DATA / "local_model_recorded.csv", keep_default_na=False)
    table.attrs["recorded"] = "the chapter's recorded data, not run here"
    return table


def local_summary(table: pd.DataFrame) -> dict:
    """The chapter's TOTAL line for a table of local-model tasks, keyed by figure id."""
    turns, wall = int(table["turns"].sum()), int(table["wall_ms"].sum())
    return {"local.turns": turns, "local.toolruns": int(table["tool_runs"].sum()), "local.wall": wall,
            "local.mean_turn": round(wall / turns) if turns else 0}


async def local_model(base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                      max_turns: int = 8, pricing: Pricing = UNPRICED):
    """The six tasks against any OpenAI-compatible server (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY).
    Returns None when no server is configured. A real endpoint has no price we know: its runs count tokens
    and their dollars stay unknown (``UNPRICED``) unless the reader gives ``pricing``. The model's name is
    required: each server serves its own names, and none is a safe default."""
    params.whole_number("MAX_TURNS", max_turns, 1, 100)
    base_url = base_url or os.environ.get("LLM_BASE_URL")
    if not base_url:
        return None
    model = model or os.environ.get("LLM_MODEL")
    if not model:
        raise params.ParameterError(f"LLM_MODEL is not set: name the model your server at {base_url} serves "
                                    "(its row in the table above), then restart Jupyter")
    rows = []
    for task in LOCAL_TASKS:
        out = await scenario(base_url, model, task=task, max_turns=max_turns, pricing=pricing,
                             api_key=api_key or os.environ.get("LLM_API_KEY", "not-needed"))
        rows.append({"task": task, "turns": out.state.turns, "tool_runs": out.state.tool_runs,
                     "wall_ms": round(out.wall_ms), "status": out.state.status, "answer": out.state.output})
    return pd.DataFrame(rows)


# -- 13. a subagent is a tool ------------------------------------------------------------------------------------
@all_or_nothing
async def subagent(base_url: str, child_model: str = "plan", child_max_turns: int = 6,
                   child_budget_usd: float = 0.05, stop_at: float | None = None) -> R.Subagent:
    params.whole_number("CHILD_MAX_TURNS", child_max_turns, 1, 100)
    params.number("CHILD_BUDGET_USD", child_budget_usd, above=0, high=1.0)
    if stop_at is not None:
        params.number("STOP_AT", stop_at, above=0, high=60, unit=" s")
    ws = Workspace.copy_of()
    research = research_tool(ws.tools(), base_url, child_model, max_turns=child_max_turns,
                             max_budget_usd=child_budget_usd)
    trace = Trace(timestamps=False)
    coro = scenario(base_url, "delegate", workspace=ws, tools=[research, *ws.tools()], trace=trace)
    out = await (cancel_after(coro, stop_at) if stop_at else coro)
    child = out.state.subruns[0] if out.state.subruns else {}
    table = pd.DataFrame([
        {"run": "parent", "status": out.state.status, "turns": out.state.turns, "messages": len(out.state.messages),
         "own cost_usd": round(out.state.own_cost_usd, 6)},
        {"run": "child (research)", "status": child.get("status"), "turns": child.get("turns"),
         "messages": child.get("messages"), "own cost_usd": child.get("costUsd")}]).set_index("run")
    return R.Subagent(out, table)


def child_story(out: Outcome) -> str:
    """What the child did and what of it reached the parent, in words computed from the run (Markdown)."""
    child = out.state.subruns[0] if out.state.subruns else None
    if child is None:
        return "The parent never started a child."
    runs = [e for e in out.trace.events if e["runId"] == child["runId"] and e["type"] == "tool_start"]
    did = ", ".join(f"`{e['toolName']}`" for e in runs) or "no tool"
    received = next((m["content"] for m in out.state.messages if m["role"] == "tool"), "")
    turns = child["turns"]
    return (f"The child spent {turns} turn{'s' if turns != 1 else ''} and ran {len(runs)} tool "
            f"call{'s' if len(runs) != 1 else ''} ({did}), ending `{child['status']}` with {child['messages']} "
            f"messages in its own window; of all that, the parent's window holds one tool result of "
            f"{len(received.split())} words.")


# -- 14. stop conditions ----------------------------------------------------------------------------------------
@all_or_nothing
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
                     "cost_usd": round(out.state.own_cost_usd, 6)})
    return pd.DataFrame(rows).set_index("stop when")
