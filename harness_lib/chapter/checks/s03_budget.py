"""The check of notebook 03's pieces, ``cost(usage)`` (a turn's price, from the usage its reply came back with) and
``budgeted_loop(url, model, messages, tools, max_budget_usd)``: 01's loop with the chapter's budget, checked at the
top of each iteration, before the call, ``cost_usd >= max_budget_usd``, and each turn paid as soon as its reply is
back.

The cases: the runaway under a budget below one turn's price, of exactly one turn's price ($0.000684), reached
exactly after two turns ($0.001498), of nothing, and the chapter's $0.010 and $0.050; ``plan`` stopped before its
answer, reached exactly, and answering past its budget; ``answer`` and the other scripts 03's loop can run under a
budget they never reach. Each run goes through a provider of the check's own (``served``) that bills every request
it answers, so a request the loop made and did not record is seen. Expected is ``harness_lib.run`` with
``Options(max_budget_usd=...)``, whose dollars are added exactly, plus what the chapter's placement adds: the
library checks its budget before running the calls the last reply asked for and leaves them owed; the chapter's
loop (and so yours) checks at the top of the next turn, so it has run them. The library refuses a budget of 0; the
chapter's check stops such a run before its first turn, and that is what is expected of yours.
"""

from __future__ import annotations

from ..checking import (
    COST,
    IN,
    OUT,
    QUICK_SCAN,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    answered,
    close,
    dollars,
    returned,
    start,
    workspace,
)
from ..language import N_, _, ngettext
from . import served

TURN_1, TURNS_1_2 = 0.000684, 0.001498   # the runaway's spend after one and after two turns


def _case(script: str, usd: float, point: str, exact: bool = False) -> Case:
    return Case(f"{script}, ${usd:g}", point, {"script": script, "usd": usd, "exact": exact})


CASES = (  # the first case that fails is the one explained
    _case("runaway", 0.0005, N_("a budget below one turn's price still buys that turn: the spend is known only once "
             "it is paid, so the run ends over its budget by less than one turn")),
    _case("runaway", 0.010, N_("the chapter's run: 9 turns, $0.010780 spent, over the budget by less than the last "
             "turn's price")),
    _case("plan", 0.001, N_("a budget reached between turns stops the run at the top of the next, the calls of the "
             "turn it paid for run")),
    _case("plan", 0.002, N_("a reply without calls ends the run as completed, even past the budget")),
    _case("runaway", TURN_1, N_("a budget of exactly one turn's price is reached after that turn: `>=` stops there"),
          exact=True),
    _case("runaway", TURNS_1_2, N_("a budget reached exactly after two turns stops the run there: `>=`, not `>`"),
          exact=True),
    _case("plan", 0.00157, N_("a budget reached exactly on plan's second turn stops it there"), exact=True),
    _case("runaway", 0, N_("a budget of 0 stops the run before its first turn: nothing is paid")),
    _case("runaway", 0.050, N_("a longer run: each turn dearer than the last, the budget still checked before each")),
    _case("answer", 0.0005, N_("an answer on the first turn completes the run, whatever it cost")),
    _case("direct", 0.050, N_("a budget a run never reaches changes nothing")),
    _case("repeat", 0.050, N_("a budget a run never reaches changes nothing")),
    _case("slow", 0.050, N_("a budget a run never reaches changes nothing")),
)

KEYS = ("status", "turns", "tool_runs", "in", "out", "cost_usd", "last_turn_usd")


async def yours(pieces: dict, case: Case, url: str) -> dict:
    from ...tokens import usage

    messages, tools, address = start(), workspace().tools(**QUICK_SCAN), served.url("03-budget", case.name, "yours")
    got = await pieces["budgeted_loop"](address, case.args["script"], messages, tools,
                                        max_budget_usd=case.args["usd"])
    schemas = [t.schema() for t in tools]
    asked = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"]
    prices = [pieces["cost"](usage(messages[:i], schemas, messages[i])) for i in asked]   # your cost, each turn
    return {**returned(got, KEYS, "budgeted_loop"), "billed": len(served.billed(address)), "prices": prices,
            "messages": messages}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    if case.args["usd"] == 0:   # the library refuses it; the chapter's check stops before the first turn
        return {"status": "budget_exceeded", "turns": 0, "tool_runs": 0, "in": 0, "out": 0, "cost_usd": 0.0,
                "last_turn_usd": 0.0, "billed": 0, "prices": [], "messages": start()}
    tools, address = workspace().tools(**QUICK_SCAN), served.url("03-budget", case.name, "library")
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools,
                      Options(base_url=address, max_budget_usd=case.args["usd"], max_turns=100))
    owed = await answered(state, tools) if state.status == "budget_exceeded" else []
    prices = [t["cost_usd"] for t in state.per_turn]
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs + len(owed),
            "in": state.prompt_tokens, "out": state.completion_tokens, "cost_usd": state.own_cost_usd,
            "last_turn_usd": prices[-1], "billed": len(served.billed(address)), "prices": prices,
            "messages": state.messages + owed}


def _prices_difference(e, y) -> str:
    if not isinstance(y, list):
        return _("your cost() gave {value}").format(value=repr(y))
    for n, (a, b) in enumerate(zip(e, y), 1):
        if not close(a, b, 1e-12):
            return _("your cost() of turn {n}'s usage: expected {expected}, yours {yours}").format(
                n=n, expected=dollars(a), yours=dollars(b))
    return ngettext("your run priced {yours} turn, expected {expected}",
                    "your run priced {yours} turns, expected {expected}", len(y)).format(yours=len(y), expected=len(e))


LAST = Field("last_turn_usd", show=lambda x: _("last turn {cost}").format(cost=dollars(x)),
             same=lambda a, b: close(a, b, 1e-12), label=N_("the last turn's price"))
# TRANSLATORS: "3 billed": the requests the provider billed, in a check's table
BILLED = Field("billed", show=lambda n: _("{n} billed").format(n=n), label=N_("requests the provider billed"))
# TRANSLATORS: "3 priced": the turns your cost() priced, in a check's table
PRICES = Field("prices", show=lambda p: _("{n} priced").format(n=len(p)) if isinstance(p, list) else repr(p),
               same=lambda a, b: isinstance(b, list) and len(a) == len(b) and all(map(close, a, b, [1e-12] * len(a))),
               describe=_prices_difference, follows=True)


def _stopped(e: dict) -> bool:
    return e["status"] == "budget_exceeded"


def _wrong_price(e: dict, y: dict) -> bool:
    return any(not close(a, b, 1e-12) for a, b in zip(e["prices"], y["prices"]))


def _not_as_billed(y: dict) -> bool:
    """Your loop's spend is not what your cost() makes of the usage of the turns it ran."""
    return bool(y["prices"]) and not (close(y["last_turn_usd"], y["prices"][-1], 1e-12)
                                      and close(y["cost_usd"], sum(y["prices"]), 1e-9))


HINTS = (
    Hint(N_("your loop never stopped the runaway: add each turn's price to the spend as its reply comes back, and "
            "stop at the top of the loop once `cost_usd >= max_budget_usd`"), lambda c, e, y: y.get("hung")),
    Hint(N_("`cost(usage)` prices a turn from the tokens its reply reports: `usage[\"prompt_tokens\"] * PRICE_IN + "
            "usage[\"completion_tokens\"] * PRICE_OUT`"), lambda c, e, y: _wrong_price(e, y)),
    Hint(N_("your loop asked the model for a turn it did not record: the provider billed more requests than your "
            "tally counts. Check the budget before the call, at the top of the loop; a check after the call learns of "
            "the overspend one turn late"), lambda c, e, y: y["billed"] > y["turns"]),
    Hint(N_("a budget of 0 paid for a turn: the chapter checks `cost_usd >= max_budget_usd` at the top of the loop, "
            "before the call, so a run with nothing to spend pays nothing"),
         lambda c, e, y: c.args["usd"] == 0 and y["turns"] > e["turns"]),
    Hint(N_("pay each turn what `cost(reply[\"usage\"])` says, the moment the reply is back: the spend is the sum of "
            "the turns' prices from their usage (not from the text's length), the last turn's price kept beside it"),
         lambda c, e, y: _not_as_billed(y)),
    Hint(N_("your spend came out a hair below the budget: floats drift (0.000408 + 0.000276 is 0.0006839999999999999, "
            "not 0.000684), so a budget reached exactly looks not reached. Round the running spend (`round(..., 12)`) "
            "or add in decimals, as harness_lib does"), lambda c, e, y: c.args["exact"] and y["turns"] > e["turns"]
         and y["cost_usd"] != round(y["cost_usd"], 6)),
    Hint(N_("one turn past a budget reached exactly: the run stops once `cost_usd >= max_budget_usd`, the budget "
            "reached, not passed (`>` lets one more turn through)"),
         lambda c, e, y: c.args["exact"] and y["turns"] == e["turns"] + 1),
    Hint(N_("your loop paid for turns after the budget was spent: stop at the top of the loop once the whole spend, "
            "the sum of every turn's price, has reached the budget"), lambda c, e, y: _stopped(e)
         and y["turns"] > e["turns"]),
    Hint(N_("the model had answered, and your loop did not call that completed: a reply without tool calls ends the "
            "run whatever it cost; the budget is checked before the next call"),
         lambda c, e, y: e["status"] == "completed" and y["status"] != "completed"),
    Hint(N_("your loop stopped before running the calls of the turn it had paid for: the chapter checks the budget at "
            "the top of the loop, so a paid turn's calls run first (harness_lib leaves them owed, on purpose: "
            "notebook 04)"), lambda c, e, y: _stopped(e) and y["turns"] == e["turns"]
         and y["tool_runs"] < e["tool_runs"]),
    Hint(N_("the status of a run stopped by its budget is the chapter's word for it, `budget_exceeded`"),
         lambda c, e, y: _stopped(e) and y["turns"] == e["turns"] and y["status"] != e["status"]),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'last_turn_usd', 'completed', 'budget_exceeded',
            'prompt_tokens', 'completion_tokens')
CHECK = Check("03-budget", ("budgeted_loop", "cost"), CASES,
              (STATUS, TURNS, TOOL_RUNS, IN, OUT, COST, LAST, BILLED, PRICES, TRANSCRIPT), yours, expected, HINTS)


async def check(budgeted_loop, cost, url: str | None = None):
    """Run your ``budgeted_loop`` and ``cost`` on every case of section 3 beside ``harness_lib``: a table, ``N of M
    cases pass``, and for the first case that fails, what differs and what to change. (The runs go through a
    provider of the check's own, which bills each request: ``url`` is not used.)"""
    return await CHECK.run(url, budgeted_loop=budgeted_loop, cost=cost)
