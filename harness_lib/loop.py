"""The loop, and its five exits.

    state = new_run(SYSTEM_PROMPT, TASK, model="plan")
    state = await run(state, workspace.tools(), Options(base_url=url, max_turns=20))
    state.status  # completed | failed | max_turns_exceeded | budget_exceeded | interrupted

Each iteration does three things, in this order:

1. check the stop conditions (``opts.limits``: turn cap, budget, a reader's own), before anything is paid for;
2. drain the pending tool calls (the ones the transcript asked for and has no answer to), so that a
   resumed or approved run continues exactly where it stopped and never pays for a turn twice, and go
   back to 1;
3. with nothing owed, ask the model, add the turn's cost as soon as the reply is back, and return if it
   asked for nothing. (With ``strict_budget``, the call is priced before it is made: ``budget.py``.)

Each pending call is read once (``Call``) and meets the chapter's checks in the chapter's order: rejected
by a person (the slot says so, in words), approval needed (the run stops and asks), a repeat the dedupe
cache may answer (``dedupe.py``), a write begun by a process that died (its outcome is unknown), and only
then the tool, whose failure the tool-error policy turns into the slot's words (``policy.py``).

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
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import budget, dedupe, policy
from .client import ChatModel, ModelError
from .dedupe import signature
from .options import Options
from .policy import describe, error_text
from .reply import ask, record
from .state import RunState, Status, pending, save
from .stops import Stop, first_stop
from .tools import Tool, ToolContext, is_permanent
from .trace import HookError, Trace

__all__ = ["run", "Call", "UNKNOWN_OUTCOME"]  # what is defined here (Options is options.py's, the rest their modules')

UNKNOWN_OUTCOME = ("Error: this call was started before the harness stopped, and whether it took effect is "
                   "unknown. It was not run again; check its effect before asking for it again.")


@dataclass(frozen=True)
class Call:
    """One pending tool call, read once: its arguments, or why they cannot be read."""
    id: str
    name: str
    raw_args: str
    args: dict | None
    bad_args: str | None
    signature: str

    @classmethod
    def parse(cls, call: dict) -> "Call":
        fn = call["function"]
        args: Any = None
        problem = None
        try:
            args = json.loads(fn["arguments"] or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as e:
            args, problem = None, str(e)
        return cls(call["id"], fn["name"], fn["arguments"], args, problem, signature(call))


class Books:
    """What the loop writes down, and where: the transcript slot of each call, the tool log, the trace,
    and the state file (``checkpoint``, with ``state_dir``)."""

    def __init__(self, state: RunState, opts: Options, trace: Trace):
        self.state, self.opts, self.trace = state, opts, trace

    def checkpoint(self, sync: bool = True) -> None:
        if self.opts.state_dir is not None:
            save(self.state, self.opts.state_dir, sync=sync)

    def stop(self, status: Status, interruption: dict | None = None, error: str | None = None) -> RunState:
        state = self.state
        state.status, state.interruption, state.error = status, interruption, error or state.error
        extra: dict[str, Any] = {"error": state.error} if state.error else {}
        if interruption and interruption.get("type") == "stop_condition":  # which of the reader's, and why
            extra.update(condition=interruption.get("name"), why=interruption.get("reason"))
        try:
            self.trace.emit(state.run_id, "run_stopped", status=status,
                            reason=(interruption or {}).get("type", status), turns=state.turns,
                            costUsd=state.total_cost_usd if self.opts.pricing.known else None, **extra)
        except HookError as e:  # a reader's view failed at the last line: the run's end stands, saying so
            state.error = state.error or str(e)
        self.checkpoint()
        return state

    def answer(self, call: Call, content: str, ok: bool, ms: float = 0, **flags: bool) -> None:
        state = self.state
        state.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
        state.tool_log.append({"callId": call.id, "toolName": call.name, "args": call.raw_args,
                               "signature": call.signature, "ok": ok, "ms": round(ms, 1), **flags})
        self.trace.emit(state.run_id, "tool_result", toolName=call.name, ms=round(ms), ok=ok, callId=call.id,
                        **flags)
        self.checkpoint(sync=False)  # a read may run again; a write's record is synced before it began

    def progress(self, tool_name: str) -> Callable[[str], None]:
        def report(label: str) -> None:
            self.trace.emit(self.state.run_id, "tool_progress", toolName=tool_name, label=label)
            if self.opts.on_progress:
                self.opts.on_progress(label)
        return report


async def run(state: RunState, tools: list[Tool], opts: Options) -> RunState:
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools]
    trace = opts.trace or Trace(timestamps=False)
    books = Books(state, opts, trace)
    own = None  # a client the loop builds it closes; a reader's belongs to the reader
    client: ChatModel
    if opts.client is not None:
        client = opts.client
    else:
        client = own = opts.transport.connect(on_retry=lambda r: trace.emit(state.run_id, "retry", **r))
    cache = dedupe.cache(state.messages, state.tool_log)  # from the transcript: it survives a resume
    state.status, state.interruption, state.error = "running", None, None

    async def execute(call: Call) -> Stop | None:
        """One pending call, through the chapter's checks in its order; a Stop ends the run."""
        tool = by_name.get(call.name)
        if call.id in state.rejected:                                  # a person said no: say so, in words
            books.answer(call, state.rejected[call.id], ok=False, rejected=True)
            return None
        if tool and call.args is not None and tool.needs_approval and call.id not in state.approved:
            trace.emit(state.run_id, "approval_required", toolName=call.name, args=call.raw_args, callId=call.id)
            return Stop("interrupted", {"type": "approval", "callId": call.id, "toolName": call.name,
                                        "args": call.args})
        if call.signature in cache and dedupe.applies(opts.dedupe, bool(tool and tool.read_only)):
            books.answer(call, cache[call.signature], ok=True, cached=True)  # the repeat, answered from cache
            return None
        rerun = call.id in state.started                               # a write begun by a process that died
        if rerun and not (tool and tool.idempotent):
            books.answer(call, UNKNOWN_OUTCOME, ok=False, unknownOutcome=True)
            return None
        return await run_tool(call, tool, rerun)

    async def run_tool(call: Call, tool: Tool | None, rerun: bool) -> Stop | None:
        flags = {"rerun": True} if rerun else {}
        if tool and call.args is not None and not tool.read_only and not rerun:
            state.started.append(call.id)
            books.checkpoint()                                         # on disk before the write begins
        trace.emit(state.run_id, "tool_start", toolName=call.name, args=call.raw_args, callId=call.id, **flags)
        started = time.perf_counter()
        try:
            if tool is None:
                raise LookupError(f"unknown tool {call.name!r}; the tools are: {', '.join(by_name)}")
            if call.args is None:
                raise ValueError(f"malformed arguments for {call.name}: {call.bad_args}")
            result = await tool.run(call.args, ToolContext(
                state.run_id, call.id, progress=books.progress(call.name), report_subrun=state.subruns.append,
                trace=trace, instance=state.instance, client=client))
            content = result if isinstance(result, str) else json.dumps(result, default=str)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as e:  # noqa: BLE001 - any tool failure (SystemExit too) is the policy's to handle
            if policy.fatal(opts.tool_errors):
                state.error = f"{call.name}: {describe(e)}"
            if is_permanent(e):
                flags["permanent"] = True                              # the tool says: no retry fixes it
            books.answer(call, error_text(opts.tool_errors, e), ok=False,
                         ms=(time.perf_counter() - started) * 1000, **flags)
            return Stop("failed", None) if policy.fatal(opts.tool_errors) else None
        books.answer(call, content, ok=True, ms=(time.perf_counter() - started) * 1000, **flags)
        cache.setdefault(call.signature, content)
        return None

    try:
        books.checkpoint()                                         # on disk before anything is paid for
        while True:
            last = state.messages[-1] if state.messages else {}
            if last.get("role") == "assistant" and not last.get("tool_calls"):
                state.output = last.get("content") or ""           # answered (before a crash, perhaps)
                return books.stop("completed")
            if (hit := first_stop(opts.limits.conditions, state)) is not None:  # 1. stop before paying
                return books.stop(hit.status, hit.interruption, hit.error)
            if calls := pending(state):                            # 2. drain what is owed,
                for call in calls:
                    if (hit := await execute(Call.parse(call))) is not None:
                        return books.stop(hit.status, hit.interruption)
                continue                                           #    then check again
            allowed = budget.allow(state, schemas, opts, trace) if opts.limits.strict_budget else None  # priced first
            if isinstance(allowed, Stop):
                return books.stop(allowed.status, allowed.interruption)
            turn = await ask(client, state, schemas, **(allowed.request() if allowed else {}))  # 3. ask,
            try:
                record(state, turn, opts.pricing, trace)           #    read the reply, and pay for it at once
                hit = budget.settle(state, turn, allowed, opts) if allowed else None
            finally:
                books.checkpoint()                                 # a paid turn is saved, even if the trace fails
            if hit:
                return books.stop(hit.status, hit.interruption, hit.error)
            if turn.problem:                                       # cut or filtered: not an answer
                state.error = turn.problem
                return books.stop("failed")
    except asyncio.CancelledError as e:
        return books.stop("interrupted", {"type": "cancelled", "reason": str(e.args[0]) if e.args else "cancelled"})
    except (policy.PolicyError, HookError) as e:  # a reader's function (tool_errors, on_event) that failed
        state.error = str(e)
        return books.stop("failed")
    except ModelError as e:
        state.error = str(e)
        if e.unreachable:  # retries ran out on a passing failure: the run is fine, resume when it is back
            return books.stop("interrupted", {"type": "cancelled", "reason": f"provider unreachable: {e}"})
        return books.stop("failed")
    except OSError as e:  # the run's own files: a full disk, a read-only folder. What was paid is saved
        state.error = f"cannot write the run's files: {describe(e)}"
        try:
            return books.stop("interrupted", {"type": "cancelled", "reason": state.error})
        except OSError:
            return state  # on disk: the last save (``running``, so resumable) with every paid turn in it
    finally:
        trace.close()  # the file, not the Trace: a later line opens it again (a kept result holds no descriptor)
        if own is not None:
            await asyncio.shield(own.aclose())
