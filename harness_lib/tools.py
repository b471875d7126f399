"""What a tool is, and what it gets when it runs.

A tool is a name, a description, a JSON schema and an async function. Three flags tell the loop how to
treat it: ``read_only`` (safe to answer a repeat from a cache, and to run again after a crash),
``needs_approval`` (stop the run and ask a person first) and ``idempotent`` (a write that honours
``ctx.idempotency_key``, so running it again after a crash cannot do it twice; a write without the flag
that a crash interrupted is never run again: the model is told its outcome is unknown).

An error no message to the model can fix (a read the process may not perform, a quota that is gone)
is the tool's to mark: raise ``PermanentToolError``, or mark an exception of any type with
``permanent(e)`` (``permanent_errors`` does it for a tool you cannot edit). The loop records the mark
on the result (``permanent: true`` in the tool log and the trace) and changes nothing else by default;
the stop condition ``stops.permanent_error()`` is what ends such a run, as ``failed``, with the reason.

Cancellation needs no flag: a tool is a coroutine, and cancelling the run's task raises
``CancelledError`` at the tool's next ``await``, so a tool that awaits (``asyncio.sleep``, an ``httpx``
call) hears Stop at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable


@dataclass
class ToolContext:
    run_id: str
    call_id: str
    progress: Callable[[str], None] = lambda label: None
    report_subrun: Callable[[dict], None] = lambda summary: None
    trace: Any = None  # the parent's Trace, so that a subagent's lines land in the same file
    instance: str = ""  # the run instance (``RunState.instance``): a reused run id is another instance
    client: Any = None  # the run's model client (a ``ChatModel``), so that a subagent's child shares it

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


class PermanentToolError(Exception):
    """A tool failure that no message to the model can fix: retrying the call will fail the same way."""


def permanent(error: BaseException) -> BaseException:
    """Mark ``error`` as permanent and return it, keeping its type: ``raise permanent(PermissionError(...))``."""
    if not isinstance(error, BaseException):
        raise TypeError(f"permanent() marks an exception, got {type(error).__name__}")
    setattr(error, "permanent", True)  # noqa: B010 - any exception type can carry the mark
    return error


def is_permanent(error: BaseException) -> bool:
    """True for a ``PermanentToolError`` or an exception marked with ``permanent``."""
    try:
        return isinstance(error, PermanentToolError) or getattr(error, "permanent", False) is True
    except Exception:  # noqa: BLE001 - an exception whose attributes raise is not marked, and must not crash the loop
        return False


def permanent_errors(tool: Tool, *types: type[BaseException]) -> Tool:
    """The same tool, with its failures of the given types marked permanent (for a tool you cannot
    edit): ``permanent_errors(read_file, PermissionError)``. Other failures pass through unmarked."""
    if not isinstance(tool, Tool):
        raise TypeError(f"permanent_errors() wraps a Tool, got {type(tool).__name__}")
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise TypeError(f"permanent_errors() needs one or more exception types, got {types!r}")
    inner = tool.run

    async def run(args: dict, ctx: ToolContext):
        try:
            return await inner(args, ctx)
        except types as e:
            raise permanent(e) from e.__cause__  # the same exception, marked: keep its own cause

    return replace(tool, run=run)


def string_params(*names: str) -> dict:
    """A schema of required string parameters, the only kind the chapter's tools take."""
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}
