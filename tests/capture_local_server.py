"""Capture real replies of llama-cpp-python's server (the `local` extra) as a conformance fixture:
``tests/fixtures/servers/llama-cpp-python.json``. Run it with the extra installed, from the repository root:

    .venv/bin/python tests/capture_local_server.py

What it records, all from one server (SmolLM2-135M-Instruct, greedy decoding):

* ``requests`` / ``replies``: the plan task (``workspace.TASK``) run by the harness for at most
  ``MAX_TURNS`` turns, not streamed: each request body the harness sent and the reply as the server sent it;
* ``stream``: the same requests sent with ``"stream": true`` to a fresh server, each reply's server-sent events
  as they came (their data, in order; ``raw_start``: the first bytes, to show the framing);
* ``no_tools``: one request without tools, answered both ways (after the run, on each server);
* ``builtin_stream_with_tools``: llama-cpp-python's own ``chatml-function-calling`` format asked to stream a
  reply with tools: the status, content type and body it answers with.

Nothing here is written by hand: the replies are the server's, byte for byte but for JSON formatting.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

from harness_lib import local
from harness_lib.client import ModelClient
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

OUT = Path(__file__).parent / "fixtures" / "servers" / "llama-cpp-python.json"
MAX_TURNS = 3


class Recording(ModelClient):
    """The harness's own client, keeping each request body and the decoded reply."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[dict] = []
        self.replies: list[dict] = []

    async def complete(self, model, messages, tools=None, **extra):
        body = {"model": model, "messages": json.loads(json.dumps(messages)), **extra}
        if tools:
            body.update(tools=tools, tool_choice="auto")
        self.requests.append(body)
        reply = await super().complete(model, messages, tools, **extra)
        self.replies.append(reply)
        return reply


def events(http: httpx.Client, url: str, body: dict) -> dict:
    """One streamed request: the data of each event, in order, and the first bytes as they came."""
    with http.stream("POST", url, json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        raw = b"".join(r.iter_bytes())
    data = [line[5:].strip() for line in raw.replace(b"\r\n", b"\n").split(b"\n") if line.startswith(b"data:")]
    assert data and data[-1] == b"[DONE]", raw[-200:]
    return {"status": r.status_code, "content_type": r.headers.get("content-type"),
            "raw_start": raw[:160].decode("utf-8", "replace"), "chunks": [json.loads(d) for d in data[:-1]]}


def capture() -> dict:
    if why := local.missing():
        sys.exit(f"the local model is {why}")
    import llama_cpp
    out: dict = {"server": "llama-cpp-python", "model": local.MODEL_NAME}
    with local.LocalModel() as lm:
        client = Recording(lm.base_url, timeout=120.0, max_retries=0)

        async def plan_task():
            try:
                return await run(new_run(SYSTEM_PROMPT, TASK, lm.model), Workspace.copy_of().tools(),
                                 Options(client=client, max_turns=MAX_TURNS))
            finally:
                await client.aclose()

        state = asyncio.run(plan_task())
        plain = {"model": lm.model, "messages": [{"role": "user", "content": "Say hello in three words."}]}
        with httpx.Client(timeout=120.0, trust_env=False) as http:
            no_tools = {"request": plain, "reply": http.post(f"{lm.base_url}/chat/completions", json=plain).json()}
    # a reply depends on the requests the server answered before (local_format): the same requests, in the
    # same order, to a server of their own
    with local.LocalModel() as lm, httpx.Client(timeout=120.0, trust_env=False) as http:
        url = f"{lm.base_url}/chat/completions"
        stream = [events(http, url, body) for body in client.requests]
        no_tools["stream"] = events(http, url, plain)
    with local.LocalModel(chat_format=local.BUILTIN_FORMAT) as lm:
        with httpx.Client(timeout=120.0, trust_env=False) as http:
            body = {**client.requests[0], "stream": True, "stream_options": {"include_usage": True}}
            r = http.post(f"{lm.base_url}/chat/completions", json=body)
            builtin = {"request": body, "status": r.status_code, "content_type": r.headers.get("content-type"),
                       "body": r.text}
    out.update({
        "about": (f"CAPTURED, not written from documentation: llama-cpp-python {llama_cpp.__version__}'s "
                  f"server (python -m harness_lib.local) on {local.MODEL_FILE}, chat format "
                  f"{local.CHAT_FORMAT!r}, temperature 0; tests/capture_local_server.py recorded it"),
        "captured": {"llama_cpp_python": llama_cpp.__version__, "model_file": local.MODEL_FILE,
                     "model_sha256": local.MODEL_SHA256, "chat_format": local.CHAT_FORMAT, "task": TASK,
                     "max_turns": MAX_TURNS, "run": {"status": state.status, "turns": state.turns,
                                                     "tool_runs": state.tool_runs}},
        "requests": client.requests, "replies": client.replies,
        "stream": [s["chunks"] for s in stream], "stream_raw_start": stream[0]["raw_start"],
        "no_tools": {"request": no_tools["request"], "reply": no_tools["reply"],
                     "stream": no_tools["stream"]["chunks"]},
        "builtin_stream_with_tools": builtin,
    })
    return out


if __name__ == "__main__":
    fixture = capture()
    OUT.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(fixture['replies'])} turns ({fixture['captured']['run']}), "
          f"builtin stream with tools: HTTP {fixture['builtin_stream_with_tools']['status']}, "
          f"{len(fixture['builtin_stream_with_tools']['body'])} bytes")
