"""Notebook 02, the turn cap: what the notebook's caps sweep measured (``cap_figures``), every cap from one
long run, the quadratic fit; beyond the chapter, pricing a cap before raising it (``harness_lib.forecast``) and
where that forecast breaks. The notebook writes the capped loop and the sweep in its own cells; ``cap_table``
is the same sweep for `make chapter`'s report and the tests, and shares ``cap_figures`` with it.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..forecast import CHAPTER_CAPS, forecast
from ..scripted.counting import usage
from ..scripted.scripts import call, turn_index
from ..state import RunState
from . import params
from .common import Measured, as_row, prefix_costs, scenario
from .language import C_, N_, _, ngettext
from .plots import BLUE, GREY, ORANGE, RED, _figure, dollar_ticks, number_ticks, style
from .stop_button import all_or_nothing

# A cap of 200 is 1.3 M input tokens, about 2 s of runaway (the forecast runs each cap again, replies varying).
PARAMETERS = {"CAPS": params.Whole(1, 200, several=True),   # the sweep: one runaway run per cap
              "LONG_CAP": params.Whole(3, 200),             # one long run whose prefixes price every cap
              "OBSERVED": params.Whole(2, 20)}              # turns a forecast reads (one shows no growth)


class CapTable(NamedTuple):
    """02: one runaway run per turn cap."""
    table: pd.DataFrame     # indexed by cap: status, turns, tool runs, tokens, cost
    measured: Measured


class CapForecast(NamedTuple):
    """Caps forecast from a run's first turns, beside the caps run."""
    table: pd.DataFrame     # indexed by (observed turns, cap): predicted and measured, their error
    curve: pd.DataFrame     # the forecast cost of every cap up to the largest
    measured: Measured


class ForecastBreaks(NamedTuple):
    """The same forecast on runs that break its assumption."""
    table: pd.DataFrame     # indexed by (run, cap): predicted and measured cost, error
    measured: Measured


def cap_figures(runs: dict[int, RunState]) -> CapTable:
    """The sweep's table and figures, from its runs (cap -> the runaway's final state). The chapter printed
    input tokens at caps 8, 50 and 100, the cost at 20, and the 100/50 ratios; any other cap is measured and
    listed as having no chapter figure."""
    table = pd.DataFrame([{"cap": cap, **as_row(state)} for cap, state in runs.items()]).set_index("cap")
    caps = list(runs)
    ins, costs = table["in"], table["cost_usd"]
    measured = {f"cap.in{c}": int(ins[c]) for c in (8, 50, 100) if c in ins}
    if 20 in costs:
        measured["cap.cost20"] = float(costs[20])
    if 50 in ins and 100 in ins:
        measured.update({"cap.cost_ratio": float(costs[100] / costs[50]), "cap.in_ratio": float(ins[100] / ins[50])})
    for cap in caps:
        if cap not in (8, 20, 50, 100):
            measured[f"runaway, cap {cap}: input tokens"] = int(ins[cap])
    return CapTable(table, measured)


@all_or_nothing
async def cap_table(base_url: str, caps=(8, 20, 50, 100)) -> CapTable:
    """The notebook's sweep: one runaway run per cap."""
    caps = PARAMETERS["CAPS"].check("CAPS", caps)
    return cap_figures({cap: (await scenario(base_url, "runaway", max_turns=cap)).state for cap in caps})


@all_or_nothing
async def runaway_prefix(base_url: str, long_cap: int = 100) -> pd.DataFrame:
    """``prefix_costs`` of one runaway run of ``long_cap`` turns: the cost of every cap from 1 to it."""
    long_cap = PARAMETERS["LONG_CAP"].check("LONG_CAP", long_cap)
    return prefix_costs((await scenario(base_url, "runaway", max_turns=long_cap)).state)


def prefix_check(prefix: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The separate runs beside the long run's prefixes at the same caps (blank beyond the long run)."""
    beside = prefix.reindex(table.index)[["input_tokens", "cost_usd"]].astype({"input_tokens": "Int64"})
    return pd.concat({C_("label", "prefix of one long run"): beside,
                      C_("label", "separate runs"): table[["in", "cost_usd"]]}, axis=1)


def doubling(prefix: pd.DataFrame) -> dict:
    """What doubling the cap does, from the long run's prefixes: 50 -> 100 when the run is that long,
    else the longest doubling it holds."""
    high = 100 if prefix.index.max() >= 100 else int(prefix.index.max()) // 2 * 2
    low = high // 2
    return {"from": low, "to": high,
            "in_ratio": float(prefix.loc[high, "input_tokens"] / prefix.loc[low, "input_tokens"]),
            "cost_ratio": float(prefix.loc[high, "cost_usd"] / prefix.loc[low, "cost_usd"])}


def quadratic_fit(table: pd.DataFrame) -> np.ndarray:
    """Least-squares a*n^2 + b*n + c through cumulative input tokens against n."""
    return np.polyfit(table.index.to_numpy(), table["input_tokens"].to_numpy(), 2)


def _observed(observed: int) -> int:
    return PARAMETERS["OBSERVED"].check("OBSERVED", observed)


def _caps(caps) -> tuple[int, ...]:
    return PARAMETERS["CAPS"].check("CAPS", caps)


@all_or_nothing
async def forecast_lines(base_url: str, observed: int = 3, caps=CHAPTER_CAPS, name: str = "runaway") -> str:
    """Price each cap from the first ``observed`` turns of one run of ``name``, before any cap is run."""
    observed, caps = _observed(observed), _caps(caps)
    head = await scenario(base_url, name, max_turns=observed)
    line = _("cap {cap:>3}: input tokens {tokens:>9,}   cost ${usd:.6f}")
    return "\n".join(line.format(cap=f.cap, tokens=f.input_tokens, usd=f.cost_usd)
                     for f in forecast(head.trace.events, observed=observed, caps=caps))


@all_or_nothing
async def cap_forecast(base_url: str, observed=(2, 3), caps=CHAPTER_CAPS, name: str = "runaway",
                       runs: dict[int, RunState] | None = None) -> CapForecast:
    """Forecast each cap from the first ``observed`` turns of ``name`` (its trace), then run each cap (or take
    the run of ``name`` at that cap from ``runs``, the notebook's sweep: the scripted model is a pure function,
    so a run at the same cap is the same run)."""
    low, high = PARAMETERS["OBSERVED"].low, PARAMETERS["OBSERVED"].high
    observed = params.whole_numbers("OBSERVED", observed, low, high)
    caps = _caps(caps)
    head = await scenario(base_url, name, max_turns=max(observed))
    measured_runs = {cap: await _capped(base_url, name, cap, runs) for cap in caps}
    rows = []
    for k in observed:
        for f in forecast(head.trace.events, observed=k, caps=caps):
            s = measured_runs[f.cap]
            rows.append({"observed_turns": k, "cap": f.cap, "predicted_in": f.input_tokens,
                         "measured_in": s.prompt_tokens,
                         "in_error_pct": round(100 * (f.input_tokens - s.prompt_tokens) / s.prompt_tokens, 3),
                         "predicted_usd": f.cost_usd, "measured_usd": round(s.own_cost_usd, 6),
                         "cost_error_pct": round(100 * (f.cost_usd - s.own_cost_usd) / s.own_cost_usd, 3)})
    table = pd.DataFrame(rows).set_index(["observed_turns", "cap"])
    measured = {f"forecast.k{k}.max_error_pct": float(table.loc[k, "cost_error_pct"].abs().max()) for k in observed}
    curve = pd.DataFrame([{"cap": f.cap, "predicted_usd": f.cost_usd}
                          for f in forecast(head.trace.events, observed=max(observed), caps=range(1, max(caps) + 1))]
                         ).set_index("cap")
    return CapForecast(table, curve, measured)


class VaryingModel:
    """A model that never answers and whose replies vary in length: each turn it says "Still looking."
    between 0 and ``most`` times before calling ``list_files`` again. The length is a pure function of
    the turn (seeded), so runs repeat exactly. Usage is counted the scripted provider's way."""

    def __init__(self, seed: int = 12, most: int = 12):
        self.seed, self.most = seed, most

    async def complete(self, model: str, messages: list[dict], tools: list[dict] | None = None, **_) -> dict:
        t = turn_index(messages)
        note = " ".join(["Still looking."] * random.Random(f"{self.seed}:{t}").randint(0, self.most))
        message = {"role": "assistant", "content": note or None, "tool_calls": [call(f"c{t}", "list_files", {})]}
        return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                "usage": usage(messages, tools, message)}


async def _capped(base_url: str, name: str, cap: int, runs: dict[int, RunState] | None, **options) -> RunState:
    kept = (runs or {}).get(cap)
    if kept is not None and kept.model == name and kept.status in ("completed", "max_turns_exceeded") \
            and not options:  # not a run that Stop ended half-way
        return kept
    return (await scenario(base_url, name, max_turns=cap, **options)).state


@all_or_nothing
async def forecast_breaks(base_url: str, observed: int = 3, caps=CHAPTER_CAPS,
                          runs: dict[int, RunState] | None = None) -> ForecastBreaks:
    """The same forecast on runs that break its assumption: a model whose replies vary in length, and
    runs that answer before the cap (plan, recover), which the forecast prices as if they went on. ``runs``:
    the runaway's, by cap, if already made (``cap_forecast``)."""
    observed, caps = _observed(observed), _caps(caps)
    cases = {N_("runaway (the assumption holds)"): dict(name="runaway"),   # the figures' keys are made from the
             N_("replies of varying length"): dict(name="varying", client=VaryingModel()),  # English; the table
             N_("plan (answers at turn 3)"): dict(name="plan"),             # shows them translated
             N_("recover (answers at turn 4)"): dict(name="recover")}
    rows = []
    for label, case in cases.items():
        options = {k: v for k, v in case.items() if k != "name"}
        head = await scenario(base_url, case["name"], max_turns=observed, **options)
        seen = min(observed, head.state.turns)  # a run that answered sooner shows what it has
        predicted = {f.cap: f for f in forecast(head.state, observed=seen, caps=caps)}
        for cap in caps:
            s = await _capped(base_url, case["name"], cap, runs, **options)
            f = predicted[cap]
            rows.append({"run": label, "cap": cap, "observed_turns": seen, "status": s.status, "turns": s.turns,
                         "predicted_usd": f.cost_usd, "measured_usd": round(s.own_cost_usd, 6),
                         "cost_error_pct": round(100 * (f.cost_usd - s.own_cost_usd) / s.own_cost_usd, 1)})
    table = pd.DataFrame(rows).set_index(["run", "cap"])
    worst = table["cost_error_pct"].abs().groupby(level="run").max()
    measured = {f"forecast.breaks.{label.split(' ')[0]}": float(worst[label]) for label in cases}
    return ForecastBreaks(table.rename(index=_, level="run"), measured)   # the runs named in the language spoken


def forecast_plot(table: pd.DataFrame, curve: pd.DataFrame, breaks: pd.DataFrame | None = None) -> Figure:
    """Left: the forecast from the first turns (a line over every cap) and the caps as run (points).
    Right (with ``breaks``): forecast divided by measurement, where the assumption holds and where not."""
    fig, axes = _figure(10.0 if breaks is not None else 6.5, 3.8, ncols=2 if breaks is not None else 1)
    k = int(table.index.get_level_values("observed_turns").max())
    measured = table.loc[k]
    worst = measured["cost_error_pct"].abs().max()
    with style():
        ax = axes[0]
        ax.plot(curve.index, curve["predicted_usd"], color=BLUE,
                label=ngettext("forecast from the first turn", "forecast from the first {k} turns", k).format(k=k))
        ax.scatter(measured.index, measured["measured_usd"], color=RED, zorder=3,
                   label=_("caps as run (largest error {worst:.2f} %)").format(worst=worst))
        for n, (cap, row) in enumerate(measured.iterrows()):
            below = n % 2 == 0
            ax.annotate(_("cap {cap}: ${usd:.4f}").format(cap=cap, usd=row["measured_usd"]), (cap, row["measured_usd"]),
                        xytext=(7, -4) if below else (-7, 5), textcoords="offset points",
                        ha="left" if below else "right", va="top" if below else "bottom", fontsize=8)
        ax.set_xlabel(_("turn cap"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("Runaway caps, priced before they run"))
        ax.legend(loc="upper left")
        if breaks is not None:
            ax = axes[1]
            labels = list(dict.fromkeys(breaks.index.get_level_values("run")))
            caps = sorted(set(breaks.index.get_level_values("cap")))
            width = 0.8 / len(labels)
            for n, (label, color) in enumerate(zip(labels, [BLUE, ORANGE, GREY, RED])):
                ratio = [breaks.loc[(label, c), "predicted_usd"] / breaks.loc[(label, c), "measured_usd"] for c in caps]
                ax.bar([i + n * width for i in range(len(caps))], ratio, width=width, color=color, label=_(label),
                       bottom=0)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(caps))], [_("cap {cap}").format(cap=c) for c in caps])
            ax.set_yscale("log")
            ax.axhline(1, color="black", linewidth=0.8)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _pos: f"×{y:g}"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_ylabel(_("forecast ÷ measured cost"))
            ax.set_title(_("Where constant growth is the wrong guess"))
            ax.legend(loc="upper left", fontsize=7.5)
    return fig


def quadratic_growth_plot(prefix: pd.DataFrame, coefficients) -> Figure:
    """Left: each turn's prompt tokens (a straight line). Right: their running sum, the input tokens a
    run capped at n pays for, with the fitted ``a n^2 + b n + c`` drawn over it."""
    fig, (left, right) = _figure(8.5, 3.4, ncols=2)
    n = prefix.index.to_numpy()
    with style():
        left.plot(n, prefix["prompt_tokens"], color=BLUE)
        left.set_title(_("Prompt tokens of turn n"))
        left.set_xlabel(_("turn n"))
        left.set_ylabel(_("tokens"))
        right.plot(n, prefix["input_tokens"], color=BLUE, linewidth=3, alpha=0.45, label=_("measured"))
        a, b, c = coefficients
        right.plot(n, np.polyval(coefficients, n), color=RED, linestyle="--", linewidth=1.2,
                   label=_("fit {a:.1f} n² + {b:.1f} n {sign} {c:.1f}").format(a=a, b=b, sign="+" if c >= 0 else "−",
                                                                             c=abs(c)))
        right.set_title(_("Input tokens paid for, turns 1..n"))
        right.set_xlabel(_("turn cap n"))
        right.set_ylabel(_("input tokens (cumulative)"))
        right.legend(loc="upper left")
        for ax in (left, right):
            ax.yaxis.set_major_formatter(number_ticks())
    return fig


def cap_plot(prefix: pd.DataFrame, cap: int) -> tuple[Figure, str]:
    """Where a cap of ``cap`` turns lands on the cost of every cap (``prefix``, one long run's running sums, at least
    ``cap`` turns long), beside half that cap, and that in words: the notebook's slider."""
    row = prefix.loc[cap]
    half = prefix.loc[cap // 2] if cap >= 2 else None
    fig, (ax,) = _figure(7.0, 3.4)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=BLUE, label=_("every cap, from the long run's prefixes"))
        ax.axvline(cap, color=RED, linestyle="--", linewidth=1.0)
        ax.scatter([cap], [row["cost_usd"]], color=RED, zorder=4, s=60,
                   label=_("cap {cap}: {tokens:,} input tokens, ${usd:.4f}").format(
                       cap=cap, tokens=int(row["input_tokens"]), usd=row["cost_usd"]))
        if half is not None:
            ax.scatter([cap // 2], [half["cost_usd"]], color=ORANGE, zorder=4, s=40,
                       label=_("half of it, cap {cap}: ${usd:.4f}").format(cap=cap // 2, usd=half["cost_usd"]))
        ax.set_xlabel(_("turn cap (the runaway script never stops by itself)"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("Your cap on the cost of every cap"))
        ax.yaxis.set_major_formatter(dollar_ticks(2))
        ax.legend(loc="upper left")
    text = _("{tokens:,} input tokens, ${usd:.6f}").format(tokens=int(row["input_tokens"]), usd=row["cost_usd"])
    if half is not None:
        text += "; " + _("{times:.2f} times the cost of cap {cap}").format(times=row["cost_usd"] / half["cost_usd"],
                                                                        cap=cap // 2)
    return fig, text


def cost_vs_cap_plot(prefix: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Cost against cap for every cap (a line from one long run's prefix sums), with separately run
    caps as points on it (``runs`` is indexed by cap and has ``cost_usd``)."""
    fig, (ax,) = _figure(7.0, 3.6)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=BLUE, label=_("prefix sums of one run"))
        ax.scatter(runs.index, runs["cost_usd"], color=ORANGE, zorder=3, s=36, label=_("a separate run at that cap"))
        last = runs.index.max()
        span = max(prefix.index.max(), last) or 1
        lift, previous = 0, None
        for cap, cost in sorted(runs["cost_usd"].items()):
            # Caps close together would print their labels on top of each other: stack them instead.
            lift = lift + 11 if previous is not None and (cap - previous) < 0.12 * span else 0
            previous = cap
            ax.annotate(_("cap {cap}: ${usd:.3f}").format(cap=cap, usd=cost), (cap, cost),
                        xytext=(-8, 4 + lift) if cap == last else (8, -3 + lift),
                        textcoords="offset points", ha="right" if cap == last else "left",
                        va="bottom" if cap == last else "top", fontsize=8.5)
        ax.set_xlabel(_("turn cap (the runaway script never stops by itself)"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("What a cap lets a runaway spend"))
        ax.yaxis.set_major_formatter(dollar_ticks(2))
        ax.legend(loc="upper left")
    return fig
