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
from .language import N_, _, ngettext
from .plots import BLUE, ORANGE, RED, _figure, style
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
            on_step(_("step {turn}: {prompt:,} tokens in, {completion:,} out ({finish})").format(
                turn=event["turn"], prompt=event["prompt_tokens"], completion=event["completion_tokens"],
                finish=event.get("finish")))
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
    return "\n".join(ngettext("latency {latency:g} ms: {turns} turn, wall {wall:,.1f} ms, harness's own "
                              "{own:,.1f} ms",
                              "latency {latency:g} ms: {turns} turns, wall {wall:,.1f} ms, harness's own "
                              "{own:,.1f} ms", r.turns).format(latency=r.latency_ms, turns=r.turns, wall=r.wall_ms,
                                                               own=r.harness_ms)
                     for r in table.itertuples())


WHO = (N_("your loop"),)   # what the notebook calls its own loop in ``split_line`` ("harness_lib.run" is a name)


def split_line(who: str, wall_ms: float, provider_ms: float, turns: int) -> str:
    """A run's wall time split into the provider's share and the harness's own, in words (``who`` in the language
    spoken)."""
    return ngettext("{who:<17} wall {wall:,.1f} ms = the provider's {provider:,.1f} ms + its own {own:,.1f} ms "
                    "({turns} turn)",
                    "{who:<17} wall {wall:,.1f} ms = the provider's {provider:,.1f} ms + its own {own:,.1f} ms "
                    "({turns} turns)", turns).format(who=_(who) + ":", wall=wall_ms, provider=provider_ms,
                                                     own=wall_ms - provider_ms, turns=turns)


def describe_fit(fit: Latency) -> str:
    if np.isnan(fit.slope):
        turns = fit.table["turns"].iloc[0]
        return ngettext("one latency only: a slope needs two or more. The run took {turns} turn, {wall:,.1f} ms",
                        "one latency only: a slope needs two or more. The run took {turns} turns, {wall:,.1f} ms",
                        turns).format(turns=turns, wall=fit.table["wall_ms"].iloc[0])
    return _("fitted slope ≈ {slope}, the run's turn count is {turns}\nintercept: {intercept:,.1f} ms").format(
        slope=round(fit.slope), turns=fit.table["turns"].iloc[0], intercept=fit.intercept)


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
        ax.scatter(table["latency_ms"], table["wall_ms"], color=BLUE, zorder=3, label=_("median wall time of a run"))
        if not np.isnan(slope):  # one latency: nothing to fit
            xs = np.array([0, table["latency_ms"].max()])
            ax.plot(xs, intercept + slope * xs, color=RED, linestyle="--", linewidth=1.2,
                    label=_("wall ≈ {slope:.2f} × latency + {intercept:.1f} ms").format(slope=slope,
                                                                                     intercept=intercept))
        ax.set_xlabel(_("provider latency per request (ms)"))
        ax.set_ylabel(_("wall time of the run (ms)"))
        ax.set_title(_("The run waits for the provider once per turn"))
        ax.legend(loc="upper left")
    return fig


def latency_plot(fit: Latency, one) -> tuple[Figure, str]:
    """The notebook's slider: ``fit``'s points and line, with one run (``one``: ``latency_ms``, ``turns``,
    ``wall_ms``, ``harness_ms``, a dict or a row of ``fit.table``) marked on them, and that run in words."""
    fig = latency_fit_plot(fit.table, fit.slope, fit.intercept)
    ax = fig.axes[0]
    with style():
        end = fit.table["latency_ms"].max()
        if not np.isnan(fit.slope) and one["latency_ms"] > end:   # the line, on to a latency past the sweep's
            xs = np.array([end, one["latency_ms"]])
            ax.plot(xs, fit.intercept + fit.slope * xs, color=RED, linestyle=":", linewidth=1.2)
        ax.scatter([one["latency_ms"]], [one["wall_ms"]], color=ORANGE, s=70, zorder=4, marker="D",
                   label=_("{latency:g} ms: {wall:,.0f} ms wall").format(latency=one["latency_ms"],
                                                                          wall=one["wall_ms"]))
        ax.legend(loc="upper left")
    said = ngettext("{turns} turn, wall {wall:,.1f} ms = the provider's {provider:,.1f} ms + the harness's own "
                    "{own:,.1f} ms",
                    "{turns} turns, wall {wall:,.1f} ms = the provider's {provider:,.1f} ms + the harness's own "
                    "{own:,.1f} ms", one["turns"]).format(turns=one["turns"], wall=one["wall_ms"],
                                     provider=one["wall_ms"] - one["harness_ms"], own=one["harness_ms"])
    if not np.isnan(fit.slope):
        said += "; " + _("the line says {ms:,.1f} ms").format(ms=fit.intercept + fit.slope * one["latency_ms"])
    return fig, said
