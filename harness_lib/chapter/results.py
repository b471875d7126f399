"""What each experiment returns: one small named record per experiment, read by attribute.

``measured`` is the same field everywhere it exists: the figures an experiment measured, figure id ->
value, to lay beside the chapter's (``figures.compare``); ``report.py`` reads ``.measured`` and nothing
else. The records are NamedTuples, so ``table, measured = await ex.cap_table(url)`` still unpacks, in the
order of the fields below.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd

Measured = dict[str, Any]


# -- the chapter's experiments (``experiments.py``) --------------------------------------------------------
class SwitchServers(NamedTuple):
    """00: one run moved from a server to a brand-new one."""
    first_leg: str          # how the first leg ended on the first server ("status=..., turns=...")
    table: pd.DataFrame     # the moved run beside the same run on one server throughout


class LoopPlan(NamedTuple):
    """01: the plan run, timed once warm."""
    outcome: Any            # the run (``experiments.Outcome``: state, workspace, wall_ms, trace)
    transcript: pd.DataFrame  # one row per message the run holds
    measured: Measured


class CapTable(NamedTuple):
    """02: one runaway run per turn cap."""
    table: pd.DataFrame     # indexed by cap: status, turns, tokens, cost, wall time
    measured: Measured


class BudgetTable(NamedTuple):
    """03: the runaway, no turn cap, once per budget."""
    table: pd.DataFrame     # one row per budget: spent, overshoot, the last turn's cost
    measured: Measured


class FiveExits(NamedTuple):
    """04: one run per exit of the loop."""
    table: pd.DataFrame     # one row per run: status, interruption, resumable, error
    runs: dict              # row label -> ``Outcome``, for ``resume_the_resumable``


class Resumed(NamedTuple):
    """04: two of ``five_exits``'s runs continued (copies of them)."""
    raised: Any             # the capped runaway, continued with its cap raised (``Outcome``)
    approved: Any           # the run that stopped for approval, its call approved (``Outcome``)


class ToolErrors(NamedTuple):
    """05: the recover run under each tool-error policy, and the error no message can fix."""
    table: pd.DataFrame     # indexed by policy: the run, whether it answered, what the model read
    permanent: pd.DataFrame  # the forbidden run: a file the process may not open
    measured: Measured


class Dedupe(NamedTuple):
    """06: repeated reads with and without the cache, and the naive cache on a write."""
    table: pd.DataFrame     # the repeated-read runs: their costs
    writes: pd.DataFrame    # delete_twice under each cache: how often delete_file really ran
    measured: Measured


class Approval(NamedTuple):
    """07: the run that stops for approval, and what each verdict leads to."""
    stopped: Any            # the run as it stopped (``Outcome``)
    table: pd.DataFrame     # indexed by verdict: turns, deleted files, the slot's text, the answer
    measured: Measured


class ResumeAfterKill(NamedTuple):
    """08: a run killed in a child process, restored from disk and finished here."""
    table: pd.DataFrame     # the run as restored, then as finished
    events: list            # the trace's events, both processes
    measured: Measured


class Cancellation(NamedTuple):
    """09: three timed scans: no Stop, Stop, Stop with a tool deaf to it."""
    table: pd.DataFrame     # one row per scan: status, when it ended, Stop to end
    timelines: dict         # scan label -> its progress events (t_ms, label)
    measured: Measured


class TraceDemo(NamedTuple):
    """10: the approval run, traced to a file, beside the chapter's trace."""
    outcome: Any            # the run (``Outcome``)
    events: list            # the trace file's events
    diff: pd.DataFrame      # field by field against the chapter's trace
    measured: Measured


class Latency(NamedTuple):
    """11: the same run against providers of growing latency."""
    table: pd.DataFrame     # one row per latency: turns, wall time, the harness's own time
    slope: float            # fitted wall ms per ms of latency (about the run's turn count)
    intercept: float        # fitted wall ms at no latency
    measured: Measured


class Subagent(NamedTuple):
    """13: a parent that delegates to a child run through a tool."""
    outcome: Any            # the parent's run (``Outcome``)
    table: pd.DataFrame     # parent and child: status, turns, messages, own cost


# -- beyond the chapter (``beyond.py``) ----------------------------------------------------------------------
class PermanentErrors(NamedTuple):
    """The forbidden run ended by the turn cap, by a permanent mark, by repeated failures."""
    table: pd.DataFrame     # one row per run: how and when it ended, its share of the chapter's cost
    runs: dict              # row label -> ``Outcome``
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


class StrictBudgets(NamedTuple):
    """Each budget with the chapter's check and with the strict one."""
    table: pd.DataFrame     # indexed by (budget, check): spent, turns, overshoot, what ended it
    measured: Measured


class TokenizerMargin(NamedTuple):
    """Every request of a few runs counted by the local tokenizer and by cl100k_base."""
    table: pd.DataFrame     # indexed by (scenario, turn): the billed, local and cl100k counts, their ratio
    samples: pd.DataFrame   # a few texts (languages, code): both counts, their ratio
    measured: Measured
