"""Notebook 11, latency: wall time against the provider's latency, and the same run streamed.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..loop import Options, run
from ..scripted import ScriptedProvider
from ..state import new_run
from ..trace import Trace
from ..workspace import SYSTEM_PROMPT, TASK, Workspace
from . import params
from .common import Measured, Outcome, scenario
from .plots import BLUE, RED, _figure, style
from .stop_button import all_or_nothing, check

PARAMETERS = {"LATENCIES_MS": params.Number(0, 300, closed=True, unit=" ms", several=True),
              "REPEATS": params.Whole(1, 5)}  # at the ends: 4 runs of 3 turns x 300 ms; 5 rounds of the five


class Latency(NamedTuple):
    """11: the same run against providers of growing latency."""
    table: pd.DataFrame     # one row per latency: turns, wall time, the harness's own time
    slope: float            # fitted wall ms per ms of latency (about the run's turn count)
    intercept: float        # fitted wall ms at no latency
    measured: Measured


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


def latency_fit(rows: list[dict]) -> Latency:
    """The runs' rows (``latency_ms``, ``turns``, ``wall_ms``, ``provider_ms``: one per run) as one row per latency
    (medians; the harness's own time is the wall time less the provider's), the line fitted through them (its
    slope about the run's turn count; NaN with a single latency) and the chapter's figure. The notebook's cell and
    ``latency`` both end here."""
    runs = pd.DataFrame(rows)
    runs["harness_ms"] = runs["wall_ms"] - runs["provider_ms"]
    table = runs.groupby("latency_ms", sort=False).agg(turns=("turns", "last"), wall_ms=("wall_ms", "median"),
                                                       harness_ms=("harness_ms", "median")).round(1).reset_index()
    slope = intercept = float("nan")
    if len(table) >= 2:
        slope, intercept = (float(v) for v in np.polyfit(table.latency_ms, table.wall_ms, 1))
    return Latency(table, slope, intercept, {"latency.overhead": round(float(table.harness_ms.median()))})


def runs_of(latencies_ms, repeats) -> list[tuple[float, int]]:
    """(latency, repeat) for every run of the experiment, each latency ``repeats`` times in a row (the parameters
    checked again here, so a cell run without the setup cell still gets one line, not a TypeError)."""
    latencies_ms = PARAMETERS["LATENCIES_MS"].check("LATENCIES_MS", latencies_ms)
    repeats = PARAMETERS["REPEATS"].check("REPEATS", repeats)
    return [(lat, n) for lat in latencies_ms for n in range(repeats)]


def describe_rows(table: pd.DataFrame) -> str:
    """A line per latency of ``latency_fit``'s table (times printed with their unit: nbval sanitises those)."""
    return "\n".join(f"latency {r.latency_ms:g} ms: {r.turns} turns, wall {r.wall_ms:,.1f} ms, "
                     f"harness's own {r.harness_ms:,.1f} ms" for r in table.itertuples())


def split_line(who: str, wall_ms: float, provider_ms: float, turns: int) -> str:
    """A run's wall time split into the provider's share and the harness's own, in words."""
    return (f"{who + ':':<17} wall {wall_ms:,.1f} ms = the provider's {provider_ms:,.1f} ms "
            f"+ its own {wall_ms - provider_ms:,.1f} ms ({turns} turns)")


def describe_fit(fit: Latency) -> str:
    if np.isnan(fit.slope):
        return (f"one latency only: a slope needs two or more. The run took {fit.table['turns'].iloc[0]} turns, "
                f"{fit.table['wall_ms'].iloc[0]:,.1f} ms")
    return (f"fitted slope ≈ {round(fit.slope)}, the run's turn count is {fit.table['turns'].iloc[0]}\n"
            f"intercept: {fit.intercept:,.1f} ms")


@all_or_nothing
async def latency(latencies_ms=(0, 25, 50, 100, 200), repeats: int = 3, name: str = "plan", progress=None) -> Latency:
    """Wall time of the same run against a provider of growing latency. The provider reports how long it
    spent inside its handlers; what is left of the wall time is the harness's own (client included).
    ``progress(line)`` hears one line per latency as soon as it is measured."""
    runs = runs_of(latencies_ms, repeats)
    rows: list[dict] = []
    with ScriptedProvider() as p:
        await run(new_run(SYSTEM_PROMPT, TASK, name), Workspace.copy_of().tools(), Options(base_url=p.base_url))
        for lat, n in runs:  # warmed up once above: imports, the first connection
            p.latency_ms = lat
            busy, started = p.busy_ms, time.perf_counter()
            state = await run(new_run(SYSTEM_PROMPT, TASK, name), Workspace.copy_of().tools(),
                              Options(base_url=p.base_url))
            check()  # Stop ended the run: end the experiment
            rows.append({"latency_ms": lat, "turns": state.turns, "wall_ms": (time.perf_counter() - started) * 1000,
                         "provider_ms": p.busy_ms - busy})
            if progress and (lat, n + 1) not in runs:  # the last run at this latency
                progress(describe_rows(latency_fit(rows).table.tail(1)))
    return latency_fit(rows)


def latency_fit_plot(table: pd.DataFrame, slope: float, intercept: float) -> Figure:
    """Wall time against the provider's latency, with the fitted line (its slope is the turn count)."""
    fig, (ax,) = _figure(6.5, 3.6)
    with style():
        ax.scatter(table["latency_ms"], table["wall_ms"], color=BLUE, zorder=3, label="median wall time of a run")
        if not np.isnan(slope):  # one latency: nothing to fit
            xs = np.array([0, table["latency_ms"].max()])
            ax.plot(xs, intercept + slope * xs, color=RED, linestyle="--", linewidth=1.2,
                    label=f"wall ≈ {slope:.2f} × latency + {intercept:.1f} ms")
        ax.set_xlabel("provider latency per request (ms)")
        ax.set_ylabel("wall time of the run (ms)")
        ax.set_title("The run waits for the provider once per turn")
        ax.legend(loc="upper left")
    return fig
