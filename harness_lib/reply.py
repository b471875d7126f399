"""From a raw chat completion to the turn the loop records: the ask step's other half.

Real servers do not all answer alike. ``read_reply`` takes whatever came back and returns a ``Turn``
the loop can trust, or raises ``ReplyError`` (a ``ModelError``: the run ends ``failed``) with a message
that says what was wrong. What it does, in order:

* **shape**: one choice, an assistant message, text or null content, tool calls with a function name.
  Arguments sent as an object are written as compact JSON; lone surrogates (which no UTF-8 writer accepts)
  become U+FFFD, counted in the turn (``repaired``); a reply nested too deeply or holding numbers too
  large for a float fails with a message, never a traceback.
* **ids**: every tool call gets an id unique in the run. A call without an id, with an empty one, or
  with one already used in this run (several servers number ``call_0``, ``call_1`` afresh each turn;
  older llama.cpp sends ``""``) is given the harness's own, ``h<turn>_<n>``, on receipt, and the turn says
  so (``renamed: [{"from", "to"}]``). Pending calls, approvals, dedupe and the idempotency journal are
  keyed by these ids, so they must be unique.
* **a tool call leaked as text** (``<tool_call>{"name": ...}</tool_call>``, what Qwen writes when the
  server's tool parser is off, and the Llama / Mistral markers) is not an answer: the run fails with a
  message naming the server setting that fixes it. We do not run it: that would mean executing what a
  regular expression guessed out of prose, with an id we invented, for a server that will keep
  misframing every later turn; the server flag fixes all of them at once.
* **usage** missing or partial (or null) is counted locally with o200k_base, the convention in
  ``tokens.py``, and the turn is flagged ``estimated``; a budget then acts on the estimate. Usage that is
  present but impossible (negative, not a whole number, above 10^12) fails the run.
* **finish_reason** ``length`` (cut at the server's limit) or ``content_filter`` (filtered) is recorded
  and ends the run ``failed`` with that reason: the text is not a complete answer, and asking again would
  pay for the same cut.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from . import numbers, tokens
from .client import SURROGATE, ModelError, replace_surrogates
from .pricing import add

MAX_TOKENS_PLAUSIBLE = 10 ** 12  # more than any context window; a bigger count is a broken reply

# Each leak: what it looks like in the text, and the servers' settings that parse it into tool_calls.
FIX = ("start the server with its tool-call parser on: vLLM `--enable-auto-tool-choice --tool-call-parser "
       "hermes` (for Qwen2.5), llama.cpp `llama-server --jinja`; with Ollama and LM Studio use a model whose "
       "chat template supports tools (e.g. qwen2.5)")
LEAKS = [
    ("<tool_call>", re.compile(r"<tool_call>\s*(\{.*?\})\s*(</tool_call>|$)", re.S)),  # Hermes / Qwen
    ("<|python_tag|>", re.compile(r"<\|python_tag\|>\s*(\{.*\})", re.S)),                # Llama 3.x
    ("[TOOL_CALLS]", re.compile(r"\[TOOL_CALLS\]\s*(\[.*\]|\{.*\})", re.S)),           # Mistral
    ("<function=", re.compile(r"<function=([\w.-]+)>", re.S)),                          # Llama 3.1 custom
]


class ReplyError(ModelError):
    """A reply the harness cannot use; the message says what is wrong with it."""


@dataclass
class Turn:
    message: dict                  # the assistant message as it enters the transcript
    prompt_tokens: int
    completion_tokens: int
    finish: str | None
    estimated: bool = False        # usage (some or all of it) counted here, not by the server
    renamed: list[dict] = field(default_factory=list)   # [{"from": the server's id, "to": ours}]
    repaired: int = 0              # lone surrogates replaced by U+FFFD
    problem: str | None = None     # set when the turn must end the run (cut or filtered)

    def trace_fields(self) -> dict:
        extra: dict[str, Any] = {}
        if self.estimated:
            extra["estimated"] = True
        if self.renamed:
            extra["renamedCalls"] = self.renamed
        if self.repaired:
            extra["repairedChars"] = self.repaired
        return extra


def read_reply(data, sent: list[dict], tools: list[dict] | None, used_ids, turn: int) -> Turn:
    """``data``: the decoded completion; ``sent``: the messages the request carried; ``used_ids``: every
    tool-call id already in the run; ``turn``: this turn's number (for the harness's ids)."""
    try:
        return _read(data, sent, tools, set(used_ids), turn)
    except ReplyError:
        raise
    except RecursionError:
        raise ReplyError("the provider's reply is nested too deeply to read") from None
    except (OverflowError, MemoryError) as e:
        raise ReplyError(f"the provider's reply holds a value too large to use ({type(e).__name__})") from None


def _excerpt(data) -> str:
    try:
        return json.dumps(data, default=str)[:200]
    except (ValueError, TypeError, RecursionError, OverflowError):
        return type(data).__name__


def _fail(data, what: str) -> NoReturn:
    raise ReplyError(f"the provider's reply is not a chat completion: {what}; got {_excerpt(data)}")


def _read(data, sent, tools, used: set, turn: int) -> Turn:
    if not isinstance(data, dict):
        _fail(data, "not a JSON object")
    if isinstance(data.get("error"), dict):  # some servers answer 200 with an error object
        raise ReplyError(f"the provider answered with an error: {_excerpt(data['error'])}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        _fail(data, "no choices")
    choice = choices[0]
    raw = choice.get("message")
    if not isinstance(raw, dict):
        _fail(data, "choices[0].message is not an object")
    if raw.get("role", "assistant") != "assistant":
        _fail(data, f"the message's role is {raw.get('role')!r}, not 'assistant'")
    content = raw.get("content")
    if not isinstance(content, (str, type(None))):
        _fail(data, "the message's content is neither text nor null")
    repaired = 0
    if content is not None:
        content, repaired = replace_surrogates(content)
    raw_calls = raw.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        _fail(data, "tool_calls is not a list")

    calls, renamed = [], []
    for n, c in enumerate(raw_calls or [], start=1):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            _fail(data, f"tool call {n} has no function name")
        args = fn.get("arguments")
        if args is None:
            args = ""
        elif isinstance(args, (dict, list)):
            args = tokens.compact(args)  # some servers send the object itself
        elif not isinstance(args, str):
            _fail(data, f"tool call {n}'s arguments are neither text nor an object")
        args, fixed = replace_surrogates(args)
        try:  # the loop parses arguments later; a nesting it cannot parse must fail here, with a message
            json.loads(args)
        except RecursionError:
            raise ReplyError(f"tool call {n}'s arguments are JSON nested too deeply to read") from None
        except ValueError:
            pass  # malformed arguments are the model's mistake: the tool's error tells it so
        name, fixed_name = replace_surrogates(fn["name"])
        repaired += fixed + fixed_name
        call_id = c.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in used or SURROGATE.search(call_id):
            new = f"h{turn}_{n}"
            while new in used:
                new += "_"
            renamed.append({"from": call_id if isinstance(call_id, str) and not SURROGATE.search(call_id)
                            else (None if call_id is None else _excerpt(call_id)), "to": new})
            call_id = new
        used.add(call_id)
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})

    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None

    if not calls and content:
        for marker, pattern in LEAKS:
            if marker in content and pattern.search(content):
                raise ReplyError(f"the model wrote a tool call as text ({marker}...) instead of calling the tool: "
                                 f"the server did not parse it. To fix it, {FIX}")
        if _bare_json_call(content, tools):
            raise ReplyError(f"the model wrote a tool call as JSON text instead of calling the tool: the server "
                             f"did not parse it. To fix it, {FIX}")

    prompt, completion, estimated = _usage(data, message, sent, tools)
    problem = None
    if finish == "length":
        problem = (f"the reply was cut at the server's length limit (finish_reason \"length\", "
                   f"{completion} completion tokens): not a complete answer; raise the server's context or "
                   f"max_tokens limit and run again (the cut text is the transcript's last message)")
    elif finish == "content_filter":
        problem = ("the reply was withheld or cut by the server's content filter (finish_reason "
                   "\"content_filter\"): not an answer")
    return Turn(message, prompt, completion, finish, estimated, renamed, repaired, problem)


def _bare_json_call(content: str, tools: list[dict] | None) -> bool:
    """The whole text is one JSON object naming an offered tool, with its arguments: a call, unparsed."""
    text = content.strip()
    if not (text.startswith("{") and text.endswith("}")) or not tools:
        return False
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    names = {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}
    return isinstance(obj, dict) and obj.get("name") in names and ("arguments" in obj or "parameters" in obj)


def _usage(data: dict, message: dict, sent: list[dict], tools) -> tuple[int, int, bool]:
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        _fail(data, "usage is not an object")
    usage = usage or {}
    counts, estimated = [], False
    for key, local in (("prompt_tokens", lambda: tokens.prompt_tokens(sent, tools)),
                       ("completion_tokens", lambda: tokens.completion_tokens(message))):
        n = usage.get(key)
        if n is None:
            counts.append(local())
            estimated = True
            continue
        if isinstance(n, float) and n.is_integer() and abs(n) <= MAX_TOKENS_PLAUSIBLE:
            n = int(n)
        if not numbers.whole(n, most=MAX_TOKENS_PLAUSIBLE):
            _fail(data, f"usage.{key} is {_excerpt(n)[:40]}, not a token count between 0 and 10^12")
        counts.append(n)
    return counts[0], counts[1], estimated


# -- the ask step of the loop --------------------------------------------------------------------------------
def used_ids(messages: list[dict]) -> set:
    return {c.get("id") for m in messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or [])
            if isinstance(c, dict)}


async def ask(client, state, schemas: list[dict], **extra) -> Turn:
    """Call the model with the run's transcript and read its reply. Whatever goes wrong while reading it
    becomes a ``ModelError`` with a message (the run ends ``failed``), never an exception that escapes.
    ``extra``: more fields for the request (the strict budget's ``max_tokens``)."""
    try:
        data = await client.complete(state.model, state.messages, schemas, **extra)
        return read_reply(data, state.messages, schemas, used_ids(state.messages), state.turns + 1)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - a reply we failed to foresee must still end the run cleanly
        raise ReplyError(f"the model call or its reply could not be handled: {type(e).__name__}: {e}") from None


def record(state, turn: Turn, pricing, trace) -> None:
    """Add the turn to the run: its cost (as soon as the reply is back), its tokens, its message, its
    trace line. With no price known the cost stays 0 and the trace says ``costUsd: null``."""
    turn_cost = pricing.cost(turn.prompt_tokens, turn.completion_tokens)
    state.turns += 1
    state.own_cost_usd = add(state.own_cost_usd, turn_cost)  # exact, never below (pricing.py)
    state.prompt_tokens += turn.prompt_tokens
    state.completion_tokens += turn.completion_tokens
    state.per_turn.append({"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
                           "cost_usd": turn_cost, **({"estimated": True} if turn.estimated else {})})
    state.messages.append(turn.message)
    trace.emit(state.run_id, "turn", turn=state.turns, prompt_tokens=turn.prompt_tokens,
               completion_tokens=turn.completion_tokens, total_tokens=turn.prompt_tokens + turn.completion_tokens,
               costUsd=state.total_cost_usd if pricing.known else None, finish=turn.finish,
               **turn.trace_fields())
