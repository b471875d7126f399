"""A fake model to script a run without HTTP.

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

``call`` and ``asks`` are the scripted provider's (``scripted/scripts.py``), one definition for both sides
of the wire. The crash tests' hook is the core's own, ``harness_lib.seam``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .scripted.scripts import asks, call
from .tokens import usage

__all__ = ["FakeModel", "asks", "call"]

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
