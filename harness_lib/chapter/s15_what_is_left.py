"""Notebook 15, what is left: what each request resends as the transcript grows, what a turn cap does about
it and what it does not, one window policy measured as a look ahead (beyond the chapter), and the chapter's
thesis against the companion's own runs (the five exits seen, the last report's tally).

The notebook runs everything in its cells with the public API and its own small loop; this module holds what a
reader need not read: splitting each request into its parts (``history_shares``), the tables and the plot, the
section's figures (``left_figures``, shared with the report's own run, ``what_is_left``) and the last report's
tally (``report_tally``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd
from matplotlib.figure import Figure

from ..state import RunState
from ..tokens import compact, count, encoding
from . import params
from .common import Measured, as_row, scenario
from .figures import DIFFERS, EXACT, NO_FIGURE, NOT_HERE, OFFLINE, OTHER_MACHINE, OTHER_MODEL, WITHIN, tally
from .language import C_, N_, _, number
from .plots import BLUE, GREEN, ORANGE, RED, ROLE_COLORS, _figure, number_ticks, style
from .stop_button import all_or_nothing

PARAMETERS = {
    "CAPS": params.Whole(1, 100, several=True),   # 100: the chapter's; taking a run apart costs its square
    "KEEP_LAST": params.Whole(0, 20),
    "PLACEHOLDER": params.Words(empty=True),
}
CHAPTER_CAPS = (8, 100)   # the runaway's caps the chapter prints again in section 15

PARTS = (N_("tool schemas"), N_("the task"), N_("old assistant turns"), N_("old tool results"))   # columns: English
PART_LABELS = (C_("label", "tool schemas"), C_("label", "the task"), C_("label", "old assistant turns"),
               C_("label", "old tool results"))   # as a table shows them
PART_OF = {"system": "the task", "user": "the task", "assistant": "old assistant turns", "tool": "old tool results"}
PART_COLORS = {"tool schemas": ROLE_COLORS["tool schemas"], "the task": GREEN, "old assistant turns": BLUE,
               "old tool results": ORANGE}


class WhatIsLeft(NamedTuple):
    """15: the runaway at the chapter's caps and the plan run, as the report measures them."""
    runs: dict              # cap -> the runaway's RunState
    plan: RunState
    measured: Measured


def history_shares(state: RunState, tool_schemas: list[dict]) -> pd.DataFrame:
    """One row per turn: the prompt tokens its request was billed, split into the tool schemas, the task (system
    prompt and question) and what earlier turns left in the transcript (the assistant's replies, the tool
    results). A message's share is what adding it to the JSON array added (the array's brackets go to the first
    message), so each turn's parts sum exactly to what the provider billed; the ``billed`` column says so."""
    messages = state.messages
    asked = [i for i, m in enumerate(messages) if m.get("role") == "assistant"][:len(state.per_turn)]
    encoder, text, prefix = encoding(), "[", []   # the array so far, as the provider counts it (compact JSON)
    for i, message in enumerate(messages[:max(asked, default=0)]):
        text += ("," if i else "") + compact(message)
        prefix.append(len(encoder.encode_ordinary(text + "]")))
    shares = [now - before for before, now in zip([0, *prefix], prefix)]
    schemas = count(compact(tool_schemas)) if tool_schemas else 0
    rows = []
    for turn, end in enumerate(asked, 1):
        row = {"turn": turn, **dict.fromkeys(PARTS, 0), "tool schemas": schemas}
        for i in range(end):
            row[PART_OF.get(messages[i].get("role"), "the task")] += shares[i]
        row["prompt"] = sum(row[p] for p in PARTS)
        row["billed"] = state.per_turn[turn - 1]["prompt_tokens"]
        row["history %"] = round(100 * (row["old assistant turns"] + row["old tool results"]) / row["prompt"], 1)
        rows.append(row)
    return pd.DataFrame(rows).set_index("turn")


def left_figures(runs: dict, plan: RunState) -> Measured:
    """Section 15's figures: the runaway's input tokens at caps 8 and 100 (any other cap a reader ran is listed
    as having no chapter figure) and the plan run's per-turn prompt tokens."""
    measured: Measured = {}
    for cap, state in runs.items():
        key = f"left.in{cap}" if cap in CHAPTER_CAPS else f"runaway, cap {cap}: input tokens"
        measured[key] = state.prompt_tokens
    measured["left.prompts"] = [t["prompt_tokens"] for t in plan.per_turn]
    return measured


@all_or_nothing
async def what_is_left(base_url: str, caps=CHAPTER_CAPS) -> WhatIsLeft:
    """The runs notebook 15 starts with, for the report: the runaway at each cap, and the plan run at cap 20."""
    caps = PARAMETERS["CAPS"].check("CAPS", caps)
    runs = {cap: (await scenario(base_url, "runaway", max_turns=cap)).state for cap in caps}
    plan = (await scenario(base_url, "plan", max_turns=20)).state
    return WhatIsLeft(runs, plan, left_figures(runs, plan))


def cap_effect(runs: dict, shares: pd.DataFrame) -> pd.DataFrame:
    """What each cap did: the bill it let through, and what its last request still resent (from the longest
    run's ``history_shares``: a run capped at n is the first n turns of a longer one, which the last column
    checks turn by turn)."""
    longest = runs[max(runs)]
    rows = []
    for cap, state in runs.items():
        last = shares.loc[state.turns]
        rows.append({"cap": cap, **as_row(state), "last prompt": int(last["prompt"]),
                     _("of which history"): int(last["old assistant turns"] + last["old tool results"]),
                     _("history"): f"{number(last['history %'], 1, grouped=False)} %",
                     C_("label", "same turns as the longest run"): [t["prompt_tokens"] for t in state.per_turn]
                     == [t["prompt_tokens"] for t in longest.per_turn[:state.turns]]})
    return pd.DataFrame(rows).set_index("cap").drop(columns=["status"])


def window_table(full: dict, windowed: dict) -> pd.DataFrame:
    """Each script run twice by the notebook's loop, without and with the window: what the window saved, and
    whether the run ended the same (``full`` and ``windowed``: script -> the loop's tally)."""
    rows = []
    for name, a in full.items():
        b = windowed[name]
        rows.append({"script": name, "turns": f"{a['turns']} -> {b['turns']}", "input tokens": a["in"],
                     _("with the window"): b["in"], _("saved"): a["in"] - b["in"],
                     _("share saved"): (f"{number(100 * (a['in'] - b['in']) / a['in'], 1, grouped=False)} %"
                                         if a["in"] else ""),
                     _("dollars saved"): round(a["cost_usd"] - b["cost_usd"], 6),
                     _("ends the same"): (a["status"], a["answer"]) == (b["status"], b["answer"]),
                     _("answer with the window"): b["answer"] if b["answer"] is not None else ""})
    return pd.DataFrame(rows).set_index("script")


def milestones(parts: pd.DataFrame) -> pd.DataFrame:
    """A few turns of a long ``history_shares`` table: the first three, the chapter's 8, then 20, 50, 100, 200
    and the last, those the run has."""
    turns = [t for t in (1, 2, 3, 8, 20, 50, 100, 200) if t in parts.index] + [int(parts.index.max())]
    return parts.loc[sorted(set(turns))]


def growth_plot(runaway: pd.DataFrame, plan: pd.DataFrame) -> Figure:
    """Left: the runaway's prompt per turn, stacked by part (``history_shares``). Right: the plan run's three
    requests, the same parts as bars."""
    fig, (left, right) = _figure(10.0, 3.8, ncols=2)
    with style():
        left.stackplot(runaway.index.to_numpy(), *[runaway[p] for p in PARTS], labels=[_(p) for p in PARTS],
                       colors=[PART_COLORS[p] for p in PARTS])
        left.set_title(_("The runaway: each request resends its history"))
        left.set_xlabel(_("turn"))
        left.set_ylabel(_("prompt tokens of the request"))
        left.legend(loc="upper left", fontsize=7.5)
        left.yaxis.set_major_formatter(number_ticks())
        bottom = pd.Series(0, index=plan.index)
        for part in PARTS:
            right.bar(plan.index, plan[part], bottom=bottom, width=0.6, color=PART_COLORS[part], edgecolor="white")
            bottom = bottom + plan[part]
        for turn, total in bottom.items():
            right.annotate(number(total), (turn, total), xytext=(0, 3), textcoords="offset points", ha="center",
                           va="bottom", fontweight="bold")
        right.set_xticks(plan.index, [_("turn {n}").format(n=t) for t in plan.index])
        right.set_ylim(0, bottom.max() * 1.15)
        right.set_title(_("The plan run, the same parts"))
    return fig


def window_plot(full: list[int], windowed: list[int]) -> Figure:
    """The runaway's prompt tokens per turn as sent without and with the window (the loop's ``prompts``)."""
    fig, (ax,) = _figure(7.0, 3.4)
    with style():
        ax.plot(range(1, len(full) + 1), full, color=BLUE, label=_("the whole transcript (the chapter's loop)"))
        ax.plot(range(1, len(windowed) + 1), windowed, color=RED, linestyle="--",
                label=_("older tool results as a placeholder (beyond the chapter)"))
        ax.set_title(_("A window slows the growth; here it does not stop it"))
        ax.set_xlabel(_("turn"))
        ax.set_ylabel(_("prompt tokens of the request"))
        ax.legend(loc="upper left")
        ax.yaxis.set_major_formatter(number_ticks())
    return fig


# -- the thesis, against the companion's own runs -------------------------------------------------------
FIVE = ("completed", "failed", "max_turns_exceeded", "budget_exceeded", "interrupted")
SEEN_IN = {"completed": "01, 04", "failed": N_("04 (a 401 from the provider), 05 (fatal tool errors)"),
           "max_turns_exceeded": N_("02, 04, 05 (a permanent error)"), "budget_exceeded": "03, 04",
           "interrupted": N_("04, 07 (approval), 09 (Stop)")}   # translated where shown


def exits_seen(runs: list[tuple[str, dict, RunState]]) -> pd.DataFrame:
    """The five statuses, each with the first of ``runs`` (script, options, state) that ended with it and the
    notebooks that show it too; a status no run here ended with is said ("NO"), not left out."""
    out = []
    for status in FIVE:
        first = next(((name, options, s) for name, options, s in runs if s.status == status), None)
        seen = _("seen here")
        row = {"exit": status, seen: _("yes") if first else _("NO"), "run": "", "turns": "", "cost_usd": "",
               "resumable": "", "why": ""}
        if first:
            name, options, s = first
            row.update({"run": " ".join([name, *(f"{k}={v!r}" for k, v in options.items())]), "turns": s.turns,
                        "cost_usd": number(s.own_cost_usd, 6, grouped=False), "resumable": s.resumable,
                        "why": (s.interruption or {}).get("type") or s.error or ""})
        out.append({**row, _("also in notebook"): _(SEEN_IN[status])})
    return pd.DataFrame(out).set_index("exit")


REPORT = Path(__file__).resolve().parents[2] / "reports" / "chapter.csv"   # the project's, next to the notebooks
CATEGORIES = (EXACT, WITHIN, OTHER_MACHINE, NOT_HERE, OTHER_MODEL, OFFLINE, DIFFERS)
REPORT_COLUMNS = {"section", "id", "match"}


def report_path(here: Path | None = None) -> Path:
    """The report beside the notebooks a kernel runs in (its working folder, ``here``): ``reports/chapter.csv``
    one folder up from ``notebooks/`` or two from ``notebooks/bg``, so the committed notebooks read the committed
    report and the reader's executed copies (``executed/notebooks``) the reader's own; else the project's."""
    here = Path.cwd() if here is None else Path(here)
    for folder in (here.parent, here.parent.parent):
        if (folder / "reports" / "chapter.csv").is_file():
            return folder / "reports" / "chapter.csv"
    return REPORT


def report_tally(path: Path | None = None) -> tuple[pd.DataFrame | None, str]:
    """The last report's figures (``make chapter`` writes ``chapter.csv``, ``report_path`` finds it) counted by
    section and by category, and its tally line; without a readable report, no table and one line saying so."""
    path = report_path() if path is None else Path(path)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        return None, _("no report yet ({name} is written by `make chapter`, in the project's reports/)").format(
            name=path.name)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return None, _("{name} cannot be read ({error}): run `make chapter` to write it again").format(
            name=path.name, error=type(e).__name__)
    if not REPORT_COLUMNS <= set(table.columns) or not len(table):
        return None, _("{name} is not a report of the chapter's figures: run `make chapter` to write it again").format(
            name=path.name)
    table = table[table["match"] != NO_FIGURE]
    counts = pd.crosstab(table["section"], table["match"]).reindex(list(dict.fromkeys(table["section"])))
    known = [c for c in CATEGORIES if c in counts.columns]
    counts = counts[known + [c for c in counts.columns if c not in CATEGORIES]]
    counts.columns.name = None
    counts[N_("figures")] = counts.sum(axis=1)
    return counts.rename(columns=_), tally(table)   # the report's categories, in the language spoken
