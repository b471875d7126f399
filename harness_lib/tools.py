"""What a tool is, and what it gets when it runs.

A tool is a name, a description, a JSON schema and an async function. Three flags tell the loop how to
treat it: ``read_only`` (safe to answer a repeat from a cache, and to run again after a crash),
``needs_approval`` (stop the run and ask a person first) and ``idempotent`` (a write that honours
``ctx.idempotency_key``, so running it again after a crash cannot do it twice; a write without the flag
that a crash interrupted is never run again: the model is told its outcome is unknown).

Cancellation needs no flag: a tool is a coroutine, and cancelling the run's task raises
``CancelledError`` at the tool's next ``await``, so a tool that awaits (``asyncio.sleep``, an ``httpx``
call) hears Stop at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable


@dataclass
class ToolContext:
    run_id: str
    call_id: str
    progress: Callable[[str], None] = lambda label: None
    report_subrun: Callable[[dict], None] = lambda summary: None
    trace: Any = None  # the parent's Trace, so that a subagent's lines land in the same file
    instance: str = ""  # the run instance (``RunState.instance``): a reused run id is another instance

    @property
    def idempotency_key(self) -> str:
        """One key per logical operation: this run instance, this call. A retry of the same call reuses
        it; a new run that reuses the run id (and so, perhaps, call ids) gets new keys."""
        return f"{self.run_id}:{self.instance}:{self.call_id}" if self.instance else f"{self.run_id}:{self.call_id}"


@dataclass
class Tool:
    name: str
    description: str
    run: Callable[[dict, ToolContext], Awaitable[Any]]
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    needs_approval: bool = False
    idempotent: bool = False

    def schema(self) -> dict:
        """The tool as the chat completions API expects it in ``tools``."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def string_params(*names: str) -> dict:
    """A schema of required string parameters, the only kind the chapter's tools take."""
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}
