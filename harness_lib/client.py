"""The model call: one POST to ``{base_url}/chat/completions`` with httpx.

Pointing the harness at another endpoint is one argument (``base_url``), as in the chapter's
``LLM_BASE_URL`` seam. Every attempt has one deadline (``timeout``) covering the whole response, headers
and body, so a server that sends headers and then nothing, or trickles a byte at a time, is cut off on
time; and a body larger than ``max_response_bytes`` is refused, never buffered without end.

Failures are sorted into the two kinds that need opposite responses:

* passing ones (429, 502, 503, 504, a refused or dropped connection, a missed deadline, a stream that
  ends without its ``finish_reason`` and ``[DONE]``) are retried, a bounded number of times, after
  ``Retry-After`` (seconds or an HTTP date) or a jittered exponential backoff; each retry is reported to
  ``on_retry``. A server still loading its model (503 "Loading model", llama.cpp's answer while it reads
  the weights) is waited for, visibly, up to ``load_wait_s`` seconds, without using up the retries. A
  refused request is never billed, so a retry cannot pay twice (a timed-out or cut one may have been: the
  provider may finish work the client stopped waiting for);
* final ones (400, 401, 403, 404, 500 and every other status, a body that is not JSON or too large)
  raise ``ModelError`` at once: the run ends as failed with the status and message, and is not resumable.
  A 500 is final because a retry does not fix it: llama.cpp answers ``tools param requires --jinja flag``
  with a 500 on every attempt.

With ``stream=True`` the request asks for server-sent events with ``stream_options: {"include_usage":
true}``; text deltas go to ``on_text`` as they arrive, and the chunks are put back together into one chat
completion, so the rest of the harness sees the same shape either way. A stream is an answer only when it
ends as the protocol says, with a ``finish_reason`` and then ``data: [DONE]``; one that stops before is a
dropped reply (retried, as a dropped connection is), never the text it got to send.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import functools
import json
import random
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import httpx

from . import numbers

JSON = {"Content-Type": "application/json"}
RETRYABLE = {429, 502, 503, 504}
MAX_RESPONSE_BYTES = 16 * 2 ** 20
NO_ENDPOINT = "give a base_url, or a client of your own: client=, any ChatModel (harness_lib.client)"
LOADING = re.compile(r"loading model|model is loading|is currently loading|still loading", re.I)
SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair, alone: no UTF-8 writer accepts one


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many there were: the one place a
    server's text (a reply, a streamed delta, an error message) is made writable."""
    return SURROGATE.subn("\ufffd", text)


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA bundle, ~10 ms a run otherwise."""
    return httpx.create_ssl_context()


def tls_for(url: str) -> ssl.SSLContext | bool:
    """What httpx checks a connection to ``url`` with: plain HTTP never does TLS (no redirect is followed),
    so only https loads the CA bundle (about 45 ms of CPU: every command-line run against a server asks it
    for its models first)."""
    return _tls() if url.lower().startswith("https:") else False


class ModelError(RuntimeError):
    """A model call that failed. ``unreachable``: a passing failure that outlasted its retries (or the wait
    for a loading model), so nothing is wrong with the run, only with the way to the provider."""

    def __init__(self, message: str, status: int | None = None, *, unreachable: bool = False):
        super().__init__(replace_surrogates(message)[0])
        self.status = status
        self.unreachable = unreachable


class _TooLarge(Exception):
    pass


class _CutShort(Exception):
    """A stream that ended without the end the protocol gives it: a dropped reply, not an answer."""


def _decode(raw: bytes, what: str):
    try:
        return json.loads(raw)
    except RecursionError:
        raise ModelError(f"{what} is JSON nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError):
        text = raw[:120].decode("utf-8", "replace")
        raise ModelError(f"the provider answered 200 with {what} that is not JSON: {text!r}") from None


def _error_text(raw: bytes) -> str:
    """The message of an error body in any of the servers' shapes, or the start of the body."""
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        text = err.get("message") if isinstance(err, dict) else err
        if not isinstance(text, str):
            raise ValueError
    except (ValueError, RecursionError, AttributeError, UnicodeDecodeError):
        text = raw[:200].decode("utf-8", "replace")
    return replace_surrogates(text)[0][:300]


class ChatModel(Protocol):
    """What the loop talks to: anything with this one method, returning a chat completion (a dict in the
    chat completions shape; ``reply.read_reply`` checks it). ``ModelClient`` is the harness's own, over
    HTTP; a reader's (a recorded reply, a wrapper that times each call, another SDK) plugs in as
    ``Options(client=...)``, and the loop then never closes it: its owner does."""

    async def complete(self, model: str, messages: list[dict], tools: list[dict] | None = None,
                       **extra: Any) -> dict: ...


@dataclass(frozen=True)
class Transport:
    """How to reach the model, apart from what the loop does with it: the settings that build a
    ``ModelClient`` (``connect``). Checked when made, so a bad timeout never starts a run."""
    base_url: str | None = None
    api_key: str = "not-needed"
    timeout_s: float = 60.0       # per attempt of the model call
    max_retries: int = 4          # of a passing failure (429, 502-504, a dropped connection, a timeout)
    backoff_s: float = 0.25       # the first retry's delay, doubled each time, jittered, at most 8 s
    load_wait_s: float = 120.0    # how long to wait for a server still loading its model (503)
    max_response_bytes: int = MAX_RESPONSE_BYTES  # a bigger answer is refused, never buffered without end
    stream: bool = False          # ask for server-sent events; text deltas go to on_text as they arrive
    on_text: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        numbers.check("timeout_s", self.timeout_s, above_zero=True)
        numbers.check("backoff_s", self.backoff_s)
        numbers.check("load_wait_s", self.load_wait_s)
        numbers.check("max_response_bytes", self.max_response_bytes, above_zero=True)
        numbers.check_whole("max_retries", self.max_retries)

    def connect(self, on_retry: Callable[[dict], object] | None = None) -> "ModelClient":
        """A client with these settings (close it with ``aclose``). ``on_retry`` hears each retry."""
        if not self.base_url:
            raise ValueError(NO_ENDPOINT)
        return ModelClient(self.base_url, self.api_key, timeout=self.timeout_s, max_retries=self.max_retries,
                           backoff_s=self.backoff_s, load_wait_s=self.load_wait_s,
                           max_response_bytes=self.max_response_bytes, stream=self.stream,
                           on_text=self.on_text, on_retry=on_retry)


class ModelClient:
    """The harness's ``ChatModel``: one POST per attempt with httpx, retried as the module says."""

    def __init__(self, base_url: str, api_key: str = Transport.api_key, *,
                 timeout: float = Transport.timeout_s, max_retries: int = Transport.max_retries,
                 backoff_s: float = Transport.backoff_s, max_backoff_s: float = 8.0,
                 on_retry: Callable[[dict], object] | None = None, http: httpx.AsyncClient | None = None,
                 max_response_bytes: int = Transport.max_response_bytes, load_wait_s: float = Transport.load_wait_s,
                 stream: bool = Transport.stream, on_text: Callable[[str], None] | None = Transport.on_text):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.timeout_s, self.max_response_bytes, self.load_wait_s = timeout, max_response_bytes, load_wait_s
        self.stream, self.on_text = stream, on_text
        self.on_retry = on_retry
        self._owned = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers={"Authorization": f"Bearer {api_key}"}, trust_env=False,
            verify=tls_for(self.url))

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None and (ra := response.headers.get("Retry-After")):
            try:
                return min(max(float(ra), 0.0), self.max_backoff_s)
            except ValueError:
                try:  # the other form: an HTTP date
                    return min(max(email.utils.parsedate_to_datetime(ra).timestamp() - time.time(), 0.0),
                               self.max_backoff_s)
                except (TypeError, ValueError, OverflowError):
                    pass
        base = min(self.backoff_s * 2 ** attempt, self.max_backoff_s)
        return base / 2 + random.random() * base / 2  # "equal jitter": never zero, never in lockstep

    async def _body(self, r: httpx.Response, limit: int, cut: bool = False) -> bytes:
        parts, size = [], 0
        async for piece in r.aiter_bytes():
            size += len(piece)
            if size > limit:
                if cut:  # an error body: its start says enough
                    parts.append(piece[:max(0, limit - size + len(piece))])
                    break
                raise _TooLarge
            parts.append(piece)
        return b"".join(parts)

    async def _attempt(self, payload: bytes) -> tuple[httpx.Response, Any]:
        """One request, read to its end: (response, the decoded completion or the raw error body)."""
        async with self.http.stream("POST", self.url, content=payload, headers=JSON) as r:
            if r.status_code != 200:
                return r, await self._body(r, 64 * 1024, cut=True)
            if self.stream and r.headers.get("content-type", "").startswith("text/event-stream"):
                return r, await self._events(r)
            return r, _decode(await self._body(r, self.max_response_bytes), "a body")

    async def _events(self, r: httpx.Response) -> dict:
        """Read server-sent events and put the chunks back together into one chat completion."""
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        finish, usage, size, buffer, done, events = None, None, 0, b"", False, 0
        self.shown = False  # whether this attempt put text on the screen (a retry then says so)
        async for piece in r.aiter_bytes():
            size += len(piece)
            if size > self.max_response_bytes:
                raise _TooLarge
            buffer += piece
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # comments, event names, keep-alives
                data = line[5:].strip()
                events += 1
                if data == b"[DONE]":
                    done = True
                    break
                chunk = _decode(data, "a stream chunk")
                try:
                    if isinstance(chunk.get("error"), (dict, str)):
                        raise ModelError(f"the stream reported an error: {_error_text(data)}")
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        if choice.get("index", 0) != 0:
                            continue
                        delta = choice.get("delta") or {}
                        if isinstance(delta.get("content"), str) and delta["content"]:
                            text.append(delta["content"])
                            if self.on_text:
                                self.on_text(replace_surrogates(delta["content"])[0])
                                self.shown = True
                        for tc in delta.get("tool_calls") or []:
                            i = tc.get("index")
                            if i is None:  # no index: a new id starts a new call, else it continues the last
                                i = len(calls) if tc.get("id") or not calls else len(calls) - 1
                            while len(calls) <= i:
                                calls.append({"id": None, "type": "function",
                                              "function": {"name": "", "arguments": ""}})
                            fn = tc.get("function") or {}
                            calls[i]["id"] = tc.get("id") or calls[i]["id"]
                            calls[i]["function"]["name"] += fn.get("name") or ""
                            args = fn.get("arguments") or ""
                            calls[i]["function"]["arguments"] += args if isinstance(args, str) else json.dumps(args)
                        finish = choice.get("finish_reason") or finish
                except (AttributeError, TypeError) as e:
                    raise ModelError(f"a stream chunk is not a chat completion chunk ({e}): "
                                     f"{data[:120].decode('utf-8', 'replace')!r}") from None
            if done:
                break
        if not events:  # 200, then nothing: what a server that cannot stream this request may send
            raise ModelError("the server answered the streamed request with an empty stream (HTTP 200, no "
                             "event): it cannot stream this reply (llama-cpp-python's chatml-function-calling "
                             "cannot when tools are offered); run without --stream")
        if not done or finish is None:  # the protocol ends a reply with a finish_reason, then [DONE]
            missing = " and ".join(w for w, gone in (("a finish_reason", finish is None), ("[DONE]", not done)) if gone)
            raise _CutShort(f"the stream ended without {missing}")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            message["tool_calls"] = calls
        reply = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        if usage is not None:
            reply["usage"] = usage
        return reply

    async def complete(self, model: str, messages: list[dict], tools: list[dict] | None = None,
                       **extra) -> dict:
        body = {"model": model, "messages": messages, **extra}
        if tools:
            body.update(tools=tools, tool_choice="auto")  # OpenAI's default, said aloud: some servers need it
        if self.stream:
            body.update(stream=True, stream_options={"include_usage": True})
        try:  # once, not per retry
            payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate (from a terminal, a file): escaped, still valid JSON
            payload = json.dumps(body, separators=(",", ":")).encode()
        attempt, loading_since = 0, None
        while True:
            response, problem = None, None
            try:
                response, result = await asyncio.wait_for(self._attempt(payload), self.timeout_s)
            except asyncio.TimeoutError:
                problem = f"timeout: no complete answer within the {self.timeout_s:g} s deadline of an attempt"
            except _TooLarge:
                raise ModelError(f"the provider's answer is larger than {self.max_response_bytes:,} bytes; "
                                 f"refused") from None
            except _CutShort as e:  # cut short: what was streamed is not an answer; ask again, as for a drop
                problem = f"{e}: cut short"
            except httpx.TransportError as e:  # refused, dropped: worth another try
                problem = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                if isinstance(e, httpx.TimeoutException):
                    problem += f" (no answer within the {self.timeout_s:g} s timeout)"
            except httpx.RequestError as e:  # anything else httpx refuses to do will not improve
                raise ModelError(f"the request failed: {type(e).__name__}: {e}") from None
            if response is not None:
                if response.status_code == 200:
                    return result  # the loop reads it (reply.read_reply)
                status, said = response.status_code, _error_text(result)
                problem = f"HTTP {status}: {said}"
                if status == 503 and LOADING.search(said):  # a bounded, visible wait, retries untouched
                    loading_since = loading_since or time.monotonic()
                    waited = time.monotonic() - loading_since
                    if waited >= self.load_wait_s:
                        raise ModelError(f"the server was still loading its model after {waited:.0f} s "
                                         f"(load_wait_s={self.load_wait_s:g}); last: {problem}", status,
                                         unreachable=True)
                    delay = min(self._delay(0, response) if response.headers.get("Retry-After") else 1.0,
                                self.load_wait_s - waited)
                    if self.on_retry:
                        self.on_retry({"attempt": attempt + 1, "problem": problem, "delayS": round(delay, 3),
                                       "loading": True, "waitedS": round(waited, 1)})
                    await asyncio.sleep(delay)
                    continue
                if status not in RETRYABLE:
                    hint = "; check the model name (--model or LLM_MODEL)" if status == 404 and \
                        "model" in said.lower() else ""
                    raise ModelError(problem + hint, status)
            if attempt == self.max_retries:
                raise ModelError(f"gave up after {attempt + 1} attempts; last: {problem}",
                                 response.status_code if response is not None else None, unreachable=True)
            delay = self._delay(attempt, response)
            if self.on_text and getattr(self, "shown", False):  # the text so far will come again, whole
                self.on_text(f"\n[the answer stopped short ({problem}); asking again]\n")
                self.shown = False
            if self.on_retry:
                self.on_retry({"attempt": attempt + 1, "problem": problem, "delayS": round(delay, 3)})
            attempt += 1
            await asyncio.sleep(delay)

    def without_text(self) -> "ModelClient":
        """This client (its connections, deadline and retries) without ``on_text``: what a subagent asks
        through, so that its answer, a tool result of its parent's, is never shown as the run's own. Closing
        it leaves the connections to this one."""
        quiet = copy.copy(self)
        quiet.on_text, quiet._owned = None, False
        return quiet

    async def aclose(self):
        if self._owned:
            await self.http.aclose()
