"""Conformance: the same harness, pointed at replies shaped as Ollama, llama.cpp, vLLM, LM Studio and OpenAI
shape them (tests/fixtures/servers/, replayed by tests/replay_server.py on 127.0.0.1 port 0), stays
governable. Every case runs the real loop over HTTP and ends with one of the five statuses, its state saved
and its trace closed; the cases that could hang are given deadlines of a second or less and must keep them.
"""

import asyncio
import json
import os
import time

import pytest
from replay_server import SERVERS, ReplayServer, error, fixture, quirk

from harness_lib.cli import main
from harness_lib.loop import Options, run
from harness_lib.pricing import UNPRICED, Pricing
from harness_lib.state import STATUSES, load, new_run
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

ANSWER = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
FAST = {"backoff_s": 0.01}


def drive(tmp_path, url: str, model: str = "qwen2.5-0.5b-instruct", **options):
    """Run the plan task against ``url``; check what every run must satisfy; return (state, trace events)."""
    ws = Workspace.copy_of(into=tmp_path / "ws")
    trace_file = tmp_path / "trace.jsonl"
    options.setdefault("pricing", UNPRICED)
    state = new_run(SYSTEM_PROMPT, TASK, model)
    state.meta["workspace"] = str(ws.root)  # where `resume` acts, as the CLI records it
    state = asyncio.run(run(state, ws.tools(),
                            Options(base_url=url, trace=Trace(trace_file), state_dir=tmp_path / "runs",
                                    **options)))
    events = read(trace_file)
    assert state.status in STATUSES and state.status != "running"
    assert load(tmp_path / "runs", state.run_id).to_dict() == state.to_dict()  # saved as returned
    assert events[-1]["type"] == "run_stopped" and events[-1]["status"] == state.status  # trace closed
    if state.status == "failed":
        assert state.error and events[-1]["error"] == state.error
    ids = [c["id"] for m in state.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)) and all(ids)  # unique in every transcript
    return state, events


def turns(events):
    return [e for e in events if e["type"] == "turn"]


# -- every server, streaming and not: the plan task completes ------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("server", SERVERS)
def test_plan_completes_against_each_server(server, stream, tmp_path):
    seen = []
    with ReplayServer.of(server) as replay:
        state, events = drive(tmp_path, replay.base_url, fixture(server)["model"], stream=stream,
                              on_text=seen.append)
        sent = replay.requests
    assert (state.status, state.turns, state.tool_runs, state.output) == ("completed", 3, 2, ANSWER)
    assert [r["toolName"] for r in state.tool_log] == ["list_files", "read_file"]
    expected = [r["usage"]["prompt_tokens"] for r in fixture(server)["replies"]]
    assert [t["prompt_tokens"] for t in state.per_turn] == expected  # the server's own counts, not ours
    assert not any(t.get("estimated") for t in state.per_turn)
    assert all(e["costUsd"] is None for e in turns(events))  # no price given: no dollars
    assert all(r["model"] == fixture(server)["model"] for r in sent)
    if stream:
        assert all(r["stream"] is True and r["stream_options"] == {"include_usage": True} for r in sent)
        assert len(seen) > 5 and "".join(seen) == ANSWER  # the answer arrived in pieces, as it was sent
    else:
        assert not any("stream" in r for r in sent) and seen == []


def test_a_stream_without_usage_is_counted_locally(tmp_path):
    f = fixture("ollama")
    stream = [[c for c in turn if c.get("choices")] for turn in f["stream"]]  # older Ollama: no usage chunk
    with ReplayServer(f["replies"], stream) as replay:
        state, events = drive(tmp_path, replay.base_url, stream=True)
    assert state.status == "completed" and state.turns == 3
    assert all(t["estimated"] for t in state.per_turn) and all(e["estimated"] for e in turns(events))
    assert [t["prompt_tokens"] for t in state.per_turn][0] == 204  # the chapter's own count of that prompt


# -- tool-call ids ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["repeated_ids", "empty_ids", "missing_id"])
def test_ids_a_server_gets_wrong_are_replaced_on_receipt(name, tmp_path):
    with ReplayServer(quirk(name)["replies"]) as replay:
        started = time.monotonic()
        state, events = drive(tmp_path, replay.base_url)
        requests = len(replay.requests)
    assert time.monotonic() - started < 10
    assert (state.status, state.turns, state.tool_runs, requests) == ("completed", 3, 2, 3)
    renamed = [r for e in turns(events) for r in e.get("renamedCalls", [])]
    original = {"repeated_ids": "call_0", "empty_ids": "", "missing_id": None}[name]
    expected = [{"from": original, "to": "h1_1"}] if name == "missing_id" else \
        ([{"from": "call_0", "to": "h2_1"}] if name == "repeated_ids" else
         [{"from": "", "to": "h1_1"}, {"from": "", "to": "h2_1"}])
    assert renamed == expected
    # the tool messages answer the harness's ids, and the server saw them
    answered = [m["tool_call_id"] for m in state.messages if m["role"] == "tool"]
    assert [r["to"] for r in renamed] == [i for i in answered if i.startswith("h")]


def test_two_calls_sharing_one_id_both_run(tmp_path):
    with ReplayServer(quirk("shared_id_in_one_reply")["replies"]) as replay:
        state, events = drive(tmp_path, replay.base_url)
    assert state.status == "completed" and state.tool_runs == 3
    assert turns(events)[0]["renamedCalls"] == [{"from": "call_same0001", "to": "h1_2"}]
    assert [r["callId"] for r in state.tool_log][:2] == ["call_same0001", "h1_2"]


def test_an_empty_id_can_be_approved(tmp_path):
    """A write asked for with an empty id stops for approval under the harness's id, which the person
    approves; the resumed run deletes once."""
    replies = quirk("empty_ids")["replies"]
    replies[1]["choices"][0]["message"]["tool_calls"][0]["function"].update(
        name="delete_file", arguments='{"path":"access.log"}')
    with ReplayServer(replies) as replay:
        state, events = drive(tmp_path, replay.base_url)
        assert (state.status, state.interruption["callId"]) == ("interrupted", "h2_1")
        code = main(["resume", state.run_id, "--state-dir", str(tmp_path / "runs"), "--approve", "h2_1",
                     "--base-url", replay.base_url, "--json"])
    assert code == 0
    done = load(tmp_path / "runs", state.run_id)
    assert done.status == "completed" and [r["toolName"] for r in done.tool_log] == \
        ["list_files", "delete_file"]
    assert not (tmp_path / "ws" / "workspace" / "access.log").exists()


# -- a tool call leaked as text -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["leaked_tool_call", "leaked_bare_json"])
def test_a_call_leaked_as_text_fails_with_the_fix(name, tmp_path):
    with ReplayServer(quirk(name)["replies"]) as replay:
        state, _ = drive(tmp_path, replay.base_url)
    assert (state.status, state.turns, state.tool_runs) == ("failed", 0, 0)
    assert "--tool-call-parser hermes" in state.error and "--jinja" in state.error
    assert state.output is None


# -- usage ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["no_usage", "partial_usage", "null_usage"])
def test_missing_usage_is_estimated_and_flagged(name, tmp_path):
    with ReplayServer(quirk(name)["replies"]) as replay:
        state, events = drive(tmp_path, replay.base_url)
    assert state.status == "completed" and state.turns == 3
    assert all(t.get("estimated") for t in state.per_turn)
    assert all(e.get("estimated") for e in turns(events))
    assert [t["completion_tokens"] for t in state.per_turn] == [23, 29, 18]  # o200k, the chapter's convention
    if name == "partial_usage":  # what the server did send is kept
        assert [t["prompt_tokens"] for t in state.per_turn] == [412, 487, 566]


def test_a_budget_acts_on_the_estimate(tmp_path):
    with ReplayServer(quirk("no_usage")["replies"]) as replay:
        state, _ = drive(tmp_path, replay.base_url, pricing=Pricing.per_million(2, 12), max_budget_usd=0.001)
    assert (state.status, state.turns) == ("budget_exceeded", 2)
    assert state.own_cost_usd == pytest.approx(0.00157)  # the chapter's two-turn cost, from our own count


def test_a_budget_without_a_price_is_refused():
    with pytest.raises(ValueError, match="needs a price"):
        Options(base_url="http://127.0.0.1:9/v1", pricing=UNPRICED, max_budget_usd=1.0)


# -- finish reasons -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,says", [("cut_length", "length limit"), ("content_filter", "content filter")])
def test_a_cut_or_filtered_answer_is_not_a_completion(name, says, tmp_path):
    with ReplayServer(quirk(name)["replies"]) as replay:
        state, events = drive(tmp_path, replay.base_url)
    assert (state.status, state.turns) == ("failed", 3) and says in state.error
    assert turns(events)[-1]["finish"] == name.replace("cut_", "")
    assert state.per_turn[-1]["completion_tokens"] == 19  # the turn was paid for, and recorded


# -- replies the harness cannot use end the run with a message ---------------------------------------------------
@pytest.mark.parametrize("raw,says", [
    (b'{"choices":' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply"),
    (b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
     b'"usage":{"prompt_tokens":1' + b"0" * 310 + b',"completion_tokens":1}}', "not a token count"),
    (b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
     b'"usage":{"prompt_tokens":1e310,"completion_tokens":1}}', "not a token count"),
    (b"<html>502 Bad Gateway</html>", "not JSON"),
], ids=["deep", "10^310", "1e310", "html"])
def test_an_unusable_reply_fails_the_run_with_a_message(raw, says, tmp_path):
    with ReplayServer.of("openai").then({"raw": raw}) as replay:
        state, _ = drive(tmp_path, replay.base_url)
    assert state.status == "failed" and says in state.error and len(state.error) < 400


def test_lone_surrogates_are_replaced_and_the_run_completes(tmp_path, capsys):
    with ReplayServer(quirk("lone_surrogates")["replies"]) as replay:
        state, events = drive(tmp_path, replay.base_url)
    assert state.status == "completed" and state.output == "errors.log \ufffdmentions a timeout."
    assert turns(events)[1]["repairedChars"] == 1 and turns(events)[2]["repairedChars"] == 1
    print(state.output)  # printable, and saved (drive loaded it back)
    assert "\ufffd" in capsys.readouterr().out


def test_arguments_sent_as_an_object_are_used(tmp_path):
    with ReplayServer(quirk("object_arguments")["replies"]) as replay:
        state, _ = drive(tmp_path, replay.base_url)
    assert state.status == "completed" and state.tool_log[1]["args"] == '{"path":"errors.log"}'


# -- errors, retries, waits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,says", [
    ("llamacpp_jinja_500", "HTTP 500: tools param requires --jinja flag"),
    ("ollama_404_model", "not found, try pulling it first; check the model name"),
    ("vllm_404_model", "does not exist.; check the model name"),
    ("openai_401", "HTTP 401: Incorrect API key"),
])
def test_a_final_error_is_not_retried(name, says, tmp_path):
    e = error(name)
    with ReplayServer.of("llamacpp").then(e, e, e) as replay:
        state, events = drive(tmp_path, replay.base_url, **FAST)
        requests = len(replay.requests)
    assert (state.status, requests) == ("failed", 1) and says in state.error
    assert not [e for e in events if e["type"] == "retry"]


def test_429_waits_as_long_as_retry_after_says(tmp_path):
    with ReplayServer.of("openai").then(error("openai_429")) as replay:
        state, events = drive(tmp_path, replay.base_url, **FAST)
    (retry,) = [e for e in events if e["type"] == "retry"]
    assert state.status == "completed" and retry["delayS"] == 0.2


@pytest.mark.slow
def test_a_server_loading_its_model_is_waited_for_visibly(tmp_path):
    loading = error("llamacpp_loading_503")
    with ReplayServer.of("llamacpp").then(*[loading] * 3) as replay:  # more than max_retries
        state, events = drive(tmp_path, replay.base_url, max_retries=1, **FAST)
    waits = [e for e in events if e["type"] == "retry"]
    assert state.status == "completed" and len(waits) == 3 and all(w["loading"] for w in waits)
    assert waits[-1]["waitedS"] >= 2  # a second apart: visible, not a hammering


@pytest.mark.slow
def test_the_wait_for_a_loading_model_is_bounded(tmp_path):
    loading = error("llamacpp_loading_503")
    with ReplayServer.of("llamacpp").then(*[loading] * 50) as replay:
        started = time.monotonic()
        state, events = drive(tmp_path, replay.base_url, load_wait_s=1.5, **FAST)
        took = time.monotonic() - started
        asked = len(replay.requests)
    # still unreachable after the bounded wait: resumable (the transcript is valid, the next step obvious)
    assert state.status == "interrupted" and state.interruption["reason"].startswith("provider unreachable")
    assert "still loading its model after" in state.error
    # The bound, by events: asked at 0, 1 and 1.5 s, then it gave up. A loaded machine only asks fewer
    # times; a wait that ignored its bound would go on through all 50 loading answers (a second apart).
    assert 2 <= asked <= 3 and all(e["waitedS"] < 1.5 for e in events if e["type"] == "retry")
    # The bound as time: never before load_wait_s; the upper bound is the promise with slack for a loaded
    # two-core machine (it ends about 1.5 s in), still far from the ~50 s of an unbounded wait.
    assert 1.5 <= took < 1.5 + 3


@pytest.mark.slow
@pytest.mark.parametrize("fault", [{"hang": True}, {"trickle": 0.1}], ids=["headers-then-nothing", "trickle"])
def test_the_deadline_covers_the_whole_response(fault, tmp_path):
    with ReplayServer.of("vllm").then(fault, fault) as replay:
        started = time.monotonic()
        state, events = drive(tmp_path, replay.base_url, timeout_s=0.5, max_retries=1, **FAST)
        took = time.monotonic() - started
    # retries ran out on missed deadlines: the provider is unreachable, the run resumable
    assert state.status == "interrupted" and state.interruption["reason"].startswith("provider unreachable")
    assert "deadline" in state.error
    assert len([e for e in events if e["type"] == "retry"]) == 1
    # Two attempts cut at their 0.5 s deadline: never sooner; the upper bound is that promise with slack for
    # a loaded two-core machine (it ends about 1 s in). Without a whole-response deadline the trickle never
    # ends (httpx's per-read timeout sees a byte every 0.1 s), and the test would not end either.
    assert 2 * 0.5 <= took < 2 * 0.5 + 3


def test_an_endless_body_is_refused_at_the_size_cap(tmp_path):
    with ReplayServer.of("vllm").then({"endless": True}) as replay:
        started = time.monotonic()
        state, _ = drive(tmp_path, replay.base_url, max_response_bytes=2 * 2 ** 20, timeout_s=10)
        took, sent = time.monotonic() - started, replay.endless_bytes
    # refused at the cap (the error says so), not cut by the attempt's deadline: well inside it
    assert state.status == "failed" and "larger than 2,097,152 bytes" in state.error
    assert took < 10 / 2
    # and it stopped reading there: the server got to send the cap and what the sockets' buffers hold
    # (a few MiB on loopback), not the 100 MiB that a cap acting 50 times too late would take in
    assert sent < 10 * 2 * 2 ** 20, f"{sent:,} bytes sent"


def test_an_error_inside_a_stream_fails_the_run(tmp_path):
    with ReplayServer.of("vllm").then(error("vllm_stream_error")) as replay:
        state, _ = drive(tmp_path, replay.base_url, stream=True)
    assert state.status == "failed" and "longer than the maximum model length" in state.error


# -- the command line: the seam, the model name, prices, the default cap, streaming ---------------------------------
def cli_json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_the_environment_seam_is_honoured_and_flags_win(tmp_path, capsys, monkeypatch):
    with ReplayServer.of("ollama") as replay, ReplayServer.of("vllm") as other:
        monkeypatch.setenv("LLM_BASE_URL", replay.base_url)
        monkeypatch.setenv("LLM_MODEL", "qwen2.5:0.5b")
        monkeypatch.setenv("LLM_API_KEY", "sk-local")
        s = cli_json(capsys, "run", "plan", "--json")
        assert (s["status"], s["turns"], s["cost_usd"]) == ("completed", 3, None)
        assert replay.requests[0]["model"] == "qwen2.5:0.5b" and not other.requests
        s = cli_json(capsys, "run", "--base-url", other.base_url, "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--json")
        assert s["status"] == "completed" and other.requests[0]["model"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_real_endpoint_needs_a_model_name_and_a_price_for_a_budget(capsys, monkeypatch):
    assert main(["run", "plan", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "give the model's name" in capsys.readouterr().err
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["run", "--model", "m", "--budget", "0.01"]) == 2
    assert "--budget needs a price" in capsys.readouterr().err
    assert main(["run", "--model", "m", "--price-in", "2"]) == 2
    assert "both --price-in and --price-out" in capsys.readouterr().err


def test_prices_are_the_readers(capsys):
    with ReplayServer.of("openai") as replay:
        s = cli_json(capsys, "run", "--base-url", replay.base_url, "--model", "gpt-4.1-mini",
                     "--price-in", "0.4", "--price-out", "1.6", "--json")
        assert main(["run", "--base-url", replay.base_url, "--model", "gpt-4.1-mini"]) == 0
        line = capsys.readouterr().out.splitlines()[0]
    assert s["cost_usd"] == pytest.approx((412 + 487 + 566) * 0.4e-6 + (21 + 27 + 19) * 1.6e-6, abs=1e-6)
    assert "cost=unknown (no price given)" in line and "$" not in line


@pytest.mark.slow
def test_the_default_turn_cap_stops_a_runaway_and_can_be_removed(capsys):
    """A model that calls list_files 55 times, then answers: the default cap (50) stops it; without a cap
    it finishes at turn 56."""
    calls = fixture("openai")["replies"][0]
    replies = []
    for k in range(55):
        r = json.loads(json.dumps(calls))
        r["choices"][0]["message"]["tool_calls"][0]["id"] = f"call_{k}"
        replies.append(r)
    replies.append(fixture("openai")["replies"][2])
    with ReplayServer(replies) as replay:
        s = cli_json(capsys, "run", "--base-url", replay.base_url, "--model", "m", "--json")
        assert (s["status"], s["turns"], s["interruption"], s["max_turns"]) == \
            ("max_turns_exceeded", 50, {"type": "max_turns"}, 50)
        s = cli_json(capsys, "run", "--base-url", replay.base_url, "--model", "m", "--max-turns", "none", "--json")
        assert (s["status"], s["turns"], s["max_turns"]) == ("completed", 56, None)
        assert main(["run", "--base-url", replay.base_url, "--model", "m", "--max-turns", "0"]) == 0
    assert capsys.readouterr().out.startswith("m, no cap ")


def test_stream_shows_the_answer_and_the_steps(capsys):
    with ReplayServer.of("llamacpp") as replay:
        assert main(["run", "--base-url", replay.base_url, "--model", "qwen2.5-0.5b-instruct", "--stream"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("> " + ANSWER + "\n") and "status=completed" in out  # the model's line, marked
    assert "step 1:" in err and "list_files({})" in err and "step 3:" in err


def test_arguments_nested_too_deeply_fail_the_run_with_a_message(tmp_path):
    replies = fixture("openai")["replies"]
    replies[0]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[" * 100000 + "]" * 100000
    with ReplayServer(replies) as replay:
        state, _ = drive(tmp_path, replay.base_url)
    assert (state.status, state.tool_runs) == ("failed", 0) and "nested too deeply" in state.error


def test_a_task_with_a_lone_surrogate_is_still_sent(tmp_path, capsys):
    """A task read from a terminal with undecodable bytes (surrogateescape) reaches the server escaped."""
    with ReplayServer.of("lmstudio") as replay:
        assert main(["run", "--base-url", replay.base_url, "--model", "m", "--task", "files?\udcff", "--json"]) == 0
        sent = replay.requests[0]["messages"][1]["content"]
    assert json.loads(capsys.readouterr().out)["status"] == "completed" and sent == "files?\udcff"


def test_a_stream_cut_short_is_retried_and_says_so_on_screen(tmp_path):
    """The stream drops after some text: the attempt is retried, and the screen says why the text restarts."""
    class Cut(ReplayServer):
        def _sse(self, h, chunks):
            if len(self.requests) == 3:  # the final turn's first attempt: half the text, then the socket closes
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Content-Length", "100000")
                h.end_headers()
                for c in chunks[:4]:
                    h.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
                h.wfile.flush()
                h.close_connection = True
                return
            super()._sse(h, chunks)
    seen = []
    f = fixture("openai")
    with Cut(f["replies"], f["stream"]) as replay:
        state, events = drive(tmp_path, replay.base_url, stream=True, on_text=seen.append, **FAST)
    shown = "".join(seen)
    assert state.status == "completed" and state.output == ANSWER and state.turns == 3
    assert "asking again" in shown and shown.endswith(ANSWER)
    assert len([e for e in events if e["type"] == "retry"]) == 1


@pytest.mark.parametrize("argv", [["--timeout", "0"], ["--timeout", "nan"], ["--price-in", "-1", "--price-out", "1"],
                                  ["--max-turns", "many"], ["--max-turns", "-3"]])
def test_bad_endpoint_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "plan", *argv])
    assert e.value.code == 2 and capsys.readouterr().err


def test_the_chapter_ignores_the_seam_unless_asked(monkeypatch):
    import harness_lib.chapter.report as report
    seen = []
    monkeypatch.setattr(report, "main", lambda **kw: seen.append(os.environ.get("LLM_BASE_URL")) or 0)
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["chapter", "--json"]) == 0
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["chapter", "--json", "--live"]) == 0
    assert seen == [None, "http://127.0.0.1:9/v1"]


def test_a_run_without_a_price_given_one_on_resume_counts_its_first_turns(tmp_path, capsys):
    """Prices given to `resume` of a run made without one: the turns already made are priced too (they
    were counted as $0, so the total and a budget given now understated the spend)."""
    with ReplayServer.of("openai") as replay:
        assert main(["run", "--base-url", replay.base_url, "--model", "m", "--max-turns", "1",
                     "--state-dir", str(tmp_path), "--run-id", "u1"]) == 0
        capsys.readouterr()
        assert main(["resume", "u1", "--state-dir", str(tmp_path), "--price-in", "1", "--price-out", "1",
                     "--max-turns", "5", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["status"] == "completed" and s["turns"] == 3
    assert s["cost_usd"] == round((s["prompt_tokens"] + s["completion_tokens"]) / 1e6, 6)
    assert load(tmp_path, "u1").total_cost_usd == pytest.approx(s["cost_usd"])  # and the file still loads


def test_the_strict_budgets_margin_is_a_command_line_option_and_travels(tmp_path, capsys):
    """A real server counts the prompt its own way (here about twice the local count): without a margin the
    strict budget is crossed and the run fails saying "raise strict_margin", which the command line must
    offer (--strict-margin); with it, the call is refused before paying, and a resume keeps the margin."""
    common = ["--model", "m", "--price-in", "1", "--price-out", "1", "--budget", "0.0003", "--strict-budget",
              "--state-dir", str(tmp_path), "--json"]
    with ReplayServer.of("ollama") as replay:
        assert main(["run", "--base-url", replay.base_url, *common, "--run-id", "a"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["status"] == "failed" and "raise strict_margin" in s["error"] and s["cost_usd"] > 0.0003
        assert main(["run", "--base-url", replay.base_url, *common, "--run-id", "b", "--strict-margin", "1.1"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert (s["status"], s["turns"], s["cost_usd"]) == ("budget_exceeded", 0, 0)
        assert "refused before paying" in s["interruption"]["reason"] and len(replay.requests) == 1
        assert main(["resume", "b", "--state-dir", str(tmp_path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "budget_exceeded" and len(replay.requests) == 1
    assert load(tmp_path, "b").config["strict_margin"] == 1.1


def test_a_step_line_after_streamed_text_starts_on_a_line_of_its_own(capsys):
    """--stream: the answer's text has no newline of its own; the step line printed after it (and the
    summary) must not be glued to it (with --json both go to stderr, as on a terminal)."""
    with ReplayServer.of("llamacpp") as replay:
        assert main(["run", "--base-url", replay.base_url, "--model", "qwen2.5-0.5b-instruct", "--stream",
                     "--json"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert "> " + ANSWER in lines and any(line.startswith("   step 3:") for line in lines), err
    assert json.loads(out)["status"] == "completed"


# -- captured, not written: llama-cpp-python's server on the local model (section 12) --------------------------
CAPTURED = "llama-cpp-python"


def _without_ids(messages: list[dict]) -> list[dict]:
    """Tool-call ids are new on every request the server answers: the rest must be the same."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k != "tool_call_id"}
        if m.get("tool_calls"):
            m["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in m["tool_calls"]]
        out.append(m)
    return out


def test_the_captured_fixture_says_it_was_captured():
    f = fixture(CAPTURED)
    assert f["about"].startswith("CAPTURED, not written from documentation")
    assert f["captured"]["llama_cpp_python"] == "0.3.36" and f["captured"]["chat_format"] == "harness-chatml"
    assert len(f["requests"]) == len(f["replies"]) == len(f["stream"]) == f["captured"]["run"]["turns"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_captured_run_on_llama_cpp_python_replays_as_it_ran(stream, tmp_path):
    """The harness, given the replies the real server gave, makes the same run and sends, turn by turn,
    the requests the real server received (streamed: the same but for the tool-call ids)."""
    f = fixture(CAPTURED)
    seen = []
    with ReplayServer(f["replies"], f["stream"]) as replay:
        state, events = drive(tmp_path, replay.base_url, f["model"], stream=stream, on_text=seen.append,
                              max_turns=f["captured"]["max_turns"])
        sent = replay.requests
    ran = f["captured"]["run"]
    assert (state.status, state.turns, state.tool_runs) == (ran["status"], ran["turns"], ran["tool_runs"])
    assert len(sent) == len(f["requests"])
    for got, real in zip(sent, f["requests"]):
        assert got["tools"] == real["tools"] and got["tool_choice"] == real["tool_choice"] == "auto"
        assert (_without_ids(got["messages"]) if stream else got["messages"]) == \
            (_without_ids(real["messages"]) if stream else real["messages"])
    # the server's own counts, streamed or not: a last chunk carries the usage
    assert [t["prompt_tokens"] for t in state.per_turn] == [r["usage"]["prompt_tokens"] for r in f["replies"]]
    assert not any(t.get("estimated") for t in state.per_turn)


def test_the_servers_streamed_replies_are_its_replies():
    """Greedy decoding: each streamed reply, put back together, is the reply it gave unstreamed."""
    from harness_lib.client import ModelClient
    f = fixture(CAPTURED)
    cases = [(f["requests"], f["replies"], f["stream"]),
             ([f["no_tools"]["request"]], [f["no_tools"]["reply"]], [f["no_tools"]["stream"]])]
    for requests, replies, streams in cases:
        with ReplayServer(replies, streams) as replay:
            client = ModelClient(replay.base_url, stream=True, max_retries=0)
            for body, reply in zip(requests, replies):
                got = asyncio.run(client.complete(body["model"], body["messages"], body.get("tools")))
                want = reply["choices"][0]
                assert got["choices"][0]["finish_reason"] == want["finish_reason"]
                assert got["usage"] == reply["usage"]
                assert _without_ids([got["choices"][0]["message"]]) == _without_ids([want["message"]])
    assert f["no_tools"]["reply"]["choices"][0]["message"]["content"]   # without tools: an answer in words


def test_a_server_that_cannot_stream_tool_calls_is_named_in_one_line(tmp_path):
    """llama-cpp-python's own chatml-function-calling, asked to stream with tools, answers 200 and a body with no
    event (captured): the run fails saying so, not "the stream ended without a reply"."""
    builtin = fixture(CAPTURED)["builtin_stream_with_tools"]
    assert builtin["status"] == 200 and builtin["content_type"].startswith("text/event-stream")
    assert "data:" not in builtin["body"]   # nothing, or keep-alive comments (": ping") while it fails
    with ReplayServer([], None).then({"sse_raw": builtin["body"].encode()}) as replay:
        state, _ = drive(tmp_path, replay.base_url, stream=True)
    assert state.status == "failed" and state.turns == 0
    assert "empty stream (HTTP 200, no event)" in state.error and "run without --stream" in state.error
    assert "\n" not in state.error
