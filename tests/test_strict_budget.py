"""The strict budget (issue 12, part 1): a budget that is never exceeded, by any amount, and its hostile
cases: a budget below the first prompt, no money left for one output token, a reply cut at the max_tokens
the budget bought, an unknown price, a NaN margin, a provider that ignores max_tokens, a server whose prompt
count is above the local one."""

import asyncio
import json
import math
import random
import subprocess
import sys

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_lib import budget, tokens
from harness_lib.chapter import plots
from harness_lib.chapter import s03_budget as s03
from harness_lib.chapter.common import continue_run, scenario
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES, MAX_PRICE, SMALLEST_PRICE, UNPRICED, Pricing
from harness_lib.reply import Turn
from harness_lib.scripted.scripts import TIMEOUT_ANSWER, asks, call, text, turn_index
from harness_lib.scripted.server import cut_to
from harness_lib.state import load, new_run
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def go(coro):
    return asyncio.run(coro)


def events(out, kind):
    return [e for e in out.trace.events if e["type"] == kind]


class Model:
    """An in-process model for the hostile cases. ``reply(turn)`` gives the message it wants to send; it
    honours max_tokens the scripted provider's way unless ``honour`` is False; ``bill`` may rewrite the
    usage it reports. Every request's extra fields are kept in ``sent``."""

    def __init__(self, reply, honour=True, bill=None, bill_uncut=False):
        self.reply, self.honour, self.bill, self.bill_uncut, self.sent = reply, honour, bill, bill_uncut, []

    async def complete(self, model, messages, tools=None, **extra):
        self.sent.append(extra)
        whole = message = self.reply(turn_index(messages))
        cut = False
        if self.honour and extra.get("max_tokens") is not None:
            message, cut = cut_to(message, extra["max_tokens"])
        finish = "length" if cut else ("tool_calls" if message.get("tool_calls") else "stop")
        usage = tokens.usage(messages, tools, whole if self.bill_uncut else message)
        if self.bill:
            usage = self.bill(usage)
        return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


async def drive(client, budget_usd, *, strict=True, task=TASK, **options):
    ws = Workspace.copy_of()
    trace = Trace(timestamps=False)
    state = await run(new_run(SYSTEM_PROMPT, task, "fake"), ws.tools(),
                      Options(client=client, trace=trace, max_budget_usd=budget_usd, strict_budget=strict, **options))
    return state, trace.events


def runaway_reply(t):
    return asks(call(f"c{t}", "list_files", {}))


# -- the chapter's budgets and a sweep between ----------------------------------------------------------------
@pytest.mark.slow
def test_strict_budget_is_never_crossed_over_the_sweep(url):
    table, m = go(s03.strict_budgets(url))
    strict, chapter = table.xs("strict", level="check"), table.xs("chapter", level="check")
    assert len(strict) == m["strict.budgets"] >= 25
    # the strict check: never above the budget, by any amount, at any budget of the sweep
    assert (strict["spent_usd"] <= strict.index).all() and m["strict.over_budget_runs"] == 0
    assert (strict["status"] == "budget_exceeded").all()
    # the chapter's check, beside it, is unchanged and over at every budget (by at most one turn)
    assert m["chapter.over_budget_runs"] == len(chapter)
    assert (m["chapter.0.01.spent"], m["chapter.0.01.turns"]) == (0.01078, 9)  # the chapter's figure
    assert (m["chapter.0.005.turns"], m["chapter.0.05.turns"]) == (6, 24)
    # the price of never crossing: at most one turn fewer
    assert m["strict.turns_fewer_by_at_most"] == 1
    assert (m["strict.0.01.spent"], m["strict.0.01.turns"]) == (0.00907, 8)
    assert set(strict["ended by"]) == {"refused: prompt too dear", "reply cut at max_tokens"}
    assert plots.png(s03.strict_budget_plot(table))[:8] == b"\x89PNG\r\n\x1a\n"


def test_off_by_default_the_chapters_budget_is_unchanged(url):
    s = go(scenario(url, "runaway", max_budget_usd=0.010)).state
    assert (s.status, s.turns, s.own_cost_usd, s.interruption) == \
        ("budget_exceeded", 9, 0.01078, {"type": "max_budget"})


def test_every_turn_is_billed_within_the_max_tokens_it_was_sent(url):
    out = go(scenario(url, "runaway", max_budget_usd=0.0106, strict_budget=True))
    checks, turns = events(out, "strict_budget"), events(out, "turn")
    assert len(turns) == out.state.turns == 9 and len(checks) == 9
    for check, turn in zip(checks, turns):
        assert check["turn"] == turn["turn"] and check["promptCounted"] == turn["prompt_tokens"]  # exact here
        assert turn["completion_tokens"] <= check["maxTokens"]
    assert turns[-1]["finish"] == "length" and out.state.total_cost_usd <= 0.0106
    assert budget.margin_needed(out.trace.events) == 0.0  # the local count is the scripted provider's


# -- the scripted provider honours max_tokens, and bills what it sent ---------------------------------------------
@pytest.mark.parametrize("model,limit", [("plan", 10), ("plan", 22), ("answer", 5), ("answer", 1)])
def test_scripted_provider_bills_the_cut_reply_as_sent(url, model, limit):
    body = {"model": model, "messages": [{"role": "user", "content": TASK}], "max_tokens": limit}
    data = httpx.post(url + "/chat/completions", json=body, timeout=10).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == tokens.completion_tokens(choice["message"]) <= limit


# -- hostile cases --------------------------------------------------------------------------------------------
def test_budget_below_the_first_prompt_is_refused_before_paying(url):
    out = go(scenario(url, "plan", max_budget_usd=0.0001, strict_budget=True))
    s = out.state
    assert (s.status, s.turns, s.own_cost_usd) == ("budget_exceeded", 0, 0)
    assert s.interruption["type"] == "max_budget" and s.interruption["strict"]
    assert s.interruption["reason"].startswith("refused before paying: the prompt alone (204 tokens")
    assert not events(out, "turn") and events(out, "run_stopped")[-1]["status"] == "budget_exceeded"
    again = go(continue_run(url, out, max_budget_usd=0.0001, strict_budget=True))  # resumed as it was: refused again
    assert (again.state.status, again.state.turns, again.state.own_cost_usd) == ("budget_exceeded", 0, 0)


def test_no_money_for_one_output_token_is_refused(url):
    prompt = CHAPTER_PRICES.cost(204, 0)  # the plan's first request
    s = go(scenario(url, "plan", max_budget_usd=prompt + 0.000011, strict_budget=True)).state  # < $0.000012
    assert (s.status, s.turns, s.own_cost_usd) == ("budget_exceeded", 0, 0)
    assert "buys no output token" in s.interruption["reason"]
    s = go(scenario(url, "plan", max_budget_usd=prompt + 0.000012, strict_budget=True)).state  # one token
    assert (s.status, s.turns) == ("budget_exceeded", 1) and s.own_cost_usd <= prompt + 0.000012
    assert s.per_turn[0]["completion_tokens"] == 1 and s.per_turn[0]["cut"] == "max_tokens"


def test_a_cut_reply_is_a_budget_stop_not_an_answer_and_resumes(url, tmp_path):
    out = go(scenario(url, "plan", max_budget_usd=0.0024, strict_budget=True, state_dir=tmp_path))
    s = out.state
    assert (s.status, s.turns, s.error, s.output) == ("budget_exceeded", 3, None, None)
    assert s.own_cost_usd <= 0.0024 and s.per_turn[-1]["cut"] == "max_tokens"     # paid and recorded
    assert "cut at the max_tokens the budget bought" in s.interruption["reason"]
    cut = s.interruption["cutReply"]["content"]
    assert TIMEOUT_ANSWER.startswith(cut) and cut != TIMEOUT_ANSWER
    saved = load(tmp_path, s.run_id)  # on disk too, the transcript ends with the tool's result, not the cut text
    assert saved.messages[-1]["role"] == "tool" and saved.status == "budget_exceeded"
    assert events(out, "turn")[-1]["finish"] == "length"
    again = go(continue_run(url, out, max_budget_usd=0.004, strict_budget=True)).state  # more money: ask again
    assert (again.status, again.output, again.turns) == ("completed", TIMEOUT_ANSWER, 4)
    assert again.total_cost_usd <= 0.004


def test_without_the_strict_budget_a_cut_is_still_a_failure():
    model = Model(lambda t: text(TIMEOUT_ANSWER), honour=False)
    model.reply = lambda t: {"role": "assistant", "content": "cut short"}

    class Cut(Model):
        async def complete(self, *a, **k):
            data = await super().complete(*a, **k)
            data["choices"][0]["finish_reason"] = "length"
            return data
    s, _ = go(drive(Cut(model.reply), None, strict=False))
    assert s.status == "failed" and "length limit" in s.error


@pytest.mark.parametrize("margin", [math.nan, math.inf, -0.1, True, "0.1", None])
def test_a_margin_that_is_not_a_number_of_at_least_0_is_refused(margin):
    with pytest.raises(ValueError, match="strict_margin"):
        Options(base_url="http://x", max_budget_usd=0.01, strict_budget=True, strict_margin=margin)


def test_a_strict_budget_needs_a_price_and_a_budget():
    with pytest.raises(ValueError, match="price"):
        Options(base_url="http://x", max_budget_usd=0.01, strict_budget=True, pricing=UNPRICED)
    with pytest.raises(ValueError, match="needs a budget"):
        Options(base_url="http://x", strict_budget=True)
    with pytest.raises(ValueError, match="True or False"):
        Options(base_url="http://x", max_budget_usd=0.01, strict_budget="yes")
    Options(base_url="http://x", strict_margin=0.5)  # a margin alone changes nothing: no strict budget


def test_a_provider_that_ignores_max_tokens_is_caught():
    long = " ".join(["word"] * 400)  # 400 tokens: $0.0048 of output
    model = Model(lambda t: text(long), honour=False)
    s, ev = go(drive(model, 0.003))
    assert model.sent[0]["max_tokens"] < 400
    assert s.status == "failed" and s.turns == 1
    assert "did not honour max_tokens" in s.error and f"max_tokens={model.sent[0]['max_tokens']}" in s.error
    assert "over it" in s.error and s.total_cost_usd > 0.003  # noticed, paid, said: never silent
    assert ev[-1]["type"] == "run_stopped" and ev[-1]["status"] == "failed"


def test_a_provider_that_cuts_but_bills_past_max_tokens_is_caught_too():
    model = Model(runaway_reply, bill_uncut=True)  # cuts the reply, bills all it generated
    s, _ = go(drive(model, 0.0106))
    assert s.status == "failed" and "did not honour max_tokens" in s.error and s.turns == 9  # the cut turn
    assert f"max_tokens={model.sent[-1]['max_tokens']} and billed 23 completion tokens" in s.error
    assert s.total_cost_usd == 0.01078 and "over it" in s.error  # what the cap was there to prevent


def test_a_server_counting_more_prompt_than_the_local_count_needs_a_margin():
    def doubled(u):
        return {**u, "prompt_tokens": 2 * u["prompt_tokens"]}
    s, ev = go(drive(Model(runaway_reply, bill=doubled), 0.01))
    assert s.status == "failed" and s.total_cost_usd > 0.01
    assert "estimate was short" in s.error and "raise strict_margin to at least 1.000" in s.error
    assert budget.margin_needed(ev) == 1.0
    s, ev = go(drive(Model(runaway_reply, bill=doubled), 0.01, strict_margin=1.0))
    assert s.status == "budget_exceeded" and s.total_cost_usd <= 0.01 and s.turns >= 5


def test_free_output_sends_no_max_tokens():
    model = Model(runaway_reply)
    s, _ = go(drive(model, 0.005, pricing=Pricing.per_million(2.0, 0.0)))
    assert s.status == "budget_exceeded" and s.total_cost_usd <= 0.005
    assert model.sent and all("max_tokens" not in extra for extra in model.sent)


@pytest.mark.parametrize("usd_out", [SMALLEST_PRICE / 1e6, 1e-9, 12e-6, 1e-3, MAX_PRICE / 1e6])
def test_any_output_price_gives_a_max_tokens_that_fits(usd_out):
    """From the least price a token may have above 0 to the most (pricing.py: a price outside is refused)."""
    model = Model(runaway_reply)
    s, _ = go(drive(model, 0.005, pricing=Pricing(2e-6, usd_out), max_turns=30))
    assert s.total_cost_usd <= 0.005 and s.status in ("budget_exceeded", "max_turns_exceeded")
    for extra, turn in zip(model.sent, s.per_turn):
        assert turn["completion_tokens"] <= extra["max_tokens"]


def test_off_the_request_carries_no_max_tokens():
    model = Model(runaway_reply)
    s, _ = go(drive(model, 0.005, strict=False))
    assert s.total_cost_usd > 0.005 and all("max_tokens" not in extra for extra in model.sent)


# -- over random budgets and random scripts -----------------------------------------------------------------
WORDS = ["the", "worker", "timed", "out", "errors.log", "日本語", "🎉", "30000", "ms", "é", "\n", "{", "}"]


def random_model(seed: int, answer_at: int | None):
    """Replies of random length (text beside the calls, a long final answer), a pure function of the turn."""
    def reply(t):
        r = random.Random(f"{seed}:{t}")
        note = " ".join(r.choice(WORDS) for _ in range(r.randint(0, 60)))
        if answer_at is not None and t >= answer_at:
            return text(note + " done.")
        message = asks(*[call(f"c{t}_{i}", r.choice(["list_files", "read_file"]),
                              {} if i % 2 == 0 else {"path": "errors.log"}) for i in range(r.randint(1, 3))])
        message["content"] = note or None
        return message
    return reply


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_usd=st.floats(min_value=1e-6, max_value=0.03, allow_nan=False),
       seed=st.integers(0, 10 ** 6), answer_at=st.none() | st.integers(0, 12),
       margin=st.sampled_from([0.0, 0.0, 0.1, 0.5]))
def test_random_budgets_and_scripts_never_cross(budget_usd, seed, answer_at, margin):
    s, ev = go(drive(Model(random_model(seed, answer_at)), budget_usd, strict_margin=margin, max_turns=40))
    assert s.total_cost_usd <= budget_usd
    assert s.status in ("completed", "budget_exceeded", "max_turns_exceeded"), s.error
    if s.status == "completed":
        assert s.output and s.output.endswith("done.")  # a cut reply is never an answer
    assert ev[-1]["type"] == "run_stopped"


# -- the command line ---------------------------------------------------------------------------------------
def cli(*args):
    return subprocess.run([sys.executable, "-m", "harness_lib", *args], capture_output=True, text=True, timeout=120)


def test_cli_strict_budget():
    r = cli("run", "runaway", "--budget", "0.01", "--strict-budget", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["status"], out["turns"], out["cost_usd"]) == ("budget_exceeded", 8, 0.00907)
    assert out["interruption"]["strict"] and out["interruption"]["reason"].startswith("refused before paying")
    r = cli("run", "runaway", "--strict-budget")
    assert r.returncode == 2 and "needs a budget" in r.stderr and "Traceback" not in r.stderr


# -- a ceiling on max_tokens: servers refuse one above the model's limit ------------------------------------------
def test_the_ceiling_caps_max_tokens_and_a_cut_there_is_not_a_budget_stop():
    model = Model(runaway_reply)
    s, _ = go(drive(model, 1.0, strict_max_tokens=5))  # $1 buys ~83,000 output tokens: more than many servers allow
    assert model.sent == [{"max_tokens": 5}]
    assert s.status == "failed" and "length limit" in s.error  # the reader's ceiling, not the money: as any cut
    model = Model(runaway_reply)
    s, _ = go(drive(model, 0.003, strict_max_tokens=100))  # $0.003 buys 216 at first
    assert s.status == "budget_exceeded" and s.total_cost_usd <= 0.003
    assert model.sent[0]["max_tokens"] == 100 and model.sent[-1]["max_tokens"] < 100  # the money binds at the end


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_a_ceiling_that_is_not_a_whole_number_of_at_least_1_is_refused(bad):
    with pytest.raises(ValueError, match="strict_max_tokens"):
        Options(base_url="http://x", max_budget_usd=0.01, strict_budget=True, strict_max_tokens=bad)


# -- another tokenizer: the local count is an estimate, and the margin is what makes it hold ---------------------
def test_tokenizer_margin_measured_against_cl100k(url):
    table, samples, m = go(s03.tokenizer_margin(url))
    assert m["margin.requests"] == len(table) == 49 and m["margin.scripted_needed"] == 0.0  # exact here
    assert (table["billed"] == table["o200k"]).all()
    assert 0.9 < m["margin.cl100k_min_ratio"] <= m["margin.cl100k_max_ratio"] < 1  # the chapter's requests
    assert m["margin.cl100k_needed"] == 0.0
    assert samples.loc["japanese", "ratio"] > 1.3 and samples.loc["english", "ratio"] == 1.0


class CL100KServer(Model):
    """A server whose tokenizer is cl100k_base: it bills the prompt its own way (same convention)."""
    enc = None

    async def complete(self, model, messages, tools=None, **extra):
        data = await super().complete(model, messages, tools, **extra)
        CL100KServer.enc = CL100KServer.enc or s03.cl100k()
        data["usage"]["prompt_tokens"] = len(self.enc.encode_ordinary(tokens.compact(messages))) + \
            len(self.enc.encode_ordinary(tokens.compact(tools)))
        return data


JAPANESE_TASK = ("どのファイルにタイムアウトが記載されていますか？"
                 "ログを調べて、ワーカーの番号と待ち時間を日本語で簡潔に答えてください。") * 8


def test_another_tokenizer_needs_the_margin_it_measures():
    s, ev = go(drive(CL100KServer(runaway_reply), 0.01))  # English requests: cl100k counts fewer, no margin needed
    assert s.status == "budget_exceeded" and s.total_cost_usd <= 0.01
    assert budget.margin_needed(ev) == 0.0
    budgets = [round(0.005 + 0.0005 * i, 6) for i in range(30)]
    runs = [go(drive(CL100KServer(runaway_reply), b, task=JAPANESE_TASK)) for b in budgets]  # cl100k counts more
    over = [(b, s) for b, (s, _) in zip(budgets, runs) if s.total_cost_usd > b]
    assert over and all(s.status == "failed" and "estimate was short" in s.error for _, s in over)
    needed = max(budget.margin_needed(ev) for _, ev in runs)
    assert 0.1 < needed < 0.5
    for b in budgets:  # the margin the trace measured makes the guarantee hold again, at every budget
        s, _ = go(drive(CL100KServer(runaway_reply), b, task=JAPANESE_TASK, strict_margin=needed))
        assert s.status == "budget_exceeded" and s.total_cost_usd <= b


# -- found by make mutate (docs/mutation.md): each rule of budget.py at its edge, called directly -------------
FREE_OUTPUT = Pricing.per_million(2.0, 0)


def strict(budget_usd, pricing=CHAPTER_PRICES, **options):
    return Options(client=object(), max_budget_usd=budget_usd, strict_budget=True, pricing=pricing, **options)


def allowed(opts, state=None):
    trace = Trace(timestamps=False)
    state = state or new_run(SYSTEM_PROMPT, TASK, "fake")
    hit = budget.allow(state, [], opts, trace)
    [line] = trace.events
    return hit, line, state


def counts(state):
    counted = tokens.prompt_tokens(state.messages, [])
    return counted, math.ceil(counted * (1 + Options(client=object()).strict_margin))


def test_the_strict_budget_counts_the_childrens_spend():
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    alone = budget.spent_after(s, CHAPTER_PRICES, 100, 10)
    s.subruns = [{"costUsd": 0.002}]
    assert budget.spent_after(s, CHAPTER_PRICES, 100, 10) == pytest.approx(alone + 0.002, rel=1e-12)


def test_the_output_a_budget_buys_is_the_most_that_fits():
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    s.own_cost_usd = 0.000684
    for budget_usd in [0.000897 + k * 0.0000013 for k in range(40)] + [0.0106, 0.5]:
        most = budget._most_output(s, CHAPTER_PRICES, 100, budget_usd)
        assert most > 0 and budget.spent_after(s, CHAPTER_PRICES, 100, most) <= budget_usd < \
            budget.spent_after(s, CHAPTER_PRICES, 100, most + 1), budget_usd
    # ~1e18 tokens at the smallest price: the guess from floats is past the edge, and the bisection finds it
    # (found by trying 3,000 prices and budgets against the bisection stopping one step early)
    tiny, s.own_cost_usd, budget_usd = Pricing.per_million(SMALLEST_PRICE, SMALLEST_PRICE), 1e-9, 1.3275492349074771
    most = budget._most_output(s, tiny, 100, budget_usd)
    assert budget.spent_after(s, tiny, 100, most) <= budget_usd < budget.spent_after(s, tiny, 100, most + 1)


def test_an_allowance_says_what_it_assumed_and_the_trace_says_it_too():
    hit, line, s = allowed(strict(0.01, strict_max_tokens=40))
    counted, prompt = counts(s)
    most = budget._most_output(s, CHAPTER_PRICES, prompt, 0.01)
    assert hit == budget.Allowance(counted, prompt, 40, 0.01, most)
    assert line == {"runId": s.run_id, "type": "strict_budget", "turn": 1, "promptCounted": counted,
                    "promptAssumed": prompt, "leftUsd": 0.01, "maxTokens": 40}


def test_free_output_needs_no_bound_but_keeps_the_readers_ceiling():
    hit, line, s = allowed(strict(0.01, FREE_OUTPUT, strict_max_tokens=40))
    counted, prompt = counts(s)
    assert hit == budget.Allowance(counted, prompt, 40, 0.01) and hit.request() == {"max_tokens": 40}
    assert line["maxTokens"] == 40 and line["leftUsd"] == 0.01


def test_a_prompt_that_costs_exactly_the_money_left_is_sent():
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    _, prompt = counts(s)
    exactly = budget.spent_after(s, FREE_OUTPUT, prompt, 0)
    hit, _, _ = allowed(strict(exactly, FREE_OUTPUT), s)
    assert isinstance(hit, budget.Allowance) and hit.max_tokens is None


def test_a_refusal_says_what_it_refused_and_the_trace_says_refused():
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    s.own_cost_usd = 0.00045
    hit, line, _ = allowed(strict(0.0005), s)
    _, prompt = counts(s)
    assert hit.interruption == {
        "type": "max_budget", "strict": True, "prompt_tokens": prompt,
        "reason": f"refused before paying: the prompt alone ({prompt:,} tokens, "
                  f"${CHAPTER_PRICES.cost(prompt, 0):.6f}) would cross the budget ($0.000050 of the $0.0005 "
                  f"budget left)"}
    assert line == {"runId": s.run_id, "type": "strict_budget", "turn": 1, "promptCounted": counts(s)[0],
                    "promptAssumed": prompt, "leftUsd": 0.00005, "refused": True}
    spent = budget.spent_after(s, CHAPTER_PRICES, prompt, 0)  # the prompt fits, not one output token
    hit, line, _ = allowed(strict(spent), s)
    assert hit.interruption["prompt_tokens"] == prompt and line["refused"] is True
    assert hit.interruption["reason"].startswith(f"refused before paying: after the prompt ({prompt:,} tokens) "
                                                 f"the money left buys no output token ($")


@pytest.mark.parametrize("ceiling", [1, 2])
def test_the_smallest_ceiling_is_one_token(ceiling):
    budget.check_options(True, 0.05, 0.01, CHAPTER_PRICES, ceiling)


@pytest.mark.parametrize("bad", [0, 1.5])
def test_a_ceiling_below_one_token_is_refused_saying_what_it_may_be_and_none_is_no_ceiling(bad):
    """check_options hands the ceiling to check_strict, and the budget as the budget (runs.py gives none)."""
    budget.check_options(True, 0.05, 0.01, CHAPTER_PRICES)
    with pytest.raises(ValueError) as e:
        budget.check_options(True, 0.05, 0.01, CHAPTER_PRICES, bad)
    assert str(e.value) == f"strict_max_tokens must be a whole number of at least 1 (or None), got {bad}"


def test_a_margin_above_ten_is_refused_saying_what_a_margin_is():
    budget.check_options(False, budget.MAX_MARGIN, None, CHAPTER_PRICES)
    with pytest.raises(ValueError) as e:
        budget.check_options(False, 10.5, None, CHAPTER_PRICES)
    assert str(e.value) == ("strict_margin must be a finite number of at least 0 and at most 10 (0.05 = count 5 % "
                            "more prompt tokens than the local tokenizer does), got 10.5")


def settled(completion, finish="stop", prompt=100, own=0.001, budget_usd=0.01, max_tokens=20, bought=20,
            estimated=False, message=None):
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    message = message or {"role": "assistant", "content": "word " * completion}
    s.messages.append(message)
    s.per_turn.append({"turn": 1})
    s.own_cost_usd = own
    turn = budget_turn(message, prompt, completion, finish, estimated)
    return budget.settle(s, turn, budget.Allowance(prompt, prompt, max_tokens, budget_usd, bought),
                         strict(budget_usd)), s


def budget_turn(message, prompt, completion, finish, estimated):
    return Turn(message, prompt, completion, finish, estimated)


def test_a_provider_that_ignores_max_tokens_is_told_whether_the_run_went_over():
    stop, _ = settled(21)
    assert stop.status == "failed" and stop.error == (
        "the provider did not honour max_tokens: it was sent max_tokens=20 and billed 21 completion tokens "
        "($0.001000 spent of the $0.01 budget); the strict budget cannot be kept against this provider")
    stop, _ = settled(21, own=0.02)
    assert "billed 21 completion tokens ($0.020000 spent of the $0.01 budget, over it); the strict" in stop.error


def test_usage_far_below_what_was_sent_fails_the_run_at_its_edge():
    """Billed at half this harness's count and 16 tokens more: another tokenizer's, believed. One token
    fewer, in the prompt and in the reply: wrong, and the run fails saying both."""
    message = {"role": "assistant", "content": "word " * 200}
    received = tokens.completion_tokens(message)
    believed = budget_turn(message, 50, math.ceil((received - 16) / 2), "stop", False)
    assert budget._underbilled(2 * 50 + 16, believed) is None
    turn = budget_turn(message, 50, believed.completion_tokens - 1, "stop", False)
    said = budget._underbilled(2 * 50 + 17, turn)
    assert said == f"50 prompt tokens for 117 counted here and {turn.completion_tokens:,} completion tokens " \
                   f"for {received:,} counted here"
    s = new_run(SYSTEM_PROMPT, TASK, "fake")
    s.messages.append(message)
    s.own_cost_usd = 0.001
    allowance = budget.Allowance(117, 117, None, 0.01)
    stop = budget.settle(s, turn, allowance, strict(0.01))
    assert stop.status == "failed" and stop.error == (
        f"the provider's usage does not count what was sent: it billed {said} ($0.001000 spent of the $0.01 "
        f"budget); a budget kept on such counts is not kept, so the strict budget cannot be kept against this "
        f"provider")
    estimated = budget_turn(message, 50, turn.completion_tokens, "stop", True)  # counted here: nothing to doubt
    assert budget.settle(s, estimated, allowance, strict(0.01)) is None


@pytest.mark.parametrize("completion,hint", [(20, ""), (19, " (fewer than it was sent: if the server has a lower "
                                                          "output limit of its own, more money will not help)")])
def test_a_reply_cut_at_the_tokens_bought_says_whether_the_server_cut_sooner(completion, hint):
    message = {"role": "assistant", "content": "word " * completion}
    stop, s = settled(completion, "length", prompt=tokens.completion_tokens(message), message=message)
    assert stop.interruption["reason"] == (f"the reply was cut at the max_tokens the budget bought ({completion} "
                                           f"of 20 tokens{hint}; $0.001000 spent of the $0.01 budget): paid and "
                                           f"recorded, not an answer")
    assert stop.interruption["cutReply"] == message and s.per_turn[-1]["cut"] == "max_tokens"


def test_the_margin_needed_reads_only_turns_that_were_allowed():
    assert budget.margin_for(0, 10) == 0.0 and budget.margin_needed([]) is None
    events = [{"type": "strict_budget", "turn": 1, "promptCounted": 100, "maxTokens": 5},
              {"type": "turn", "turn": 1, "prompt_tokens": 110},
              {"type": "strict_budget", "turn": 2, "promptCounted": 100, "refused": True},
              {"type": "turn", "turn": 2, "prompt_tokens": 150}]
    assert budget.margin_needed(events) == pytest.approx(0.1)
