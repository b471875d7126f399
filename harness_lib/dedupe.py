"""Repeats and the dedupe cache (the chapter's section 6).

Models repeat themselves: the same tool with the same arguments in two consecutive turns. The cache
answers the repeat with the first call's result instead of running the tool again. It saves the tool
run, not the turn (the model has been paid to ask by the time the repeat is seen), and applied to a
tool that writes it makes the second write silently not happen: so the default is ``"off"``, and the
defensible setting is ``"read-only"``, the chapter's gate. ``"all"`` is the naive cache, kept to measure.

The cache is derived from the run's transcript and tool log, never kept beside them, so it survives a
resume: a call answered before the process died is still a cached answer after.
"""

from __future__ import annotations

import json
from typing import Literal

Dedupe = Literal["off", "read-only", "all"]
DEDUPE: tuple[Dedupe, ...] = ("off", "read-only", "all")


def signature(call: dict) -> str:
    """What makes two calls 'the same call': the tool and its arguments, key order aside."""
    args = call["function"]["arguments"]
    try:
        args = json.dumps(json.loads(args), sort_keys=True)
    except (TypeError, ValueError):
        pass
    return f'{call["function"]["name"]}:{args}'


def applies(rule: str, read_only: bool) -> bool:
    """Whether the cache may answer a repeat of this tool: never under "off"; under "read-only" (the
    chapter's gate) only a tool that changes nothing; under "all" any tool, writes included."""
    return rule == "all" or (rule == "read-only" and read_only)


def cache(messages: list[dict], tool_log: list[dict]) -> dict[str, str]:
    """Signature -> the content of the first successful call with it, from the transcript."""
    contents = {m.get("tool_call_id"): m["content"] for m in messages
                if m.get("role") == "tool" and isinstance(m.get("content"), str)}
    found: dict[str, str] = {}
    for r in tool_log:
        if r.get("ok") and "signature" in r and r.get("callId") in contents:
            found.setdefault(r["signature"], contents[r["callId"]])
    return found
