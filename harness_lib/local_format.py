"""The local model's chat format: what the chapter's endpoint gives a model, as text the model reads.

llama-cpp-python turns a chat request into one prompt with a "chat format". The one it ships for tool calls
with any model (``chatml-function-calling``) drops every tool result (a ``tool`` message becomes an empty
header), HTML-escapes earlier calls' arguments (``{ &#34;path&#34;: ...``), shows no tool description and
cannot stream a reply when tools are offered. This one renders, in ChatML (SmolLM2's own turns):

* the system prompt, then each tool: its name, its description and its parameters' JSON schema;
* every user message; every assistant message with its text and each call's arguments as sent (nothing
  escaped: ``functions.read_file:`` then ``{"path": "notes.txt"}``);
* every tool result in the turn after its call: ``functions.list_files returned: ["access.log", ...]``.

What is text stays text. Given its prompt as text, llama-cpp-python tokenizes it with special tokens parsed: a
file holding ``<|endoftext|>`` or ``<repo_name>`` reached SmolLM2 as its control tokens 0 and 3, in the middle of a
tool's result. So the model is given token ids (``tokens``): only the format's own structure, ChatML's two markers
(the ``Control`` pieces of ``render_parts``), becomes control tokens, and the text of every message (the system
prompt, a task, an answer, a call's arguments, a tool's result or description) is tokenized as text (``plain``),
whatever the vocabulary's special tokens: they are not parsed in it, and it is cut inside the text of any
user-defined token (Qwen's ``<tool_call>``), which llama.cpp finds in text even so. A prompt without such text
is read as before, token for token. ChatML's markers are also broken in a message's text (``<|im_start|>``
becomes ``<|im_start |>``), so that in the prompt shown to a reader (the prompt log, ``--show-prompt``, notebook
12), which is the text the model read, every ``<|im_start|>`` and ``<|im_end|>`` is the format's and anything
else, ``<|endoftext|>`` included, is text.

The reply is generated in steps, each one constrained by a grammar: ``message:`` or ``functions.<name>:`` first,
then the answer's text, or each call's arguments as JSON (its schema's grammar, at most ``MAX_ARGUMENT_TOKENS``:
a rambling model is cut, ``finish_reason`` ``"length"``, long before any timeout), then another call or the end
of the turn. With ``stream=True`` the same steps come out as chunks as they are generated, tool calls included,
with a last chunk holding the usage (OpenAI's ``include_usage`` shape).

A reply depends on the requests the server answered before it, not only on its own: llama-cpp-python reuses
the longest common start of the last prompt it read, so the rest is read in other batch shapes, the logits move
in their last digits, and greedy decoding can tip. Measured here, the same turn-2 request gave
``read_file("/var/log/access.log")`` after one history and ``read_file("/Users/1234567890.app/...")`` after
another. Two runs agree when each starts its own server and sends the same requests in the same order (as
``LocalModel`` and notebook 12 do). Reading every prompt afresh instead made them agree whatever came before, and
made the six tasks take 907 s instead of 322 s on this loaded two-core machine: not worth it.

``render(messages, tools)`` is plain Python (tests and the notebook use it without llama-cpp-python);
``HarnessChat`` is the handler the server calls (``local.serve`` registers it as ``FORMAT``), and it writes
each prompt it renders to ``prompt_log`` (one JSON line per request) so that a reader sees what the model saw.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from . import numbers

FORMAT = "harness-chatml"        # the name it is registered under (the server's --chat_format)
MAX_ARGUMENT_TOKENS = 64         # one tool call's arguments (the workspace's are a path or a pattern)
MAX_TEXT_TOKENS = 256            # an answer, when the request sets no max_tokens
MAX_CALLS = 1                    # tool calls in one reply (HarnessChat's max_calls: why one, there)
SAMPLING = ("top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty", "frequency_penalty")


class Control(str):
    """A piece of the prompt that is the format's own structure, read as the control token it names; every
    other piece, the text of a message included, is read as text."""


START, END = Control("<|im_start|>"), Control("<|im_end|>")
INSTRUCTIONS = ("To answer in words, write message: on a line of its own, then the answer.\n"
                "To call functions, write for each call functions.<name>: on a line of its own, then its "
                "arguments as one JSON object on the next line. What a function returned comes back in the "
                "next turn as functions.<name> returned: ...")


def inert(text: str) -> str:
    """``text`` with ChatML's markers broken, so that the prompt shown to a reader has them only where the format
    put them (the model reads a message's text as text either way: ``plain``)."""
    return text.replace(START, "<|im_start |>").replace(END, "<|im_end |>")


def _text(content) -> str:
    """A message's content as text: a string, a list of OpenAI content parts, or nothing."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def tool_lines(tools: list[dict]) -> str:
    lines = []
    for t in tools:
        fn = t.get("function") or {}
        description = " ".join(_text(fn.get("description")).split())
        lines.append(f"functions.{fn.get('name')}: {description}\n"
                     f"  arguments (JSON schema): {_compact(fn.get('parameters') or {})}")
    return "\n".join(lines)


def _turn(role: str, body: str) -> list[str]:
    return [START, f"{role}\n{body}", END, "\n"]


def render(messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt the model reads for ``messages`` (OpenAI chat messages) and ``tools`` (OpenAI tool
    schemas), ending with the open assistant turn it continues: the text a reader is shown."""
    return "".join(render_parts(messages, tools))


def render_parts(messages: list[dict], tools: list[dict] | None = None) -> list[str]:
    """The same prompt in pieces: the format's structure as ``Control`` pieces, everything else as text."""
    tools = tools or []
    out: list[str] = []
    names: dict[Any, Any] = {}
    system = "\n\n".join(inert(_text(m.get("content"))) for m in messages if m.get("role") == "system")
    if tools:
        system = (system + "\n\n" if system else "") + \
            f"You can call these functions:\n{inert(tool_lines(tools))}\n\n{INSTRUCTIONS}"
    if system:
        out += _turn("system", system)
    results: list[str] = []  # the tool results after one assistant turn: one turn of their own
    for m in messages:
        role = m.get("role")
        if role == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id")) or "tool"
            results.append(f"functions.{inert(str(name))} returned: {inert(_text(m.get('content')))}")
            continue
        if results:
            out += _turn("user", "\n".join(results))
            results = []
        if role == "user":
            out += _turn("user", inert(_text(m.get("content"))))
        elif role == "assistant":
            body, content = [], _text(m.get("content"))
            if content:
                body.append(f"message:\n{inert(content)}" if tools else inert(content))
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                names[c.get("id")] = fn.get("name")
                args = fn.get("arguments")
                args = args if isinstance(args, str) else _compact(args if args is not None else {})
                body.append(f"functions.{inert(str(fn.get('name')))}:\n{inert(args)}")
            out += _turn("assistant", "\n".join(body))
    if results:
        out += _turn("user", "\n".join(results))
    return out + [START, "assistant\n"]


# -- what the model reads: token ids ---------------------------------------------------------------------------
class Vocabulary(NamedTuple):
    """What ``tokens`` needs to know of a model's vocabulary (``HarnessChat.vocabulary`` reads it)."""
    bos: list[int]             # the ids a prompt starts with: the BOS token, for a model that asks for one
    found_in_text: list[str]   # tokens llama.cpp finds in text even with special=False: its user-defined ones


def tokens(llama, pieces: list[str], vocabulary: Vocabulary) -> list[int]:
    """The ids the model reads for ``pieces`` (``render_parts``, then what a reply wrote so far): a ``Control``
    piece as the control token it names, any other piece as text (``plain``)."""
    ids = list(vocabulary.bos)
    for piece in pieces:
        ids += llama.tokenize(piece.encode("utf-8"), add_bos=False, special=True) if isinstance(piece, Control) \
            else plain(llama, piece, vocabulary.found_in_text)
    return ids


def plain(llama, text: str, found_in_text: list[str]) -> list[int]:
    """``text`` as text: special tokens are not parsed (no control token comes out of it), and the text is cut
    inside each user-defined token's text (Qwen's ``<tool_call>``), which llama.cpp would find even so (one of a
    single character cannot be cut). Text without one is tokenized in one piece, as before."""
    cuts = {i + 1 for t in found_in_text if len(t) > 1 for i in _positions(text, t)}
    bounds = [0, *sorted(cuts), len(text)]
    return [i for a, b in zip(bounds, bounds[1:]) if b > a
            for i in llama.tokenize(text[a:b].encode("utf-8"), add_bos=False, special=False)]


def _positions(text: str, sub: str) -> Iterator[int]:
    """Where ``sub`` starts in ``text``, overlaps included."""
    at = text.find(sub)
    while at >= 0:
        yield at
        at = text.find(sub, at + 1)


# -- generating a reply, in steps ------------------------------------------------------------------------------
class HarnessChat:
    """llama-cpp-python's chat handler for ``FORMAT`` (the server calls it with its ``Llama`` and the
    request's fields). ``prompt_log``: a file that gets one JSON line ``{"prompt": ...}`` per request.

    ``max_calls``: tool calls in one reply, 1 by default (what OpenAI's ``parallel_tool_calls: false`` asks
    for). Given four, SmolLM2-135M wrote in its first turn a list_files and then, before any result could
    reach it, a read, a delete and a scan of paths it made up (measured here, five of the six tasks); one a
    reply makes each call follow the result of the one before."""

    def __init__(self, prompt_log: str | Path | None = None, max_calls: int = MAX_CALLS):
        numbers.check_whole("max_calls", max_calls, least=1)
        self.prompt_log = Path(prompt_log) if prompt_log else None
        self.max_calls = max_calls

    # The grammars and the vocabulary need llama-cpp-python; a test replaces these three methods.
    def choice_grammar(self, names: list[str], first: bool):
        """The first step: ``message:`` or a call; after a call: another call, or nothing (the turn ends)."""
        from llama_cpp.llama_grammar import LlamaGrammar
        calls = " | ".join(json.dumps(f"functions.{n}:") for n in names)
        root = f'root ::= "message:" | {calls}' if first else f"root ::= ({calls})?"
        return LlamaGrammar.from_string(root + "\n", verbose=False)

    def arguments_grammar(self, schema: dict):
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar
        try:
            return LlamaGrammar.from_json_schema(json.dumps(schema or {"type": "object"}), verbose=False)
        except Exception:  # noqa: BLE001 - a schema its converter cannot take: any JSON then
            return LlamaGrammar.from_string(JSON_GBNF, verbose=False)

    def vocabulary(self, llama) -> Vocabulary:
        """The model's BOS (when it asks for one) and the texts of its user-defined tokens: read at each request
        (15 to 20 ms for SmolLM2's 49,152 tokens, measured here), so that a server that swaps its model is read
        anew."""
        from llama_cpp import llama_cpp as ll
        vocab = ll.llama_model_get_vocab(llama.model)
        found = [ll.llama_vocab_get_text(vocab, i).decode("utf-8", "replace")
                 for i in range(ll.llama_vocab_n_tokens(vocab))
                 if ll.llama_vocab_get_attr(vocab, i) & ll.LLAMA_TOKEN_ATTR_USER_DEFINED]
        bos = llama.token_bos()
        return Vocabulary([bos] if ll.llama_vocab_get_add_bos(vocab) and bos >= 0 else [], found)

    def log(self, prompt: str) -> None:
        if self.prompt_log is not None:
            with open(self.prompt_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"prompt": prompt}, ensure_ascii=False) + "\n")

    def __call__(self, *, llama, messages, tools=None, tool_choice=None, stream=False, max_tokens=None,
                 temperature=0.0, seed=None, model=None, **request):
        tools = [t for t in tools or [] if isinstance(t, dict) and (t.get("function") or {}).get("name")]
        if tool_choice == "none":
            tools = []
        parts = render_parts(messages, tools)
        self.log("".join(parts))
        sampling = {k: request[k] for k in SAMPLING if request.get(k) is not None}
        sampling["temperature"] = temperature if temperature is not None else 0.0
        if seed is not None:
            sampling["seed"] = seed
        steps = _Steps(self, llama, parts, tools, max_tokens, sampling)
        events = steps.events()
        meta = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": model or FORMAT}
        return _chunks(events, steps, meta) if stream else _completion(events, steps, meta)


class _Steps:
    """One reply: the step that chooses (``message:`` or a call), then the text or each call's arguments. Each
    step's prompt is the request's (``parts``) and, as text, what the reply wrote before it (``written``), given
    to the model as token ids (``tokens``)."""

    def __init__(self, chat: HarnessChat, llama, parts: list[str], tools: list[dict], max_tokens, sampling: dict):
        self.chat, self.llama, self.parts, self.tools, self.sampling = chat, llama, parts, tools, sampling
        self.vocabulary = chat.vocabulary(llama)
        self.left = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        self.prompt_tokens = len(tokens(llama, parts, self.vocabulary))
        self.completion_tokens = 0

    def _generate(self, written: str, limit: int, grammar=None, stop=None) -> Iterator[str | dict]:
        """Pieces of text, then ``{"finish": ...}``: ``"length"`` when ``limit`` (or the request's
        max_tokens) cut it."""
        limit = min(limit, self.left) if self.left is not None else limit
        if limit <= 0:
            yield {"finish": "length"}
            return
        got, finish = [], "stop"
        prompt = tokens(self.llama, [*self.parts, written], self.vocabulary)
        for chunk in self.llama.create_completion(prompt=prompt, max_tokens=limit, grammar=grammar,
                                                  stop=stop or [END], stream=True, **self.sampling):
            choice = chunk["choices"][0]
            if choice.get("text"):
                got.append(choice["text"])
                yield choice["text"]
            finish = choice.get("finish_reason") or finish
        used = len(self.llama.tokenize("".join(got).encode("utf-8"), add_bos=False, special=True))
        self.completion_tokens += used
        if self.left is not None:
            self.left -= used
        yield {"finish": finish}

    def _choose(self, written: str, first: bool) -> tuple[str, str | None]:
        """What the model chose ("message", "end" or a tool's name) and, when the request's max_tokens ran
        out before it chose, ``"length"``."""
        names = [t["function"]["name"] for t in self.tools]
        got, finish = "", None
        for piece in self._generate(written, 32, self.chat.choice_grammar(names, first), stop=[":"]):
            if isinstance(piece, dict):
                finish = piece["finish"]
            else:
                got += piece
        got = got.strip().rstrip(":")
        if got.startswith("functions.") and got[len("functions."):] in names:
            return got[len("functions."):], None
        if got == "message":
            return "message", None
        return "end", ("length" if finish == "length" and self.left is not None and self.left <= 0 else None)

    def events(self) -> Iterator[tuple]:
        """("text", piece) | ("call", index, id, name) | ("args", index, piece) | ("finish", reason)."""
        if not self.tools:
            yield from self._text("")
            return
        written = ""
        choice, cut = self._choose(written, first=True)
        if cut:
            yield ("finish", cut)
            return
        if choice in ("message", "end"):
            yield from self._text("message:\n")
            return
        for index in range(self.chat.max_calls):
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            yield ("call", index, call_id, choice)
            written += f"functions.{choice}:\n"
            schema = next(t["function"].get("parameters") for t in self.tools if t["function"]["name"] == choice)
            args = ""
            for piece in self._generate(written, MAX_ARGUMENT_TOKENS, self.chat.arguments_grammar(schema)):
                if isinstance(piece, dict):
                    if piece["finish"] == "length":
                        yield ("finish", "length")
                        return
                    break
                args += piece
                yield ("args", index, piece)
            written += args + "\n"
            if index + 1 == self.chat.max_calls:
                break
            choice, cut = self._choose(written, first=False)
            if cut or choice in ("message", "end"):
                break
        yield ("finish", "tool_calls")

    def _text(self, written: str) -> Iterator[tuple]:
        finish = "stop"
        for piece in self._generate(written, MAX_TEXT_TOKENS):
            if isinstance(piece, dict):
                finish = piece["finish"]
            else:
                yield ("text", piece)
        yield ("finish", finish)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def _completion(events, steps: _Steps, meta: dict) -> dict:
    text, calls, finish = [], [], None
    for e in events:
        if e[0] == "text":
            text.append(e[1])
        elif e[0] == "call":
            calls.append({"id": e[2], "type": "function", "function": {"name": e[3], "arguments": ""}})
        elif e[0] == "args":
            calls[e[1]]["function"]["arguments"] += e[2]
        else:
            finish = e[1]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return {**meta, "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": steps.usage()}


def _chunks(events, steps: _Steps, meta: dict) -> Iterator[dict]:
    def chunk(delta: dict, finish=None) -> dict:
        return {**meta, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""})
    for e in events:
        if e[0] == "text":
            yield chunk({"content": e[1]})
        elif e[0] == "call":
            yield chunk({"tool_calls": [{"index": e[1], "id": e[2], "type": "function",
                                         "function": {"name": e[3], "arguments": ""}}]})
        elif e[0] == "args":
            yield chunk({"tool_calls": [{"index": e[1], "function": {"arguments": e[2]}}]})
        else:
            yield chunk({}, e[1])
    yield {**meta, "object": "chat.completion.chunk", "choices": [], "usage": steps.usage()}
