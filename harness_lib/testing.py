"""A fake model to script a run without HTTP, and the crash seam the crash tests kill a process at.

``FakeModel`` plays, turn after turn, the assistant messages you give it, and bills each with the scripted
provider's token count (so costs are the chapter's). Hand it to the loop as its client:

    >>> import asyncio
    >>> from harness_lib.loop import Options, run
    >>> from harness_lib.state import new_run
    >>> from harness_lib.testing import FakeModel, asks, call
    >>> from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace
    >>> model = FakeModel([asks(call("c1", "read_file", {"path": "errors.log"})),
    ...                    {"role": "assistant", "content": "It is errors.log."}])
    >>> tools = Workspace.copy_of().tools()
    >>> state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), tools, Options(client=model)))
    >>> state.status, state.turns, state.output, len(model.bills)
    ('completed', 2, 'It is errors.log.', 2)

``call`` builds one tool call as a model sends it, ``asks`` an assistant message that makes calls; after
the script runs out the model answers "done". ``before(turn)`` is called before each reply: a test can
press Stop there (cancel the task), or count.

``crash_seam(kind)`` is called by the core at each event boundary (``trace.Trace.emit`` with the event's
type once its line is written, ``state.save`` with ``"save"`` once the file is in place). It does nothing
unless the environment variable ``HARNESS_CRASH_AT`` is set, to ``"tool_start:2"`` say: then the process
SIGKILLs itself right after its 2nd ``tool_start`` line. The crash campaign (``tests/reliability_campaign.py``)
sets it on the child processes it drives; it lives here, not in the core, because it is a test seam.

This module imports nothing at load time but the standard library (the core imports it for the seam).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Callable

__all__ = ["FakeModel", "asks", "call", "crash_seam"]

Message = dict[str, Any]


class FakeModel:
    """Plays ``replies[i]`` as the assistant's message at turn ``i`` (the turn is read from the
    conversation: the number of assistant messages in it, as the scripted provider does), then answers
    "done". ``bills`` holds the usage of every reply it handed out, counted the scripted provider's way.
    Extra request fields (the strict budget's ``max_tokens``) are accepted and not honoured."""

    def __init__(self, replies: list[Message], before: Callable[[int], None] | None = None) -> None:
        self.replies = replies
        self.before = before
        self.bills: list[dict[str, int]] = []

    async def complete(self, model: str, messages: list[Message], tools: list[Message] | None = None,
                       **extra: Any) -> dict[str, Any]:
        import asyncio  # (these two here, not at the top: the core imports this module for its crash seam)

        from .tokens import usage

        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if self.before is not None:
            self.before(turn)
            await asyncio.sleep(0)  # let a cancellation requested in before() land, as at a real await
        message = self.replies[turn] if turn < len(self.replies) else {"role": "assistant", "content": "done"}
        bill = usage(messages, tools, message)
        self.bills.append(bill)
        return {"choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": bill}


def call(call_id: str, name: str, arguments: str | dict[str, Any] = "{}") -> Message:
    """One tool call as a model sends it. ``arguments``: a dict (sent as compact JSON) or the raw text,
    which need not be JSON at all."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def asks(*calls: Message) -> Message:
    """An assistant message that calls tools (``content`` null, as the chapter's provider sends it)."""
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


_seen: dict[str, int] = {}


def crash_seam(kind: str) -> None:
    """SIGKILL this process at the ``n``-th ``kind`` boundary if ``HARNESS_CRASH_AT="kind:n"``; else nothing."""
    spec = os.environ.get("HARNESS_CRASH_AT")
    if not spec:
        return
    target, _, n = spec.rpartition(":")
    if not n.isdigit():
        raise ValueError(f"HARNESS_CRASH_AT={spec!r}: expected KIND:N, such as tool_start:2 or save:3")
    if target == kind:
        _seen[kind] = _seen.get(kind, 0) + 1
        if _seen[kind] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
