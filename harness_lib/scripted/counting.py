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

# The convention lives in the core (harness_lib/tokens.py), which also uses it to estimate a reply that
# comes without usage; the provider takes it from there, so the two can never drift apart.
from ..tokens import completion_tokens, prompt_tokens, usage

__all__ = ["prompt_tokens", "completion_tokens", "usage"]
