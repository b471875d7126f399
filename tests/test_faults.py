"""Faults from the provider (issue 5): passing ones are retried, bounded, recorded and never billed twice;
final ones end the run as failed with the status and message recorded, not resumable. Every test that injects
a fault has a provider of its own (each case below, and the ``faulty`` fixture), so no fault outlives its test.

Each case of ``FAULT_CASES`` (``tests/reliability_campaign.py``) runs ``plan`` against a scripted provider playing
the faults, and must end as the case says (see ``run_fault_case`` for every check)."""

import asyncio
import email.utils
import json
import socket
import time

import httpx
import pytest
import reliability_campaign as R

from harness_lib.cli import main
from harness_lib.client import ModelClient, ModelError
from harness_lib.loop import Options, run
from harness_lib.reply import read_reply
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with ScriptedProvider() as provider:
        s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"),
                            Workspace.copy_of(into=tmp_path_factory.mktemp("ref")).tools(),
                            Options(base_url=provider.base_url)))
    return {"turns": s.turns, "cost_usd": s.own_cost_usd, "messages": s.messages}


@pytest.mark.parametrize("case", R.FAULT_CASES, ids=[c.name for c in R.FAULT_CASES])
def test_fault(case, reference):
    result = R.run_fault_case(case, reference)
    assert result["problems"] == [], result


def test_retries_are_recorded_in_the_trace_and_not_billed(tmp_path, faulty):
    faulty.inject("503", "502")
    trace = Trace(timestamps=False)
    s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of(into=tmp_path).tools(),
                        Options(base_url=faulty.base_url, trace=trace, backoff_s=0.01)))
    assert faulty.requests == s.turns == 3
    retries = [e for e in trace.events if e["type"] == "retry"]
    assert [(r["attempt"], r["problem"][:8]) for r in retries] == [(1, "HTTP 503"), (2, "HTTP 502")]
    assert all(r["runId"] == s.run_id for r in retries)
    assert f"{s.own_cost_usd:.6f}" == "0.002470"


def test_a_failed_run_says_why_in_the_trace_and_cannot_be_resumed(tmp_path, faulty):
    faulty.inject("403")
    code = main(["run", "plan", "--base-url", faulty.base_url, "--state-dir", str(tmp_path),
                 "--trace", str(tmp_path / "t.jsonl"), "--run-id", "r1", "--json"])
    assert code == 0
    (stopped,) = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()
                  if '"run_stopped"' in line]
    assert stopped["status"] == "failed" and stopped["error"].startswith("HTTP 403: ")
    before = (tmp_path / "r1.json").read_bytes()
    assert main(["resume", "r1", "--state-dir", str(tmp_path)]) == 2
    assert (tmp_path / "r1.json").read_bytes() == before


# -- the client's pieces ------------------------------------------------------------------------------
def delays(client, attempt, n=200):
    return [client._delay(attempt, None) for _ in range(n)]


def test_backoff_is_exponential_jittered_and_bounded():
    c = ModelClient("http://127.0.0.1:9/v1", backoff_s=0.25, max_backoff_s=8.0)
    for attempt in range(8):
        base = min(0.25 * 2 ** attempt, 8.0)
        d = delays(c, attempt)
        assert all(base / 2 <= x <= base for x in d) and len(set(d)) > 100  # jittered: never in lockstep


def test_retry_after_in_seconds_or_as_a_date_is_honoured_and_capped():
    c = ModelClient("http://127.0.0.1:9/v1", max_backoff_s=8.0)
    req = httpx.Request("POST", "http://x")
    assert c._delay(0, httpx.Response(429, headers={"Retry-After": "3"}, request=req)) == 3.0
    assert c._delay(0, httpx.Response(429, headers={"Retry-After": "120"}, request=req)) == 8.0
    date = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3.5 <= c._delay(0, httpx.Response(429, headers={"Retry-After": date}, request=req)) <= 5.0
    junk = c._delay(0, httpx.Response(429, headers={"Retry-After": "soon"}, request=req))
    assert 0.125 <= junk <= 0.25  # unreadable: the backoff instead


def test_a_refused_connection_is_retried_then_fails_with_a_reason():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seen = []
    client = ModelClient(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01, on_retry=seen.append)
    with pytest.raises(ModelError, match="gave up after 3 attempts; last: ConnectError"):
        asyncio.run(client.complete("plan", [{"role": "user", "content": "hi"}]))
    assert len(seen) == 2


@pytest.mark.parametrize("reply", [
    {}, {"choices": []}, {"choices": [{"message": {"role": "user", "content": "x"}}], "usage": {}},
    {"choices": [{"message": {"role": "assistant", "content": 7}}],
     "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
    {"choices": [{"message": {"role": "assistant", "content": "x"}}],
     "usage": {"prompt_tokens": -1, "completion_tokens": 1}},
    {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": 1}]}}],
     "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
    {"choices": [{"message": {"role": "assistant", "tool_calls": {"id": "c1"}}}],
     "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
    [1, 2], "a string", None,
])
def test_a_reply_that_is_not_a_chat_completion_fails_the_run_with_a_reason(reply):
    with pytest.raises(ModelError, match="not a chat completion"):
        read_reply(reply, [], None, (), 1)

    class Odd:
        async def complete(self, *args):
            return reply
    s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "odd"), [], Options(client=Odd())))
    assert s.status == "failed" and "not a chat completion" in s.error and not s.resumable


def test_the_ca_bundle_is_loaded_only_for_https(monkeypatch):
    """A cold start against the local provider does not pay for TLS it never does."""
    import asyncio

    from harness_lib import client as client_module
    calls = []
    real = client_module._tls.__wrapped__
    monkeypatch.setattr(client_module, "_tls", lambda: calls.append(1) or real())
    plain = client_module.ModelClient("http://127.0.0.1:9/v1")
    assert calls == []
    secure = client_module.ModelClient("HTTPS://example.invalid/v1")
    assert calls == [1]
    asyncio.run(plain.aclose())
    asyncio.run(secure.aclose())


def test_asking_a_plain_http_server_for_its_models_loads_no_ca_bundle(url, monkeypatch):
    """Every command-line run against a server asks it for its models first (``runs.served_models``): over plain
    HTTP that cost a CA bundle (about 45 ms of CPU a run) until it used the client's rule."""
    import ssl

    from harness_lib import client as client_module
    from harness_lib.runs import served_models
    loaded = []
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda *a, **k: loaded.append(a[1:]))
    client_module._tls.cache_clear()
    try:
        models = served_models(url, "k")
        assert models and all(m["owned_by"] == "scripted" for m in models)
        assert loaded == []
        assert served_models("HTTPS://127.0.0.1:9/v1", "k") is None  # nothing listens there; it tried TLS
        assert len(loaded) == 1
    finally:
        client_module._tls.cache_clear()
