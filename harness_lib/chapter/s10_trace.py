"""Notebook 10, the trace: the approval run traced beside the chapter's lines, and one run across two processes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..state import approve, load, new_run
from ..trace import Trace, read
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from . import params
from .common import Measured, scenario
from .figures import DATA
from .language import N_, _, dollars
from .plots import BLUE, ORANGE, _figure, dollar_ticks, style
from .stop_button import all_or_nothing

PARAMETERS = {"RUN_ID": params.Words()}  # a trace line takes any text; a saved run's id names files (08)


class TraceDemo(NamedTuple):
    """10: the approval run, traced to a file, beside the chapter's trace."""
    outcome: Any            # the run (``Outcome``)
    events: list            # the trace file's events
    diff: pd.DataFrame      # field by field against the chapter's trace
    measured: Measured


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


def trace_figures(events: list[dict]) -> Measured:
    """The chapter's figure from a traced approval run: how many of its lines equal the chapter's, field by
    field (bar runId and ms): every line, or none when the line counts differ. The notebook's cell and
    ``trace_demo`` both end here."""
    theirs = chapter_trace()
    diff = trace_diff(events, theirs)
    same_lines = int(diff.groupby("line")["same"].all().sum()) if len(events) == len(theirs) else 0
    return {"trace.lines": same_lines}


def lines_side_by_side(mine: list[dict], library: list[dict]) -> pd.DataFrame:
    """Two traces of the same run, line by line: the event, whether every field of the first is in the second
    with the same value (``ms`` aside: a time), and the fields only the second writes."""
    rows = []
    for n in range(max(len(mine), len(library))):
        a, b = (mine[n] if n < len(mine) else {}), (library[n] if n < len(library) else {})
        differ = [k for k in a if k != "ms" and a.get(k) != b.get(k)]
        rows.append({"line": n + 1, "type": a.get("type", b.get("type", "")),
                     _("the same"): _("yes") if not differ else _("no: {fields}").format(fields=", ".join(differ)),
                     _("only the library writes"): ", ".join(k for k in b if k not in a)})
    return pd.DataFrame(rows).set_index("line")


_FOLDER: tempfile.TemporaryDirectory | None = None


def fresh_file(name: str) -> Path:
    """A file of that name in a folder that lives as long as the kernel, removed if a cell wrote it before:
    re-running the cell starts a fresh trace instead of appending to the last one."""
    global _FOLDER
    if _FOLDER is None:
        _FOLDER = tempfile.TemporaryDirectory(prefix="harness-trace-")
    path = Path(_FOLDER.name) / name
    path.unlink(missing_ok=True)
    return path


@all_or_nothing
async def trace_demo(base_url: str, path: str | Path | None = None, run_id: str | None = None) -> TraceDemo:
    """The approval run, traced to ``path``/trace.jsonl (a temporary folder, removed before this returns,
    when None). ``run_id`` names the run (a random id when None)."""
    if run_id is not None:
        PARAMETERS["RUN_ID"].check("RUN_ID", run_id)
    if path is None:
        with tempfile.TemporaryDirectory(prefix="harness-trace-") as tmp:
            return await trace_demo(base_url, tmp, run_id)
    path = Path(path) / "trace.jsonl"
    out = await scenario(base_url, "destructive", trace=Trace(path),
                         state=new_run(SYSTEM_PROMPT, TASK, "destructive", run_id))
    ours = read(path)
    return TraceDemo(out, ours, trace_diff(ours, chapter_trace()), trace_figures(ours))


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


TITLES = (N_("Cost per turn, from the trace alone"), N_("Cost per turn, both runs"))   # the second: the notebook's


def turn_costs_plot(turns: pd.DataFrame, title: str = TITLES[0]) -> Figure:
    """Bars: each turn's own cost; lines: the running cost the trace lines carry, one line per run
    (``turn_costs``). ``title`` is shown in the language spoken."""
    fig, (ax,) = _figure(6.5, 3.4)
    several = turns["runId"].nunique() > 1
    with style():
        x = np.arange(len(turns))
        drawn = ax.bar(x, turns["turn_cost_usd"], width=0.55, color=BLUE, label=_("that turn's cost"))
        for bar, value in zip(drawn, turns["turn_cost_usd"] if not several else []):  # too narrow when several
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() / 2, dollars(value), ha="center",
                    va="center", color="white", fontsize=8.5)
        for n, (_run_id, rows) in enumerate(turns.groupby("runId", sort=False)):
            ax.plot(x[rows.index], rows["costUsd"], color=ORANGE, marker="o",
                    label=_("running total (costUsd)") if n == 0 else None)
        ax.set_xticks(x, [(f"{r.runId}\n" if several else "") + _("turn {n}").format(n=r.turn)
                      for r in turns.itertuples()])
        ax.set_ylabel("USD")
        ax.set_title(_(title))
        ax.yaxis.set_major_formatter(dollar_ticks(5))
        ax.legend(loc="upper left")
        ax.set_ylim(0, turns["costUsd"].max() * 1.3)
    return fig
