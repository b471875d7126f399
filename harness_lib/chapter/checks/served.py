"""A provider of the checks' own: the scripted provider's replies, to the chapter's scripts and to scripts a check
adds (``OWN``), each request billed under the address it came by, so that a check can say what a run asked the
model for, whether the loop recorded it or not.

    url = served.url("03-budget", "runaway, $0.010, yours")   # http://127.0.0.1:PORT/v1/<a key of its own>
    ...                                                          # a run against it
    served.billed(url)                                           # [usage of each request, in order]

A reply is what ``ScriptedProvider`` answers (the script of the request's ``model``, called with the turn and the
tool text read off the transcript; the bill of ``tokens.usage``), without its faults, latency, streaming or
``max_tokens``. It is started once per process, on a daemon thread, as the kernel's shared provider is.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def two_at_once(t: int, tool_text: str) -> dict:
    """Lists, reads two files in one reply, then says which results it was told, in which order: several calls in
    one reply, which every loop must run one by one (01, 02, 14 and 08's checks ask it)."""
    from ...scripted.scripts import asks, call, text
    if t == 0:
        return asks(call("c1", "list_files", {}))
    if t == 1:
        return asks(call("c2", "read_file", {"path": "notes.txt"}), call("c3", "read_file", {"path": "errors.log"}))
    notes, errors = tool_text.find("rotate your logs"), tool_text.find("timed out")
    return text("Read notes.txt, then errors.log: a timeout." if -1 < notes < errors else
                f"Told {'notes.txt' if notes > -1 else ''}{' and ' if min(notes, errors) > -1 else ''}"
                f"{'errors.log' if errors > -1 else ''}{', out of order' if -1 < errors < notes else ''}.")


# a check's own scripts, by name: (turn, tool_text) -> message, as scripts.SCRIPTS
OWN: dict = {"two_at_once": two_at_once}
_BILLS: dict[str, list] = {}
_LOCK = threading.Lock()
_ADDRESS: list = []      # [(the process's id, the address)]: a case's child process serves its own bills


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        from ...scripted.scripts import SCRIPTS, tool_text, turn_index
        from ...tokens import usage

        key = self.path.removesuffix("/chat/completions").rsplit("/", 1)[-1]
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            messages, script = body["messages"], {**SCRIPTS, **OWN}.get(body["model"])
            if script is None:
                return self._send(404, {"error": {"message": f"The model `{body['model']}` does not exist."}})
            message = script(turn_index(messages), tool_text(messages))
            bill = usage(messages, body.get("tools"), message)
        except Exception as error:  # noqa: BLE001 - a request the scripted provider would refuse: said, not raised
            return self._send(400, {"error": {"message": f"{type(error).__name__}: {error}"}})
        with _LOCK:
            _BILLS.setdefault(key, []).append(bill)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        self._send(200, {"id": key, "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": bill})

    def _send(self, status: int, answer: dict):
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up (a case stopped) is not news
            super().handle_error(request, client_address)


def _address() -> str:
    with _LOCK:
        if not _ADDRESS or _ADDRESS[0][0] != os.getpid():
            server = _Server(("127.0.0.1", 0), _Handler)
            threading.Thread(target=server.serve_forever, name="check: served", daemon=True).start()
            _ADDRESS[:] = [(os.getpid(), f"http://127.0.0.1:{server.server_address[1]}/v1")]
        return _ADDRESS[0][1]


def url(*names: str) -> str:
    """A fresh address of the provider for one run: what is asked through it is billed under it alone."""
    with _LOCK:
        key = f"{len(_BILLS)}-" + "-".join("".join(ch if ch.isalnum() else "_" for ch in n) for n in names)
        _BILLS[key] = []
    return f"{_address()}/{key}"


def address(script: str, provider: str, *names: str) -> str:
    """Where a case's run asks its model: here for a check's own script, else ``provider`` (the scripted one)."""
    return url(*names) if script in OWN else provider


def billed(address: str) -> list[dict]:
    """The usage of every request made through ``address``, in order."""
    with _LOCK:
        return list(_BILLS[address.rsplit("/", 1)[-1]])
