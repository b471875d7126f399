"""Notebook 14, libraries: the loop's exit as a list of predicates (ours beside ``ai``'s ``stopWhen``), the library's
own conditions, and what sits under every library, shown on the peer libraries (run here when the ``bench`` extra
is installed, else as recorded in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from matplotlib.figure import Figure

from .. import stops
from ..loop import Options, run
from ..state import RunState, new_run
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from . import params
from .common import StopAfter, scenario
from .language import C_, N_, Text, _, ngettext
from .plots import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, _figure, style
from .s05_tool_errors import marked_tools
from .stop_button import all_or_nothing, check

PARAMETERS = {"STEP_COUNT": params.Whole(1, 50), "MY_LIMIT": params.Whole(1, 50)}


def ended(state: RunState) -> dict:
    """How a run ended, as a row: its status, why (the interruption's reason, its type, or the error), turns, tool
    runs and dollars."""
    i = state.interruption or {}
    return {"status": state.status, "why": i.get("reason") or i.get("type") or state.error or "",
            "turns": state.turns, "tool_runs": state.tool_runs, "cost_usd": round(state.own_cost_usd, 6)}


def files_read(state) -> list[str]:
    """A reader's definition of progress: the files read successfully so far."""
    return sorted({r["args"] for r in state.tool_log if r["toolName"] == "read_file" and r.get("ok")})


@all_or_nothing
async def new_stop_conditions(base_url: str):
    ws = Workspace.copy_of()
    cases = {
        "repeated_call(3)": ("runaway", dict(stops=[stops.repeated_call(3)])),
        "no_progress(3, progress=files_read)": ("runaway", dict(stops=[stops.no_progress(3, progress=files_read)])),
        "no_progress(2, progress=files_read)": ("plan", dict(stops=[stops.no_progress(2, progress=files_read)])),
        "any_of(max_budget(0.01), repeated_call(5))": ("runaway", dict(stops=[stops.any_of(
            stops.max_budget(0.01), stops.repeated_call(5))])),
        "all_of(repeated_call(2), turn_cost_above(0.001))": ("runaway", dict(stops=[stops.all_of(
            stops.repeated_call(2), stops.turn_cost_above(0.001))])),
        "repeated_failure(2)": ("forbidden", dict(max_turns=12, stops=[stops.repeated_failure(2)])),
        "permanent_error(), read_file marks it": ("forbidden", dict(max_turns=12, workspace=ws, tools=marked_tools(ws),
                                                                    stops=[stops.permanent_error()])),
    }
    rows = []
    for label, (name, options) in cases.items():
        out = await scenario(base_url, name, **options)
        s, i = out.state, out.state.interruption or {}
        line = next(e for e in reversed(out.trace.events) if e["type"] == "run_stopped")
        rows.append({"stop when": label, "scenario": name, "status": s.status, "interruption": i.get("type", ""),
                     "why": i.get("reason") or s.error or "", "turns": s.turns, "cost_usd": round(s.own_cost_usd, 6),
                     "trace says": ", ".join(f"{k}={line[k]}" for k in ("reason", "condition") if k in line)})
    return pd.DataFrame(rows).set_index("stop when")


@all_or_nothing
async def condition_or_stop(base_url: str, stop_at: float = 0.3):
    """The same slow run ended twice: by a user's Stop (``stop_at`` s after the scan starts: an event of the run, so a
    busy machine cannot move it before the first turn) and by a reader's condition. They used to end the same way
    (``cancelled``); code that must react to the one and not the other can now tell them apart."""
    stop = StopAfter(stop_at)
    by_stop = await stop.run(run(new_run(SYSTEM_PROMPT, TASK, "slow"), Workspace.copy_of().tools(),
                                 Options(base_url=base_url, trace=stop.trace())))
    check()  # the reader's own Stop ended the run: end the experiment
    by_condition = await scenario(base_url, "slow", stops=[
        stops.when(lambda s: s.turns >= 1, "one turn is enough", name="one_turn")])
    runs = {C_("label", "user presses Stop"): by_stop, C_("label", "a condition: when(turns >= 1)"): by_condition.state}
    return pd.DataFrame([{"ended by": k, "status": s.status, "resumable": s.resumable, "interruption": s.interruption}
                         for k, s in runs.items()]).set_index("ended by")


def limit_plot(curve: pd.DataFrame, turns: int, limit: int, step_count: int) -> tuple[Figure, str]:
    """Where the reader's loop stopped the runaway (after ``turns`` steps) with its two predicates, step count
    ``step_count`` and ``list_files`` called ``limit`` times, on the runaway's running cost (``curve``:
    ``common.prefix_costs`` of a run at least as long), and that in words."""
    last = max(limit, step_count, turns) + 1
    curve = curve.loc[:last]
    cost = float(curve.loc[turns, "cost_usd"])
    fired = [label for label, at in ((f"called_at_least('list_files', {limit})", limit),
                                     (f"step_count_is({step_count})", step_count)) if at == turns]
    fig, (ax,) = _figure(7.0, 3.2)
    with style():
        ax.plot(curve.index, curve["cost_usd"], color=GREY, linewidth=1.2, label=_("runaway, running cost"))
        ax.axvline(limit, color=BLUE, linestyle="--", linewidth=1.1,
                   label=_("your predicate: list_files × {limit}").format(limit=limit))
        ax.axvline(step_count, color=ORANGE, linestyle=":", linewidth=1.4, label=f"step_count_is({step_count})")
        ax.scatter([turns], [cost], color=RED, zorder=4, s=60,
                   label=_("your loop stopped: turn {turn}, ${usd:.4f}").format(turn=turns, usd=cost))
        ax.set_xlabel(_("turns (steps)"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("Where your loop stops the runaway: the first predicate to say yes"))
        ax.legend(loc="upper left", fontsize=8)
        ax.set_xlim(0, last + 0.5)
    return fig, ngettext("stopped after {turns} turn, ${usd:.6f}, by {which}",
                         "stopped after {turns} turns, ${usd:.6f}, by {which}", turns).format(
        turns=turns, usd=cost, which=_(" and ").join(fired) or _("another predicate"))


def stops_on_curve_plot(prefix: pd.DataFrame, table: pd.DataFrame) -> Figure:
    """The runaway's running cost, with the turn each stop condition ended it at (``table`` has
    ``turns`` and ``cost_usd``, indexed by condition)."""
    fig, (ax,) = _figure(7.0, 3.6)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=GREY, linewidth=1.2, label=_("runaway, running cost"))
        colors = [BLUE, ORANGE, GREEN, RED, PURPLE, "#8c6d31"]
        for n, (color, (label, row)) in enumerate(zip(colors * 3, table.iterrows())):
            # Later points are drawn smaller, so two conditions that stop at the same turn both show.
            ax.scatter([row["turns"]], [row["cost_usd"]], color=color, zorder=3 + n, s=max(110 - 18 * n, 20),
                       label=_("{condition}: turn {turn}").format(condition=label, turn=row["turns"]))
        ax.set_xlabel(_("turns"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("Where each stop condition ends the same runaway"))
        ax.legend(loc="upper left", fontsize=8)
        ax.set_xlim(0, prefix.index.max() + 1)
    return fig


# -- what sits under every library ------------------------------------------------------------------------------
# Where each of the five pieces lives, in each library: ``ANATOMY``, a table made when it is read (module
# ``__getattr__``), so it is in the language spoken then. A cell that is only code is not a message.
_ANATOMY_COLUMNS = ["library", N_("the loop"), N_("the stop rule"), N_("the catalogue"), N_("the executor"),
                    N_("the state")]
_ANATOMY_ROWS = [
    ("harness_lib", "loop.run: while True", N_("Options(stops=[...]), max_turns, max_budget_usd: a status each"),
     "[Tool(name, description, run, schema)]", N_("run_tool, inside the loop"), N_("RunState (saved with state_dir)")),
    (N_("ai 7 (TypeScript, from the chapter)"), C_("label", "generateText: do { call; run tools } while"),
     N_("stopWhen: [isStepCount(n), ...]: any one true stops"), "tools: { name: tool({...}) }",
     N_("executeTools, in the step"), "steps (StepResult[]), response.messages"),
    ("openai-agents", "Runner.run", N_("max_turns: raises MaxTurnsExceeded"), "Agent(tools=[function_tool(f)])",
     N_("the Runner"), "RunResult, RunState (to_json / from_json)"),
    ("pydantic-ai", N_("Agent.run (a graph of nodes)"), N_("UsageLimits(request_limit=n): raises UsageLimitExceeded"),
     "Agent(tools=[f])", N_("the agent's tool-call node"), N_("the message history, RunUsage")),
    (N_("LangGraph (prebuilt ReAct agent)"), N_("the graph: model node <-> tools node"),
     N_("recursion_limit: raises GraphRecursionError"), "create_react_agent(llm, [tool(f)])", "ToolNode",
     Text(N_("{state} (a checkpointer saves it)"), state="{'messages': [...]}")),
]


def anatomy() -> pd.DataFrame:
    """The five pieces of every library, in the language spoken (``ANATOMY``)."""
    return pd.DataFrame([[_(cell) for cell in row] for row in _ANATOMY_ROWS],
                        columns=[_(c) for c in _ANATOMY_COLUMNS]).set_index(_(_ANATOMY_COLUMNS[0]))


def __getattr__(name: str):
    if name == "ANATOMY":
        return anatomy()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ROOT = Path(__file__).resolve().parents[2]  # the project's folder, in a source checkout (benchmarks/ lives there)
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PEERS = {  # benchmarks' name -> (the row's label in RESULTS.md, the module it needs, the distribution to name)
    "openai-agents": (C_("label", "openai-agents (chat-completions model, tracing off)"), "agents", "openai-agents"),
    "pydantic-ai": ("pydantic-ai", "pydantic_ai", "pydantic-ai-slim"),
    "langgraph": (C_("label", "LangGraph prebuilt ReAct agent"), "langgraph", "langgraph"),
    "harness": (C_("label", "this harness, trace file on"), "harness_lib", "harness-lib"),
}


PEER_COLUMNS = ["version", C_("label", "at its cap"), C_("label", "model calls / tool runs")]


class Peers(NamedTuple):
    """14: how each library's loop ends at its own cap, measured here or as recorded."""
    table: pd.DataFrame     # one row per library (none when there is nothing to show): PEER_COLUMNS
    source: str             # where the rows come from, in words: "measured here" or "recorded ..."


def bench_installed() -> bool:
    """The ``bench`` extra's libraries importable, and the benchmarks beside the package (a source checkout)."""
    return (ROOT / "benchmarks" / "one.py").is_file() and \
        all(importlib.util.find_spec(module) is not None for _label, module, _dist in PEERS.values())


@all_or_nothing
async def peers(base_url: str, cap: int = 8) -> Peers:
    """Each library on the runaway, stopped by its own cap at ``cap`` model calls, each in a process of its own
    (``python -m benchmarks.one``, two at a time: seconds each, mostly the libraries' imports) when the ``bench``
    extra is installed; else the rows benchmarks/RESULTS.md recorded (cap 50), labelled as such. Stop kills the
    processes still running."""
    cap = PARAMETERS["STEP_COUNT"].check("STEP_COUNT", cap)
    if not bench_installed():
        return recorded_peers()
    gate = asyncio.Semaphore(2)

    async def one(name: str) -> dict:
        async with gate:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks.one", name, base_url, str(cap), cwd=ROOT,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
            try:
                out, _err = await child.communicate()
            finally:
                if child.returncode is None:
                    child.kill()
                    await child.wait()
        if child.returncode != 0:
            return {"at its cap": _("did not run (exit {code})").format(code=child.returncode),
                    "model calls / tool runs": ""}
        runaway = json.loads(out)["runaway"]
        return {"at its cap": runaway["ended"],
                "model calls / tool runs": f"{runaway['calls']} / {runaway['tool_runs']}"}

    results = await asyncio.gather(*(one(name) for name in PEERS))
    rows = [{"library": label, "version": importlib.metadata.version(dist), **result}
            for (label, _, dist), result in zip(PEERS.values(), results)]
    return Peers(pd.DataFrame(rows).set_index("library"),
                 _("measured here, just now: the runaway, each library stopped by its own cap at {cap} model calls, "
                   "in a process of its own").format(cap=cap))


def recorded_peers(path: Path = RESULTS) -> Peers:
    """The rows of benchmarks/RESULTS.md's table for the libraries above: versions, how each ended at its cap,
    model calls and tool runs, as recorded there (when and with what cap, said in ``source``)."""
    if not path.is_file():
        return Peers(pd.DataFrame(columns=PEER_COLUMNS, index=pd.Index([], name="library")),
                     _("neither the bench extra nor benchmarks/RESULTS.md is here: the benchmarks come with the "
                       "project's source, not with the installed package"))
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {cells[0]: dict(zip(header, cells)) for cells in
             ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    versions = dict(re.findall(r"([\w.-]+) (\d[\w.]*)", text.split("- versions:", 1)[1].splitlines()[0])) \
        if "- versions:" in text else {}
    when = re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", text)
    cap = re.search(r"capped at (\d+) model calls", text)
    rows = [{"library": label, "version": versions.get(dist, ""), "at its cap": table[label]["at its cap"],
             "model calls / tool runs": table[label]["model calls / tool runs"]}
            for label, _, dist in PEERS.values() if label in table]
    return Peers(pd.DataFrame(rows).set_index("library"),
                 _("recorded: benchmarks/RESULTS.md ({when}), the runaway, each library stopped by its own cap at "
                   "{cap} model calls; install the bench extra (make bench) to run them here").format(
                     when=when.group(0) if when else _("undated"), cap=cap.group(1) if cap else "?"))
