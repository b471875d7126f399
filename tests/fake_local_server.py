"""A stand-in for ``python -m llama_cpp.server``, for the local model's fault tests.

It takes the same arguments (only ``--host`` and ``--port`` matter) and misbehaves as ``FAKE_MODE`` says:

* ``ok``: listen after ``FAKE_DELAY`` seconds; ``/v1/models`` answers; every chat request with tools and
  ``"tool_choice": "auto"`` gets a tool call to ``list_files`` until ``FAKE_TOOL_TURNS`` turns, then a
  text answer (without ``tool_choice``, like the real server's chat format, it ignores the tools);
* ``never``: print a loading line and never listen;
* ``exit``: print an error and exit with status 3 while "loading";
* ``segv``: like ``ok``, but the chat request number ``FAKE_DIE_AT`` (1-based) kills the process
  with SIGSEGV before answering, as the default build of llama.cpp did on this machine;
* ``deaf``: like ``ok``, but ignores SIGTERM (the manager must escalate to SIGKILL);
* ``bind``: like ``ok``, but binds with no SO_REUSEADDR and reports errno 98 like uvicorn when taken.

Like ``python -m harness_lib.local``, it writes the prompt of each chat request to ``--prompt_log`` (the
harness's chat format, rendered), so that ``LocalModel.prompts()`` has something to read.

With ``FAKE_GRANDCHILD=1`` it first starts a sleeping grandchild and writes its pid to ``FAKE_PIDFILE``:
stopping the server must stop it too.
"""

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def arg(name, default=None):
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


MODE = os.environ.get("FAKE_MODE", "ok")
HOST, PORT = arg("--host", "127.0.0.1"), int(arg("--port", "0"))
REQUESTS = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": arg("--model_alias", "fake"), "object": "model"}]})

    def do_POST(self):
        global REQUESTS
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        REQUESTS += 1
        if arg("--prompt_log"):
            from harness_lib.local_format import render
            with open(arg("--prompt_log"), "a", encoding="utf-8") as f:
                f.write(json.dumps({"prompt": render(body["messages"], body.get("tools"))}) + "\n")
        if MODE == "segv" and REQUESTS >= int(os.environ.get("FAKE_DIE_AT", "1")):
            print("llama_decode: about to crash", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        # like llama-cpp-python's chatml-function-calling: no tool_choice, no tools
        tool_turns = int(os.environ.get("FAKE_TOOL_TURNS", "1"))
        if body.get("tools") and body.get("tool_choice") == "auto" and turn < tool_turns:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{turn}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"fake answer after {turn} turns"}, "stop"
        self._json({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def main():
    if os.environ.get("FAKE_GRANDCHILD") == "1":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        with open(os.environ["FAKE_PIDFILE"], "w") as f:
            f.write(str(child.pid))
    print(f"fake llama server: loading {arg('--model')}", flush=True)
    if MODE == "never":
        time.sleep(600)
        return
    if MODE == "exit":
        print("error: failed to load model", flush=True)
        sys.exit(3)
    if MODE == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(float(os.environ.get("FAKE_DELAY", "0")))

    class Server(HTTPServer):
        allow_reuse_address = MODE != "bind"

    try:
        server = Server((HOST, PORT), Handler)
    except OSError as e:
        print(f"ERROR: [Errno {e.errno}] error while attempting to bind on address ({HOST!r}, {PORT}): "
              f"address already in use", flush=True)
        sys.exit(1)
    print(f"fake llama server: listening on {HOST}:{PORT}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
