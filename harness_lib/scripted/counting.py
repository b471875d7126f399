"""How the scripted provider counts tokens: the convention that reproduces the chapter's figures.

* prompt tokens = tokens of the compact JSON (``JSON.stringify``: no spaces) of the request's
  ``messages`` array, plus the tokens of the compact JSON of its ``tools`` array, counted separately
  (0 when the request has no tools);
* completion tokens = tokens of the reply's ``content`` ("" when null) plus the tokens of the compact
  JSON of its ``tool_calls`` (``[]`` when there are none, which is one token).

There are no per-message overheads: the JSON is the message. So a ``list_files`` call with id ``c1``
costs 23 completion tokens, ``read_file {"path":"errors.log"}`` 29, and the plan's final sentence 18.
Because BPE merges across the closing ``"}]`` of the array, the first turn appended to a conversation
costs one token more than later identical turns (runaway prompts: 204, 269, 333, 397, ...).
"""

from __future__ import annotations

from ..tokens import compact, count


def prompt_tokens(messages: list, tools: list | None = None) -> int:
    return count(compact(messages)) + (count(compact(tools)) if tools else 0)


def completion_tokens(message: dict) -> int:
    return count(message.get("content") or "") + count(compact(message.get("tool_calls") or []))


def usage(messages: list, tools: list | None, reply: dict) -> dict:
    p, c = prompt_tokens(messages, tools), completion_tokens(reply)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
