"""The loop, and its five exits.

    state = new_run(SYSTEM_PROMPT, TASK, model="plan")
    state = await run(state, workspace.tools(), Options(base_url=url, max_turns=20))
    state.status  # completed | failed | max_turns_exceeded | budget_exceeded | interrupted

Each iteration does three things, in this order:

1. check the stop conditions (turn cap, budget, a reader's own), before anything is paid for;
2. drain the pending tool calls (the ones the transcript asked for and has no answer to), so that a
   resumed or approved run continues exactly where it stopped and never pays for a turn twice, and go
   back to 1;
3. with nothing owed, ask the model, add the turn's cost as soon as the reply is back, and return if it
   asked for nothing. (With ``strict_budget``, the call is priced before it is made: ``budget.py``.)

The state is saved (with ``state_dir``) when the run starts, after every turn and tool result, before a
write begins, and when it stops, so a process killed anywhere can be continued from disk: a transcript
that already ends in an answer completes without another call, and a write the dead process had begun is
run again only if the tool honours its idempotency key (``Tool.idempotent``); otherwise the model is told
its outcome is unknown. A read may simply run again.

A run ends by *returning* its state with one status, never by raising: a stop is an answer, not a
crash. Cancelling the task (the notebook's Stop button, ``task.cancel("user pressed Stop")``) reaches
the model call and the running tool as ``CancelledError`` and ends the run as interrupted. A provider
still unreachable after the client's retries, or a disk that cannot hold the run's files, stops it
the same way (``interrupted`` / ``cancelled``, with the reason): nothing is wrong with the run, and
``resume`` continues it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import budget
from .client import ModelClient, ModelError
from .pricing import CHAPTER_PRICES, Pricing
from .reply import ask, record
from .state import RunState, pending, save
from .stops import Stop, StopCondition, check_conditions, first_stop, max_budget, max_turns
from .tools import Tool, ToolContext, is_permanent
from .trace import Trace

GENERIC_ERROR = "Error: the tool call failed."
UNKNOWN_OUTCOME = ("Error: this call was started before the harness stopped, and whether it took effect is "
                   "unknown. It was not run again; check its effect before asking for it again.")
POLICIES = ("fatal", "generic", "descriptive")
DEDUPE = ("off", "read-only", "all")


def _check_number(name: str, value, above_zero: bool = False):
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    if not ok or (above_zero and value == 0):
        raise ValueError(f"{name} must be a finite number {'above' if above_zero else 'of at least'} 0, got {value!r}")


@dataclass
class Options:
    base_url: str | None = None
    api_key: str = "not-needed"
    max_turns: int | None = None
    max_budget_usd: float | None = None
    strict_budget: bool = False   # price each call before making it: the budget is never crossed (budget.py)
    strict_margin: float = 0.0    # count this much more prompt than the local tokenizer does (another server's)
    strict_max_tokens: int | None = None  # never ask for more output than the model allows (vLLM, OpenAI: 400)
    stops: list[StopCondition] = field(default_factory=list)
    tool_errors: str | Callable[[Exception], str] = "descriptive"
    dedupe: str = "off"
    trace: Trace | None = None
    state_dir: str | Path | None = None
    on_progress: Callable[[str], None] | None = None
    pricing: Pricing = CHAPTER_PRICES
    client: ModelClient | None = None
    timeout_s: float = 60.0       # per attempt of the model call
    max_retries: int = 4          # of a passing failure (429, 502-504, a dropped connection, a timeout)
    backoff_s: float = 0.25       # the first retry's delay, doubled each time, jittered, at most 8 s
    load_wait_s: float = 120.0    # how long to wait for a server still loading its model (503)
    max_response_bytes: int = 16 * 2 ** 20  # a bigger answer is refused, never buffered without end
    stream: bool = False          # ask for server-sent events; text deltas go to on_text as they arrive
    on_text: Callable[[str], None] | None = None

    def __post_init__(self):
        if not (callable(self.tool_errors) or self.tool_errors in POLICIES):
            raise ValueError(f"tool_errors must be one of {POLICIES} or a function, got {self.tool_errors!r}")
        if self.dedupe not in DEDUPE:
            raise ValueError(f"dedupe must be one of {DEDUPE}, got {self.dedupe!r}")
        if self.client is None and not self.base_url:
            raise ValueError("give a base_url (or a ModelClient)")
        _check_number("timeout_s", self.timeout_s, above_zero=True)
        _check_number("backoff_s", self.backoff_s)
        _check_number("load_wait_s", self.load_wait_s)
        _check_number("max_response_bytes", self.max_response_bytes, above_zero=True)
        if self.max_budget_usd is not None and not self.pricing.known:
            raise ValueError("a budget in dollars needs a price: give the prices per million tokens "
                             "(Pricing.per_million, --price-in / --price-out), or cap the turns instead")
        budget.check_options(self.strict_budget, self.strict_margin, self.max_budget_usd, self.pricing,
                             self.strict_max_tokens)
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be a whole number of at least 0, got {self.max_retries!r}")
        # Validate the limits now, not at the first turn: a NaN budget must never start a run.
        self.conditions = ([max_turns(self.max_turns)] if self.max_turns is not None else []) + \
                          ([max_budget(self.max_budget_usd)] if self.max_budget_usd is not None else []) + \
                          check_conditions(self.stops)


def signature(call: dict) -> str:
    """What makes two calls 'the same call': the tool and its arguments, key order aside."""
    args = call["function"]["arguments"]
    try:
        args = json.dumps(json.loads(args), sort_keys=True)
    except ValueError:
        pass
    return f'{call["function"]["name"]}:{args}'


def describe(e: BaseException) -> str:
    """An exception's message; its type's name too when the message is empty or cannot be had, or when it
    is not an ``Exception`` (``SystemExit: 3`` says more than ``3``)."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a __str__ that raises still names a failure
        text = ""
    if text and isinstance(e, Exception):
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def error_text(policy: str | Callable[[BaseException], str], e: BaseException) -> str:
    """What the transcript slot of a failed call says, by policy. (Under "fatal" the run stops too.)"""
    if policy == "generic":
        return GENERIC_ERROR  # the model learns that something failed, not what
    if policy in ("descriptive", "fatal"):
        return f"Error: {describe(e)}"
    return str(policy(e))


async def run(state: RunState, tools: list[Tool], opts: Options) -> RunState:
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools]
    trace = opts.trace or Trace(timestamps=False)
    client = opts.client or ModelClient(
        opts.base_url, opts.api_key, timeout=opts.timeout_s, max_retries=opts.max_retries,
        backoff_s=opts.backoff_s, load_wait_s=opts.load_wait_s, max_response_bytes=opts.max_response_bytes,
        stream=opts.stream, on_text=opts.on_text,
        on_retry=lambda r: trace.emit(state.run_id, "retry", **r))
    # The dedupe cache is derived from the transcript, so it survives a resume.
    contents = {m.get("tool_call_id"): m.get("content") for m in state.messages if m.get("role") == "tool"}
    cache = {r["signature"]: contents[r["callId"]] for r in state.tool_log
             if r.get("ok") and r["callId"] in contents and "signature" in r}
    state.status, state.interruption, state.error = "running", None, None

    def checkpoint(sync: bool = True):
        if opts.state_dir is not None:
            save(state, opts.state_dir, sync=sync)

    def stop(status: str, interruption: dict | None = None, error: str | None = None) -> RunState:
        state.status, state.interruption, state.error = status, interruption, error or state.error
        extra = {"error": state.error} if state.error else {}
        if (interruption or {}).get("type") == "stop_condition":  # which of the reader's conditions, and why
            extra.update(condition=interruption.get("name"), why=interruption.get("reason"))
        trace.emit(state.run_id, "run_stopped", status=status,
                   reason=(interruption or {}).get("type", status), turns=state.turns,
                   costUsd=round(state.total_cost_usd, 6) if opts.pricing.known else None, **extra)
        checkpoint()
        return state

    def answer(call: dict, content: str, ok: bool, ms: float, **flags):
        state.messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                               "content": content})
        state.tool_log.append({"callId": call["id"], "toolName": call["function"]["name"],
                               "args": call["function"]["arguments"], "signature": signature(call),
                               "ok": ok, "ms": round(ms, 1), **flags})
        trace.emit(state.run_id, "tool_result", toolName=call["function"]["name"], ms=round(ms),
                   ok=ok, callId=call["id"], **flags)
        checkpoint(sync=False)  # a read may run again; a write's record is synced before it began

    async def execute(call: dict) -> Stop | None:
        name, raw_args, call_id = call["function"]["name"], call["function"]["arguments"], call["id"]
        tool = by_name.get(name)
        if call_id in state.rejected:
            answer(call, state.rejected[call_id], ok=False, ms=0, rejected=True)
            return None
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as e:
            args, bad_args = None, e
        if tool is not None and args is not None and tool.needs_approval and call_id not in state.approved:
            trace.emit(state.run_id, "approval_required", toolName=name, args=raw_args, callId=call_id)
            return Stop("interrupted", {"type": "approval", "callId": call_id, "toolName": name, "args": args})
        sig = signature(call)
        if sig in cache and (opts.dedupe == "all" or (opts.dedupe == "read-only" and tool and tool.read_only)):
            answer(call, cache[sig], ok=True, ms=0, cached=True)
            return None
        rerun = {"rerun": True} if call_id in state.started else {}  # a write begun by a process that died
        if rerun and not (tool and tool.idempotent):
            answer(call, UNKNOWN_OUTCOME, ok=False, ms=0, unknown_outcome=True)
            return None
        if tool is not None and args is not None and not tool.read_only and not rerun:
            state.started.append(call_id)
            checkpoint()  # on disk before the write begins
        trace.emit(state.run_id, "tool_start", toolName=name, args=raw_args, callId=call_id, **rerun)
        started = time.perf_counter()
        try:
            if tool is None:
                raise LookupError(f"unknown tool {name!r}; the tools are: {', '.join(by_name)}")
            if args is None:
                raise ValueError(f"malformed arguments for {name}: {bad_args}")
            result = await tool.run(args, ToolContext(state.run_id, call_id, progress=progress(name),
                                                      report_subrun=state.subruns.append, trace=trace,
                                                      instance=state.instance))
            content = result if isinstance(result, str) else json.dumps(result, default=str)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as e:  # noqa: BLE001 - any tool failure (SystemExit too) is the policy's to handle
            if opts.tool_errors == "fatal":
                state.error = f"{name}: {describe(e)}"
            answer(call, error_text(opts.tool_errors, e), ok=False, ms=(time.perf_counter() - started) * 1000,
                   **rerun, **({"permanent": True} if is_permanent(e) else {}))  # the tool says: no retry fixes it
            return Stop("failed", None) if opts.tool_errors == "fatal" else None
        answer(call, content, ok=True, ms=(time.perf_counter() - started) * 1000, **rerun)
        cache.setdefault(sig, content)
        return None

    def progress(tool_name: str) -> Callable[[str], None]:
        def report(label: str):
            trace.emit(state.run_id, "tool_progress", toolName=tool_name, label=label)
            if opts.on_progress:
                opts.on_progress(label)
        return report

    try:
        checkpoint()                                               # on disk before anything is paid for
        while True:
            last = state.messages[-1] if state.messages else {}
            if last.get("role") == "assistant" and not last.get("tool_calls"):
                state.output = last.get("content") or ""           # answered (before a crash, perhaps)
                return stop("completed")
            if (hit := first_stop(opts.conditions, state)) is not None:  # 1. stop before paying
                return stop(hit.status, hit.interruption, hit.error)
            if calls := pending(state):                            # 2. drain what is owed,
                for call in calls:
                    if (hit := await execute(call)) is not None:
                        return stop(hit.status, hit.interruption)
                continue                                           #    then check again
            allowed = budget.allow(state, schemas, opts, trace) if opts.strict_budget else None  # priced first
            if isinstance(allowed, Stop):
                return stop(allowed.status, allowed.interruption)
            turn = await ask(client, state, schemas, **(allowed.request() if allowed else {}))  # 3. ask,
            try:
                record(state, turn, opts.pricing, trace)           #    read the reply, and pay for it at once
                hit = budget.settle(state, turn, allowed, opts) if allowed else None
            finally:
                checkpoint()                                       # a paid turn is saved, even if the trace fails
            if hit:
                return stop(hit.status, hit.interruption, hit.error)
            if turn.problem:                                       # cut or filtered: not an answer
                state.error = turn.problem
                return stop("failed")
    except asyncio.CancelledError as e:
        return stop("interrupted", {"type": "cancelled", "reason": str(e.args[0]) if e.args else "cancelled"})
    except ModelError as e:
        state.error = str(e)
        if e.unreachable:  # retries ran out on a passing failure: the run is fine, resume when it is back
            return stop("interrupted", {"type": "cancelled", "reason": f"provider unreachable: {e}"})
        return stop("failed")
    except OSError as e:  # the run's own files: a full disk, a read-only folder. What was paid is saved
        state.error = f"cannot write the run's files: {describe(e)}"
        try:
            return stop("interrupted", {"type": "cancelled", "reason": state.error})
        except OSError:
            return state  # on disk: the last save (``running``, so resumable) with every paid turn in it
    finally:
        if opts.client is None:
            await asyncio.shield(client.aclose())
