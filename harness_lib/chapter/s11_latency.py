"""Notebook 11, latency: wall time against the provider's latency, and the same run streamed.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..scripted import ScriptedProvider
from ..trace import Trace
from . import params
from .common import Measured, Outcome, scenario
from .plots import BLUE, RED, _figure, style
from .stop_button import all_or_nothing


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


@all_or_nothing
async def latency(latencies_ms=(0, 25, 50, 100, 200), repeats: int = 3, name: str = "plan", progress=None) -> Latency:
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
    return Latency(table, float(slope), float(intercept), measured)


def latency_fit_plot(table: pd.DataFrame, slope: float, intercept: float) -> Figure:
    """Wall time against the provider's latency, with the fitted line (its slope is the turn count)."""
    fig, (ax,) = _figure(6.5, 3.6)
    with style():
        ax.scatter(table["latency_ms"], table["wall_ms"], color=BLUE, zorder=3, label="median wall time of a run")
        xs = np.array([0, table["latency_ms"].max()])
        ax.plot(xs, intercept + slope * xs, color=RED, linestyle="--", linewidth=1.2,
                label=f"wall ≈ {slope:.2f} × latency + {intercept:.1f} ms")
        ax.set_xlabel("provider latency per request (ms)")
        ax.set_ylabel("wall time of the run (ms)")
        ax.set_title("The run waits for the provider once per turn")
        ax.legend(loc="upper left")
    return fig
