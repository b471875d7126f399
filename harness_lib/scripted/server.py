"""The scripted provider: an HTTP server shaped like the chat completions API.

    with ScriptedProvider() as provider:          # a background thread, an ephemeral port
        base_url = provider.base_url              # "http://127.0.0.1:PORT/v1"

The request's ``model`` names the scenario (see ``scripts.py``). Replies are pure functions of the
conversation; nothing is remembered between requests except the server's own knobs: an injected
latency, and a queue of faults that tests use to play a misbehaving provider.

Faults (``provider.inject("429", "500", ...)``), each spent on one request, in order:
``"429"`` or ``"429:SECONDS"`` (with ``Retry-After``), ``"500"``, ``"502"``, ``"503"``, ``"400"``,
``"401"``, ``"403"``, ``"garbage"`` (a 200 whose body is not JSON), ``"truncated"`` (a 200 whose JSON
stops halfway), ``"slow:SECONDS"`` (the first byte waits), ``"drop"`` (the connection closes unanswered).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import selectors
import socket
import socketserver
import sys
import threading
import time
import uuid
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..tokens import compact, encoding, warm
from .counting import completion_tokens, prompt_tokens
from .scripts import SCRIPTS, next_message

ROLES = {"system", "developer", "user", "assistant", "tool"}
ERROR_MESSAGES = {
    400: ("invalid_request_error", "bad_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "overloaded"),
}


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code = code or ERROR_MESSAGES.get(status, ("", "error"))[1]


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    kind, default_code = ERROR_MESSAGES.get(status, ("invalid_request_error", "error"))
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


def validate(body) -> tuple[str, list, list | None]:
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "You must provide a model parameter.", "model", "missing_required_parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty array.", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(400, f"messages[{i}] must be an object with a valid 'role'.", f"messages[{i}].role")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError(400, "'tools' must be an array.", "tools")
    if model not in SCRIPTS:
        raise RequestError(404, f"The model `{model}` does not exist. Scenarios: {', '.join(SCRIPTS)}.",
                           "model", "model_not_found")
    return model, messages, tools


def cut_to(message: dict, max_tokens: int) -> tuple[dict, bool]:
    """Apply ``max_tokens``. A text reply is cut to its first ``max_tokens`` tokens; a tool-call
    reply that does not fit loses its calls (half a call is not a call). Returns (message, was_cut)."""
    if max_tokens is None or completion_tokens(message) <= max_tokens:
        return message, False
    if message.get("tool_calls"):
        return {"role": "assistant", "content": ""}, True
    enc = encoding()
    budget = max(max_tokens - 1, 0)  # the empty tool_calls array, "[]", is one token
    return {"role": "assistant", "content": enc.decode(enc.encode_ordinary(message["content"])[:budget])}, True


def complete(body) -> tuple[dict, str]:
    """The whole provider, minus HTTP: request body in; out, the choice ``{message, finish_reason, usage}``
    and the scenario (the model name) that wrote it."""
    scenario, messages, tools = validate(body)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, "'max_tokens' must be a positive integer.", "max_tokens")
    message, was_cut = cut_to(next_message(scenario, messages), max_tokens)
    finish = "length" if was_cut else ("tool_calls" if message.get("tool_calls") else "stop")
    p, c = prompt_tokens(messages, tools), completion_tokens(message)
    return {"message": message, "finish_reason": finish,
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}, scenario


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def setup(self):
        super().setup()
        # Headers and body go out in two writes; without this, Nagle's algorithm and delayed ACKs
        # hold the second one back ~40 ms on every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.lock:
            self.server.connections.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.lock:
                self.server.connections.discard(self.connection)

    def log_message(self, *args):  # quiet: a notebook is no place for access logs
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if started := getattr(self, "_started", None):  # the standard header for "how long I took"
            self.send_header("Server-Timing", f"handler;dur={(time.perf_counter() - started) * 1000:.3f}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None):
        self._send(status, json.dumps(obj).encode(), headers)

    def do_GET(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # unread, it would poison the next request
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "scripted"} for name in SCRIPTS]})
        else:
            self._json(404, error_body(404, f"Unknown path {self.path}"))

    def do_POST(self):
        started = self._started = time.perf_counter()
        try:
            self._post()
        finally:
            self.server.count_busy(time.perf_counter() - started)

    def _post(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self._json(404, error_body(404, f"Unknown path {self.path}"))
        fault = self.server.next_fault()
        if fault and self._fault(fault):
            return
        if self.server.latency_ms:
            time.sleep(self.server.latency_ms / 1000)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._json(400, error_body(400, "We could not parse the JSON body of your request."))
        try:
            result, scenario = complete(body)
        except RequestError as e:
            return self._json(e.status, error_body(e.status, e.message, e.param, e.code))
        except Exception as e:  # a broken script must not take the server down
            return self._json(500, error_body(500, f"The script failed: {type(e).__name__}: {e}"))
        self.server.count_request()
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if body.get("stream"):
            return self._stream(rid, scenario, result, bool((body.get("stream_options") or {}).get("include_usage")))
        self._json(200, {
            "id": rid, "object": "chat.completion", "created": int(time.time()), "model": scenario,
            "choices": [{"index": 0, "message": result["message"], "finish_reason": result["finish_reason"],
                         "logprobs": None}],
            "usage": result["usage"],
        })

    def _fault(self, fault: str) -> bool:
        kind, _, arg = fault.partition(":")
        if kind == "slow":
            time.sleep(float(arg or 1))
            return False
        if kind == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if kind == "garbage":
            self._send(200, b"<html>502 upstream hiccup</html>", ctype="text/html")
            return True
        if kind == "truncated":
            self._send(200, b'{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"mess')
            return True
        status = int(kind)
        headers = {"Retry-After": arg or "1"} if status == 429 else None
        self._json(status, error_body(status, f"Injected fault: HTTP {status}."), headers)
        return True

    def _stream(self, rid: str, scenario: str, result: dict, include_usage: bool):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        created = int(time.time())

        def chunk(delta: dict | None, finish=None, usage=None, choices=True):
            obj = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": scenario,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
                   if choices else []}
            if include_usage:
                obj["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        message = result["message"]
        enc = encoding()
        if message.get("tool_calls"):
            chunk({"role": "assistant", "content": None})
            for i, c in enumerate(message["tool_calls"]):
                chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                       "function": {"name": c["function"]["name"], "arguments": ""}}]})
                chunk({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]})
        else:
            chunk({"role": "assistant", "content": ""})
            for token in enc.encode_ordinary(message.get("content") or ""):
                chunk({"content": enc.decode([token])})
        chunk({}, finish=result["finish_reason"])
        if include_usage:
            chunk(None, usage=result["usage"], choices=False)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's listen backlog is 5: sixteen clients connecting at once to a server whose thread is slow to
    # accept (a loaded machine) overflowed it, and one got "connection reset by peer" (once, in make test's
    # test_concurrent_requests_all_succeed_with_correct_usage). Linux caps it at net.core.somaxconn.
    request_queue_size = 128

    def __init__(self, address, latency_ms: float = 0.0):
        super().__init__(address, Handler)
        self.latency_ms = latency_ms
        self.faults: collections.deque[str] = collections.deque()
        self.lock = threading.Lock()
        self.requests = 0
        self.connections: set[socket.socket] = set()  # open client connections, closed on stop
        self.busy_s = 0.0  # time spent inside request handlers, injected latency included
        self.stopping = False
        _LIVE.add(self)

    def server_bind(self):
        # (HTTPServer's also looks up the host's full name, socket.getfqdn: a DNS query on some machines,
        # for CGI variables that nothing here uses)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def serve(self, poll_s: float):
        """socketserver's ``serve_forever``, but stopped by ``stop_serving`` at once: that one sees a request to
        stop only when its select returns, at a connection or at the next poll."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            while not self.stopping:
                if selector.select(poll_s) and not self.stopping:
                    self._handle_request_noblock()

    def stop_serving(self):
        self.stopping = True
        with contextlib.suppress(OSError):  # shut, the listening socket wakes the select now (Linux; elsewhere
            self.socket.shutdown(socket.SHUT_RDWR)  # the loop sees ``stopping`` at its next poll)

    def close_connections(self):
        """End every kept-alive connection, so that a stopped provider answers nothing more."""
        with self.lock:
            connections = list(self.connections)
        for c in connections:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def next_fault(self) -> str | None:
        with self.lock:
            return self.faults.popleft() if self.faults else None

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up is not news
            super().handle_error(request, client_address)

    def count_busy(self, seconds: float):
        with self.lock:
            self.busy_s += seconds

    def count_request(self):
        with self.lock:
            self.requests += 1


_LIVE: "weakref.WeakSet[_Server]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A server is the process's that started it. A child forked from that process (a check runs each case of a
    reader's piece in one) closes its copies of the server's sockets and never serves: a ``stop`` there, which
    shuts the listening socket down, would otherwise stop the parent's server too (a shutdown reaches every copy
    of a socket; a close, only its own). The address stays, and the parent goes on answering it."""
    for server in list(_LIVE):
        server.stopping = True
        server.lock = threading.Lock()   # a thread of the parent may have held it as the process forked
        for held in [server.socket, *server.connections]:
            with contextlib.suppress(OSError):
                held.close()
        server.connections = set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ScriptedProvider:
    """The scripted provider in a background thread. Use as a context manager; several may run at once."""

    POLL_S = 0.05  # how often the server's thread looks whether it is asked to stop, if ``stop`` cannot wake it

    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency_ms: float = 0.0):
        warm()  # ready to count before the first request, not during it
        self._server = _Server((host, port), latency_ms)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def latency_ms(self) -> float:
        return self._server.latency_ms

    @latency_ms.setter
    def latency_ms(self, value: float):
        self._server.latency_ms = value

    @property
    def requests(self) -> int:
        return self._server.requests

    @property
    def serving(self) -> bool:
        """Whether its thread is serving (started, not stopped), in this process."""
        return self._thread is not None and self._thread.is_alive()

    def name_thread(self, name: str) -> "ScriptedProvider":
        """Give its thread a name of the caller's (the checks name theirs, to tell them from a reader's)."""
        if self._thread is not None:
            self._thread.name = name
        return self

    @property
    def busy_ms(self) -> float:
        """Milliseconds spent handling requests so far (injected latency included)."""
        return self._server.busy_s * 1000

    @classmethod
    def shared(cls) -> "ScriptedProvider":
        """The provider of this process: started on first use, stopped when the interpreter exits.

        A notebook asks for it in its setup cell and never stops it, so every cell can be run again,
        alone, after Run All; the kernel's exit (a restart, a shutdown) takes the server with it."""
        with _SHARED_LOCK:
            global _SHARED
            if _SHARED is None or _SHARED._thread is None:
                _SHARED = cls().start()
                atexit.register(_SHARED.stop)
            return _SHARED

    def inject(self, *faults: str) -> "ScriptedProvider":
        with self._server.lock:
            self._server.faults.extend(faults)
        return self

    def start(self) -> "ScriptedProvider":
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve, args=(self.POLL_S,), daemon=True,
                                            name=f"scripted-provider-{self._server.server_address[1]}")
            self._thread.start()
        return self

    def stop(self):
        if self._thread is not None:
            self._server.stop_serving()
            self._thread.join()
            self._thread = None
        self._server.close_connections()
        self._server.server_close()

    def __enter__(self) -> "ScriptedProvider":
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"ScriptedProvider({self.base_url!r}, latency_ms={self.latency_ms})"


_SHARED: ScriptedProvider | None = None
_SHARED_LOCK = threading.Lock()


def serve(host: str = "127.0.0.1", port: int = 8000, latency_ms: float = 0.0):
    """Serve in the foreground until interrupted (``python -m harness_lib serve``)."""
    server = _Server((host, port), latency_ms)
    warm()
    print(f"scripted provider on http://{host}:{server.server_address[1]}/v1  scenarios: {', '.join(SCRIPTS)}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


__all__ = ["ScriptedProvider", "serve", "complete", "RequestError", "compact"]
