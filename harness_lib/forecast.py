"""Price a cap before raising it: from the first turns of a run, what caps of 8, 20, 50, 100 will cost.

    from harness_lib.forecast import forecast
    for f in forecast("trace.jsonl", observed=3):       # or a list of trace events, a RunState, its per_turn
        print(f.cap, f.input_tokens, f"${f.cost_usd:.6f}")

The model, and what it assumes. Every turn resends the whole transcript, so a turn's prompt is the
previous turn's prompt plus what that turn added (the reply, the tool results). The forecast assumes
that addition stays what it was in the last observed turn: prompt(t) = prompt(k) + (t - k) * growth,
growth = prompt(k) - prompt(k-1), and that every later reply is as long as the observed ones on average.
Summed, the input is quadratic in the cap. It also assumes the run does not end before the cap: a cap
is priced as the worst case it allows, which is what raising it risks.

Where that holds (a loop repeating the same call, like the chapter's runaway) the forecast is exact to
the token from three turns: the first addition is a token dearer than the later ones (a BPE merge at the
array's end), so two observed turns overestimate slightly and three see the steady growth. Where it
does not hold (a model that reads a large file at turn 5, replies whose length varies, a run that
answers at turn 4) the forecast is the price of "more of the same", and the error says how far the run
was from that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import numbers
from .config import PRICE
from .pricing import CHAPTER_PRICES, UNPRICED, Pricing
from .state import RunState
from .trace import read

CHAPTER_CAPS = (8, 20, 50, 100)
MAX_CAP = 1_000_000


class ForecastError(ValueError):
    """A source a forecast cannot be made from: too few turns, several runs mixed, a malformed turn."""


@dataclass(frozen=True)
class CapForecast:
    cap: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None   # None: no price known (a run against an endpoint without one), never a made-up cost
    observed_turns: int      # the turns the forecast was made from
    extrapolated: bool       # False when the cap is within the observed turns (then it is a sum, not a guess)


def turns_of(source, run_id: str | None = None) -> list[dict]:
    """Per-turn usage, ``[{prompt_tokens, completion_tokens}, ...]``, from a trace file path, a list of
    trace events, a ``RunState`` or a RunState's ``per_turn`` list. A trace may hold several runs (a
    subagent writes into its parent's file): name the one you mean with ``run_id``."""
    if isinstance(source, RunState):
        rows = source.per_turn
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ForecastError(f"{path}: no such trace file")
        try:
            events = read(path)  # a torn last line is skipped; a bad line elsewhere is an error
        except (ValueError, OSError) as e:
            raise ForecastError(str(e)) from None
        rows = _turn_events(events, run_id, where=str(path))
    elif isinstance(source, (list, tuple)):
        if source and all(isinstance(e, dict) and "type" in e for e in source):
            rows = _turn_events(list(source), run_id, where="the trace")
        else:
            rows = list(source)
    else:
        raise ForecastError(f"forecast() reads a trace file, a list of trace events, a RunState or its per_turn "
                            f"list, not a {type(source).__name__}")
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise ForecastError(f"turn {i} is a {type(row).__name__}, not an object with prompt_tokens")
        for key in ("prompt_tokens", "completion_tokens"):
            value = row.get(key)
            if not numbers.whole(value):
                raise ForecastError(f"turn {i}: {key} is {value!r}, not a whole number of tokens")
    return [{"prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"]} for r in rows]


def _turn_events(events: list[dict], run_id: str | None, where: str) -> list[dict]:
    """The turn lines of one run, by turn number. Lines of other kinds, or of other programs (no
    ``runId``), are not turns and are passed over. A turn number seen twice (a process paid for a turn,
    died before saving it, and its successor paid again) keeps the later line: the one the transcript kept."""
    turns = [e for e in events if e.get("type") == "turn" and "runId" in e]
    runs = sorted({str(e["runId"]) for e in turns})
    if run_id is None:
        if len(runs) > 1:
            raise ForecastError(f"{where} holds turns of {len(runs)} runs ({', '.join(runs)}): name one with run_id=")
        run_id = runs[0] if runs else None
    elif run_id not in runs:
        raise ForecastError(f"{where} has no turns of run {run_id!r} (runs: {', '.join(runs) or 'none'})")
    by_number: dict[int, dict] = {}
    for e in turns:
        if str(e["runId"]) != run_id:
            continue
        n = e.get("turn")
        if not numbers.whole(n, least=1):
            raise ForecastError(f"{where}: a turn line of run {run_id} has turn {n!r}: {json.dumps(e)[:120]}")
        by_number[n] = e
    seen = sorted(by_number)
    if seen != list(range(1, len(seen) + 1)):
        missing = sorted(set(range(1, (seen[-1] if seen else 0) + 1)) - set(seen))
        raise ForecastError(f"{where}: run {run_id} is missing turn(s) {missing[:10]}: the trace is incomplete")
    return [by_number[n] for n in seen]


def forecast(source, observed: int | None = 3, caps=CHAPTER_CAPS, *, pricing: Pricing = CHAPTER_PRICES,
             run_id: str | None = None) -> list[CapForecast]:
    """What each cap in ``caps`` would cost, from the first ``observed`` turns of ``source`` (all of its
    turns when ``observed`` is None). Needs at least two turns: one turn shows no growth."""
    if observed is not None and not numbers.whole(observed, least=2):
        raise ForecastError(f"observed must be a whole number of at least 2 (one turn shows no growth), "
                            f"got {observed!r}")
    caps = list(caps) if not isinstance(caps, (str, bytes)) and hasattr(caps, "__iter__") else [caps]
    if not caps:
        raise ForecastError("give at least one cap to price")
    for cap in caps:
        if not numbers.whole(cap, least=1, most=MAX_CAP):
            raise ForecastError(f"a cap must be a whole number from 1 to {MAX_CAP:,}, got {cap!r}")
    rows = turns_of(source, run_id)
    k = len(rows) if observed is None else observed
    if len(rows) < max(k, 2):
        raise ForecastError(f"the source has {len(rows)} turn(s); a forecast from {max(k, 2)} was asked for")
    seen = rows[:k]
    growth = seen[-1]["prompt_tokens"] - seen[-2]["prompt_tokens"]
    reply = sum(r["completion_tokens"] for r in seen) / k

    def prompt(t: int) -> int:        # turn t (1-based); never below zero, whatever the growth's sign
        return seen[t - 1]["prompt_tokens"] if t <= k else max(0, seen[-1]["prompt_tokens"] + (t - k) * growth)

    def completion(t: int) -> float:
        return seen[t - 1]["completion_tokens"] if t <= k else reply

    totals, inp, outp, cost = {}, 0, 0.0, 0.0
    for t in range(1, max(caps) + 1):  # one pass up to the largest cap
        inp, outp, cost = inp + prompt(t), outp + completion(t), cost + pricing.cost(prompt(t), completion(t))
        totals[t] = (inp, outp, cost)
    return [CapForecast(cap, int(totals[cap][0]), round(totals[cap][1]),
                        round(totals[cap][2], 6) if pricing.known else None, k, cap > k) for cap in caps]


def _traced_unpriced(path: str, run_id: str | None) -> bool:
    """The trace's turns say ``costUsd: null``: the run had no price (``reply.record``)."""
    try:
        events = read(Path(path))
    except (ValueError, OSError):
        return False  # forecast() says what is wrong with the file
    return any(e.get("type") == "turn" and "costUsd" in e and e["costUsd"] is None
               and (run_id is None or str(e.get("runId")) == run_id) for e in events)


def _usd(text: str) -> float:
    """A price per million tokens, through the run options' price check (``config.PRICE``)."""
    import argparse
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    try:
        return PRICE.check(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


DESCRIPTION = "Price turn caps from the first turns of a run's trace."


def arguments(parser) -> None:
    """The forecast's arguments, one home for both spellings: ``python -m harness_lib forecast`` (a command of
    the one command line, ``cli.py``) and ``python -m harness_lib.forecast`` (``main``)."""
    parser.add_argument("trace", help="a trace file (JSONL) the harness wrote")
    parser.add_argument("--observed", type=int, default=3, help="forecast from the first N turns (default 3)")
    parser.add_argument("--caps", default=",".join(map(str, CHAPTER_CAPS)), help="comma-separated caps")
    parser.add_argument("--run-id", help="the run to read, when the trace holds several")
    parser.add_argument("--price-in", type=_usd, metavar="USD", help="dollars per million input tokens (default: "
                        "the chapter's $2, or unknown when the trace's run had no price)")
    parser.add_argument("--price-out", type=_usd, metavar="USD", help="dollars per million output tokens")


def command(args, usage_error) -> int:
    """Print the forecast ``args`` ask for; ``usage_error(message)``: the parser's (exits 2, with the usage)."""
    import sys
    if (args.price_in is None) != (args.price_out is None):
        usage_error("give both --price-in and --price-out (dollars per million tokens), or neither")
    if args.price_in is not None:
        pricing = Pricing.per_million(args.price_in, args.price_out)
    else:
        pricing = UNPRICED if _traced_unpriced(args.trace, args.run_id) else CHAPTER_PRICES
    try:
        caps = [int(c) for c in args.caps.split(",") if c.strip()]
    except ValueError:
        usage_error(f"--caps must be whole numbers separated by commas, got {args.caps!r}")
    try:
        rows = forecast(args.trace, observed=args.observed, caps=caps, run_id=args.run_id, pricing=pricing)
    except ForecastError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"forecast from the first {rows[0].observed_turns} turns (constant growth; the run assumed not to end); "
          f"{pricing.describe()}:")
    for f in rows:
        cost = "unknown" if f.cost_usd is None else f"${f.cost_usd:.6f}"
        print(f"  cap {f.cap:>7,}  in={f.input_tokens:>12,}  out={f.output_tokens:>9,}  cost={cost}"
              + ("" if f.extrapolated else "  (observed)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness_lib.forecast TRACE [--observed 3] [--caps 8,20,50,100] [--run-id ID]``, the same as
    ``python -m harness_lib forecast TRACE ...``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m harness_lib.forecast", description=DESCRIPTION)
    arguments(parser)
    return command(parser.parse_args(argv), parser.error)


if __name__ == "__main__":
    raise SystemExit(main())
