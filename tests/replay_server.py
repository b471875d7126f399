"""A local test server that replays recorded reply shapes of real servers, on 127.0.0.1 port 0.

The fixtures in ``tests/fixtures/servers/`` hold, per server (Ollama, llama.cpp's llama-server, vLLM,
LM Studio, OpenAI), the replies of the plan task (list the files, read errors.log, answer) exactly as that
server shapes them, streaming and not, plus the quirks and error replies real servers send. They were
written from each project's documentation and source, not captured from a live server (this machine has
none, and the tests run offline). One is CAPTURED instead: ``llama-cpp-python.json``, the real replies of
llama-cpp-python's server running the local model of section 12 (``tests/capture_local_server.py``
recorded it; its ``about`` and ``captured`` fields say so).

The reply to a request is chosen the way the scripted provider chooses: by the number of assistant
messages in the request (the turn). Faults are queued per request with ``then(...)``: an error status with
its body and headers, ``hang`` (headers, then nothing), ``trickle`` (a byte at a time, never finishing),
``endless`` (a body that never ends), ``raw`` (a body given as bytes), ``sse_raw`` (an event stream's
body given as bytes, with its content type).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "servers"
SERVERS = ("ollama", "llamacpp", "vllm", "lmstudio", "openai")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def quirk(name: str) -> dict:
    return fixture("quirks")[name]


def error(name: str) -> dict:
    return fixture("errors")[name]


class ReplayServer:
    def __init__(self, replies: list[dict], stream: list[list[dict]] | None = None):
        self.replies, self.stream = replies, stream
        self.requests: list[dict] = []   # every request body received
        self.faults: list[dict] = []     # spent one per request, in order
        self.endless_bytes = 0           # what an `endless` body got to send before the client hung up
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with owner.lock:
                    owner.requests.append(body)
                    fault = owner.faults.pop(0) if owner.faults else None
                try:
                    owner._answer(self, body, fault)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: what a deadline does

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @classmethod
    def of(cls, server: str) -> "ReplayServer":
        f = fixture(server)
        return cls(f["replies"], f["stream"])

    def then(self, *faults: dict) -> "ReplayServer":
        self.faults.extend(faults)
        return self

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- answering ---------------------------------------------------------------------------------------
    def _answer(self, h: BaseHTTPRequestHandler, body: dict, fault: dict | None):
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if fault is None:
            if body.get("stream") and self.stream:
                return self._sse(h, self.stream[min(turn, len(self.stream) - 1)])
            return self._send(h, 200, json.dumps(self.replies[min(turn, len(self.replies) - 1)]).encode())
        if "status" in fault and not fault.get("stream_error"):
            return self._send(h, fault["status"], json.dumps(fault["body"]).encode(), fault.get("headers"))
        if fault.get("stream_error"):
            return self._sse(h, [self.stream[0][0], fault["body"]])
        if "raw" in fault:
            return self._send(h, 200, fault["raw"])
        if "sse_raw" in fault:
            return self._send(h, 200, fault["sse_raw"], {"Content-Type": "text/event-stream"})
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(10 ** 9))
        h.end_headers()
        h.wfile.flush()
        if fault.get("hang"):  # headers, then nothing
            self.stopping.wait(30)
        elif fault.get("trickle"):  # a byte every `trickle` seconds, never done
            while not self.stopping.wait(fault["trickle"]):
                h.wfile.write(b" ")
                h.wfile.flush()
        elif fault.get("endless"):  # as fast as it goes, for ever
            chunk = b'{"pad":"' + b"x" * 65536
            while not self.stopping.is_set():
                h.wfile.write(chunk)
                self.endless_bytes += len(chunk)

    def _send(self, h, status: int, payload: bytes, headers: dict | None = None):
        headers = {"Content-Type": "application/json", **(headers or {})}
        h.send_response(status)
        h.send_header("Content-Length", str(len(payload)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(payload)
        h.wfile.flush()

    def _sse(self, h, chunks: list[dict]):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for c in chunks:
            h.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
            h.wfile.flush()
            time.sleep(0.001)
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()
