"""The notebooks' figures: matplotlib only, one fixed style, no pyplot state.

Every function takes the DataFrames the experiments return and gives back a ``Figure``; none computes a
number the experiments did not (a fitted curve is drawn from coefficients it is handed). ``show``
displays a figure in a notebook as a PNG and nothing else, so a notebook's text outputs stay free of
``<Figure size ...>`` lines and its PNGs carry no date.
"""

from __future__ import annotations

import base64
import io
from contextlib import contextmanager

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.prop_cycle": matplotlib.cycler(color=["#2f6db5", "#d9822b", "#3a9a5b", "#c23b3b", "#7d5ba6", "#6b6b6b"]),
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "figure.dpi": 100,
    "svg.hashsalt": "harness-lib",
    "text.parse_math": False,   # labels are full of dollars: "$0.010" must not start a formula
}
BLUE, ORANGE, GREEN, RED, PURPLE, GREY = STYLE["axes.prop_cycle"].by_key()["color"]
ROLE_COLORS = {"tool schemas": "#c9c9c9", "system": GREY, "user": GREEN, "assistant": BLUE, "tool": ORANGE}
DPI = 110


@contextmanager
def style():
    with matplotlib.rc_context(STYLE):
        yield


def _figure(width: float = 7.0, height: float = 3.4, ncols: int = 1):
    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def png(fig: Figure, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, without the ``Software`` stamp (so equal figures give equal bytes)."""
    buf = io.BytesIO()
    with style():
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def show(fig: Figure, dpi: int = DPI) -> None:
    """Display ``fig`` in a notebook as a PNG and nothing else (no text/plain twin)."""
    from IPython.display import display

    display({"image/png": base64.b64encode(png(fig, dpi)).decode("ascii")}, raw=True)


def _label_bars(ax, bars, labels, inside: bool = False):
    for bar, text in zip(bars, labels):
        x = bar.get_x() + bar.get_width() / 2
        y = bar.get_height() / 2 if inside else bar.get_height()
        ax.annotate(text, (x, y), xytext=(0, 0 if inside else 3), textcoords="offset points",
                    ha="center", va="center" if inside else "bottom", fontsize=8.5)


# -- 01: what each turn sends ------------------------------------------------------------------------
def request_parts(parts: pd.DataFrame) -> Figure:
    """Stacked bars, one per turn: the prompt tokens of each request, split into the tool schemas and
    every message sent so far (``experiments.request_parts``)."""
    fig, (ax,) = _figure(7.0, 3.8)
    with style():
        turns = sorted(parts["turn"].unique())
        labelled = set()
        for turn in turns:
            bottom = 0
            for row in parts[parts["turn"] == turn].itertuples():
                label = row.role if row.role not in labelled else None
                labelled.add(row.role)
                ax.bar(turn, row.tokens, bottom=bottom, width=0.6, color=ROLE_COLORS.get(row.role, PURPLE),
                       edgecolor="white", linewidth=0.8, label=label)
                if row.tokens >= 18:  # too thin to hold a label otherwise
                    ax.text(turn, bottom + row.tokens / 2, row.part, ha="center", va="center", fontsize=7.5,
                            color="black" if row.role == "tool schemas" else "white")
                bottom += row.tokens
            ax.annotate(f"{bottom:,}", (turn, bottom), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontweight="bold")
        ax.set_xticks(turns, [f"turn {t}" for t in turns])
        ax.set_ylabel("prompt tokens sent")
        ax.set_title("Every turn resends everything before it")
        ax.legend(loc="upper left")
        ax.set_ylim(0, parts.groupby("turn")["tokens"].sum().max() * 1.15)
    return fig


# -- 02: the turn cap -------------------------------------------------------------------------------------
def quadratic_growth(prefix: pd.DataFrame, coefficients) -> Figure:
    """Left: each turn's prompt tokens (a straight line). Right: their running sum, the input tokens a
    run capped at n pays for, with the fitted ``a n^2 + b n + c`` drawn over it."""
    fig, (left, right) = _figure(8.5, 3.4, ncols=2)
    n = prefix.index.to_numpy()
    with style():
        left.plot(n, prefix["prompt_tokens"], color=BLUE)
        left.set_title("Prompt tokens of turn n")
        left.set_xlabel("turn n")
        left.set_ylabel("tokens")
        right.plot(n, prefix["input_tokens"], color=BLUE, linewidth=3, alpha=0.45, label="measured")
        a, b, c = coefficients
        right.plot(n, np.polyval(coefficients, n), color=RED, linestyle="--", linewidth=1.2,
                   label=f"fit {a:.1f} n² + {b:.1f} n {'+' if c >= 0 else '−'} {abs(c):.1f}")
        right.set_title("Input tokens paid for, turns 1..n")
        right.set_xlabel("turn cap n")
        right.set_ylabel("input tokens (cumulative)")
        right.legend(loc="upper left")
        for ax in (left, right):
            ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    return fig


def cost_vs_cap(prefix: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Cost against cap for every cap (a line from one long run's prefix sums), with separately run
    caps as points on it (``runs`` is indexed by cap and has ``cost_usd``)."""
    fig, (ax,) = _figure(7.0, 3.6)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=BLUE, label="prefix sums of one run")
        ax.scatter(runs.index, runs["cost_usd"], color=ORANGE, zorder=3, s=36, label="a separate run at that cap")
        last = runs.index.max()
        span = max(prefix.index.max(), last) or 1
        lift, previous = 0, None
        for cap, cost in sorted(runs["cost_usd"].items()):
            # Caps close together would print their labels on top of each other: stack them instead.
            lift = lift + 11 if previous is not None and (cap - previous) < 0.12 * span else 0
            previous = cap
            ax.annotate(f"cap {cap}: ${cost:.3f}", (cap, cost),
                        xytext=(-8, 4 + lift) if cap == last else (8, -3 + lift),
                        textcoords="offset points", ha="right" if cap == last else "left",
                        va="bottom" if cap == last else "top", fontsize=8.5)
        ax.set_xlabel("turn cap (the runaway script never stops by itself)")
        ax.set_ylabel("cost (USD)")
        ax.set_title("What a cap lets a runaway spend")
        ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("${x:.2f}"))
        ax.legend(loc="upper left")
    return fig


# -- 03: the budget ---------------------------------------------------------------------------------------
def budget_stairs(prefix: pd.DataFrame, budgets: pd.DataFrame) -> Figure:
    """The running cost of a runaway, turn by turn, against each budget: the run stops at the first
    check that finds the budget reached, one turn's price past it at most."""
    fig, (ax,) = _figure(7.0, 3.8)
    with style():
        ax.step(prefix.index, prefix["cost_usd"], where="post", color=GREY, linewidth=1.2,
                label="running cost, turn by turn")
        colors = [BLUE, ORANGE, GREEN, RED, PURPLE]
        for color, row in zip(colors * 3, budgets.itertuples()):
            ax.axhline(row.budget_usd, color=color, linestyle="--", linewidth=0.9)
            ax.scatter([row.turns], [row.spent_usd], color=color, zorder=3, s=30,
                       label=f"budget ${row.budget_usd:.3f}: {row.turns} turns, ${row.spent_usd:.6f}")
            ax.vlines(row.turns, row.budget_usd, row.spent_usd, color=color, linewidth=2.5)
        ax.set_xlabel("turns")
        ax.set_ylabel("cost (USD)")
        ax.set_title("Each run stops at the first check past its budget")
        ax.legend(loc="upper left")
        ax.set_xlim(0, budgets["turns"].max() + 2)
        ax.set_ylim(0, budgets["spent_usd"].max() * 1.15)
    return fig


# -- generic labelled bars (05, 06, 12, 13) -------------------------------------------------------------
def bars(table: pd.DataFrame, columns: list[str], titles: list[str] | None = None, formats: list[str] | None = None,
         highlight: pd.Series | None = None, highlight_label: str = "", width: float | None = None) -> Figure:
    """One panel per column, one bar per row of ``table`` (its index labels the bars). Rows where
    ``highlight`` is true are drawn in green, with ``highlight_label`` in the legend."""
    fig, axes = _figure(width or 3.3 * len(columns) + 1.0, 3.4, ncols=len(columns))
    titles = titles or columns
    formats = formats or ["{:,}"] * len(columns)
    labels = [str(i) for i in table.index]
    with style():
        for ax, column, title, fmt in zip(axes, columns, titles, formats):
            colors = [GREEN if highlight is not None and bool(highlight.iloc[i]) else BLUE for i in range(len(table))]
            drawn = ax.bar(range(len(table)), table[column], color=colors, width=0.6)
            _label_bars(ax, drawn, [fmt.format(v) for v in table[column]])
            ax.set_xticks(range(len(table)), labels, rotation=20 if max(map(len, labels)) > 12 else 0, ha="right"
                          if max(map(len, labels)) > 12 else "center")
            ax.set_title(title)
            ax.set_ylim(0, max(table[column].max(), 1e-12) * 1.2)
            if pd.api.types.is_integer_dtype(table[column]):  # counts: no half-ticks
                ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            if table[column].max() >= 1000:
                ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
        if table.attrs.get("recorded"):  # data not measured here says so on the figure itself
            fig.suptitle(f"Recorded data: {table.attrs['recorded']}", x=0.01, ha="left", fontsize=9,
                         color=GREY, style="italic")
        if highlight is not None and highlight.any() and highlight_label:
            from matplotlib.patches import Patch
            axes[-1].legend(handles=[Patch(color=GREEN, label=highlight_label)], loc="upper left")
    return fig


# -- 09: cancellation ------------------------------------------------------------------------------------
def cancel_timeline(timelines: dict[str, pd.DataFrame], ended_ms: dict[str, float], stop_at_s: float | None) -> Figure:
    """One lane per run: its progress events as dots, a bar to the moment the run ended, and the
    moment Stop was pressed."""
    fig, (ax,) = _figure(7.5, 2.9)
    names = list(timelines)
    with style():
        for lane, name in enumerate(names):
            y = len(names) - 1 - lane
            ax.barh(y, ended_ms[name], height=0.35, color=BLUE if "deaf" not in name else RED, alpha=0.25)
            events = timelines[name]
            if len(events):
                ax.scatter(events["t_ms"], [y] * len(events), color=BLUE if "deaf" not in name else RED, zorder=3, s=22)
            ax.annotate(f"{ended_ms[name]:,.0f} ms", (ended_ms[name], y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8.5)
        if stop_at_s is not None:
            ax.axvline(stop_at_s * 1000, color=ORANGE, linestyle="--", linewidth=1.2)
            ax.annotate(f"Stop pressed ({stop_at_s} s)", (stop_at_s * 1000, len(names) - 0.55), xytext=(4, 0),
                        textcoords="offset points", color=ORANGE, fontsize=8.5, va="bottom")
        ax.set_ylim(-0.5, len(names) - 0.2)
        ax.set_yticks(range(len(names)), list(reversed(names)))
        ax.set_xlabel("ms since scan_archive started (dots: progress events)")
        ax.set_title("Progress while the tool runs, and how soon Stop takes effect")
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, max(*ended_ms.values(), (stop_at_s or 0) * 1000) * 1.15)
    return fig


# -- 10: the trace -----------------------------------------------------------------------------------------
def turn_costs(turns: pd.DataFrame, title: str = "Cost per turn, from the trace alone") -> Figure:
    """Bars: each turn's own cost; lines: the running cost the trace lines carry, one line per run
    (``experiments.turn_costs``)."""
    fig, (ax,) = _figure(6.5, 3.4)
    several = turns["runId"].nunique() > 1
    with style():
        x = np.arange(len(turns))
        drawn = ax.bar(x, turns["turn_cost_usd"], width=0.55, color=BLUE, label="that turn's cost")
        for bar, value in zip(drawn, turns["turn_cost_usd"] if not several else []):  # too narrow when several
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() / 2, f"${value:.6f}", ha="center",
                    va="center", color="white", fontsize=8.5)
        for n, (_run_id, rows) in enumerate(turns.groupby("runId", sort=False)):
            ax.plot(x[rows.index], rows["costUsd"], color=ORANGE, marker="o",
                    label="running total (costUsd)" if n == 0 else None)
        ax.set_xticks(x, [f"{r.runId}\nturn {r.turn}" if several else f"turn {r.turn}" for r in turns.itertuples()])
        ax.set_ylabel("USD")
        ax.set_title(title)
        ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("${x:.5f}"))
        ax.legend(loc="upper left")
        ax.set_ylim(0, turns["costUsd"].max() * 1.3)
    return fig


# -- 11: latency ---------------------------------------------------------------------------------------------
def latency_fit(table: pd.DataFrame, slope: float, intercept: float) -> Figure:
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


# -- 14: stop conditions -------------------------------------------------------------------------------------
def stops_on_curve(prefix: pd.DataFrame, table: pd.DataFrame) -> Figure:
    """The runaway's running cost, with the turn each stop condition ended it at (``table`` has
    ``turns`` and ``cost_usd``, indexed by condition)."""
    fig, (ax,) = _figure(7.0, 3.6)
    with style():
        ax.plot(prefix.index, prefix["cost_usd"], color=GREY, linewidth=1.2, label="runaway, running cost")
        colors = [BLUE, ORANGE, GREEN, RED, PURPLE, "#8c6d31"]
        for n, (color, (label, row)) in enumerate(zip(colors * 3, table.iterrows())):
            # Later points are drawn smaller, so two conditions that stop at the same turn both show.
            ax.scatter([row["turns"]], [row["cost_usd"]], color=color, zorder=3 + n, s=max(110 - 18 * n, 20),
                       label=f"{label}: turn {row['turns']}")
        ax.set_xlabel("turns")
        ax.set_ylabel("cost (USD)")
        ax.set_title("Where each stop condition ends the same runaway")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_xlim(0, prefix.index.max() + 1)
    return fig
