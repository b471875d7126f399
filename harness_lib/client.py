"""The model call: one POST to ``{base_url}/chat/completions`` with httpx.

Pointing the harness at another endpoint is one argument (``base_url``), as in the chapter's
``LLM_BASE_URL`` seam. Failures are sorted into the two kinds that need opposite responses:

* passing ones (429, 500, 502, 503, 504, a refused or dropped connection, a timeout) are retried, a
  bounded number of times, after ``Retry-After`` (seconds or an HTTP date) or a jittered exponential
  backoff; each retry is reported to ``on_retry``. A refused request is never billed, so a retry cannot
  pay twice (a timed-out one may have been: the provider may finish work the client stopped waiting for);
* final ones (400, 401, 403, 404, a body that is not a chat completion) raise ``ModelError`` at once:
  the run ends as failed with the status and message, and is not resumable.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import random
import ssl
import time
from typing import Callable

import httpx

JSON = {"Content-Type": "application/json"}
RETRYABLE = {408, 409, 429, 500, 502, 503, 504}


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA bundle, ~10 ms a run otherwise."""
    return httpx.create_ssl_context()


class ModelError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _error_text(response: httpx.Response) -> str:
    try:
        return response.json()["error"]["message"]
    except Exception:
        return response.text[:200]


def check_completion(data) -> dict:
    """``data`` if it is a chat completion the loop can use, else ``ModelError`` saying what it got."""
    def fine() -> bool:
        message, usage = data["choices"][0]["message"], data["usage"]
        tokens = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
        return (isinstance(message, dict) and message.get("role") == "assistant"
                and isinstance(message.get("content"), (str, type(None)))
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in tokens)
                and isinstance(message.get("tool_calls") or [], list)
                and all(isinstance(c["id"], str) and isinstance(c["function"]["name"], str)
                        and isinstance(c["function"]["arguments"], str) for c in message.get("tool_calls") or []))
    try:
        if fine():
            return data
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    raise ModelError(f"the provider's reply is not a chat completion: {json.dumps(data, default=str)[:200]}")


class ModelClient:
    def __init__(self, base_url: str, api_key: str = "not-needed", *, timeout: float = 60.0,
                 max_retries: int = 4, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 on_retry: Callable[[dict], None] | None = None, http: httpx.AsyncClient | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.timeout_s = timeout
        self.on_retry = on_retry
        self._owned = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers={"Authorization": f"Bearer {api_key}"}, trust_env=False, verify=_tls())

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

    async def complete(self, model: str, messages: list[dict], tools: list[dict] | None = None,
                       **extra) -> dict:
        body = {"model": model, "messages": messages, **extra}
        if tools:
            body.update(tools=tools, tool_choice="auto")  # OpenAI's default, said aloud: some servers need it
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()  # once, not per retry
        for attempt in range(self.max_retries + 1):
            response, problem = None, None
            try:
                response = await self.http.post(self.url, content=payload, headers=JSON)
            except httpx.TransportError as e:  # refused, dropped, timed out: worth another try
                problem = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                if isinstance(e, httpx.TimeoutException):
                    problem += f" (no answer within the {self.timeout_s:g} s timeout)"
            except httpx.RequestError as e:  # anything else httpx refuses to do will not improve
                raise ModelError(f"the request failed: {type(e).__name__}: {e}") from None
            if response is not None:
                if response.status_code == 200:
                    try:
                        return response.json()  # the loop checks its shape (check_completion)
                    except ValueError:
                        raise ModelError(f"the provider answered 200 with a body that is not JSON: "
                                         f"{response.text[:120]!r}") from None
                if response.status_code not in RETRYABLE:
                    raise ModelError(f"HTTP {response.status_code}: {_error_text(response)}", response.status_code)
                problem = f"HTTP {response.status_code}: {_error_text(response)}"
            if attempt == self.max_retries:
                raise ModelError(f"gave up after {attempt + 1} attempts; last: {problem}",
                                 response.status_code if response is not None else None)
            delay = self._delay(attempt, response)
            if self.on_retry:
                self.on_retry({"attempt": attempt + 1, "problem": problem, "delay_s": round(delay, 3)})
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def aclose(self):
        if self._owned:
            await self.http.aclose()
