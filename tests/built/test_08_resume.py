"""Notebook 08's save, load, pending and loop (what is owed first, the model only when nothing is), as the notebook
writes them, beside ``harness_lib``'s ``state.save`` / ``load`` / ``pending`` and ``run`` with a ``state_dir``:
uninterrupted, and killed at every step and resumed from disk.

A kill lands at each model call (the call never returns: the run dies waiting for that turn) and at each tool run
(the tool dies as it starts: its call is owed), on both sides at once; each side is then loaded from its own folder
and finished. Both must finish as the uninterrupted run does (status, turns, tool runs, tokens, dollars, transcript,
answer), have on disk the same run at the kill (turns, tokens, dollars, transcript; the library saved its stop as
``interrupted``, the notebook's loop, killed, left ``running``), and never pay a turn twice (model calls across
both halves = turns) or complete a tool twice (tool completions = tool runs). The notebook's loop has no approval
gate, so the scripts that delete are notebook 07's; ``delegate`` needs notebook 13's tool; ``slow`` runs with a
50 ms scan (the same tool, given to both)."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from built_cells import load

import harness_lib.state as hs
from harness_lib.loop import Options, run
from harness_lib.pricing import CHAPTER_PRICES
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

FAST_SCAN = {"seconds": 0.05, "every": 400}
SCRIPTS = {"plan": (20, 3, 2), "runaway": (4, 4, 3), "recover": (20, 4, 3), "direct": (20, 2, 1),
           "repeat": (20, 3, 2), "forbidden": (4, 4, 3), "slow": (20, 2, 1), "answer": (20, 1, 0)}  # cap, turns, runs
FAST = ("plan", "recover")  # all their kills in `make check` (the chapter's run; a tool that fails); the rest: slow
KILLS = [pytest.param(script, where, n, marks=() if script in FAST else pytest.mark.slow)
         for script, (_, turns, runs) in SCRIPTS.items()
         for where, count in (("model call", turns), ("tool run", runs)) for n in range(1, count + 1)]


@pytest.fixture(scope="module")
def built():
    return load("08-resume")


class Killer:
    """Counts the model calls and tool completions of one side, and kills its run at one of them."""

    def __init__(self, url, where=None, n=None):
        self.url, self.where, self.n = url, where, n
        self.calls = self.tools_started = self.completed = 0

    def model_call(self):
        self.calls += 1
        if (self.where, self.n) == ("model call", self.calls):
            self.where = None  # once: the resumed half lives
            raise asyncio.CancelledError("killed while waiting for the model")

    async def complete(self, model, messages, tools=None, **extra):  # the library's seam: a ChatModel
        self.model_call()
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(f"{self.url}/chat/completions",
                                       json={"model": model, "messages": messages, "tools": tools})
            return response.json()

    def tools(self, workspace):
        def watch(tool):
            async def run_it(args, ctx):
                self.tools_started += 1
                if (self.where, self.n) == ("tool run", self.tools_started):
                    self.where = None
                    raise asyncio.CancelledError("killed as the tool started")
                try:
                    return await tool.run(args, ctx)
                finally:
                    self.completed += 1  # returned or failed: it ran
            return dataclasses.replace(tool, run=run_it)
        return [watch(t) for t in workspace.tools(**FAST_SCAN)]


def mine_with(built, monkeypatch, killer):
    real = built["call_model"]

    async def call_model(url, model, messages, tools):
        killer.model_call()
        return await real(url, model, messages, tools)
    monkeypatch.setitem(built, "call_model", call_model)  # the name the notebook's loop looks up


def new_runs(built, script):
    """The same new run, as the notebook's loop takes it and as the library's does."""
    return built["new_state"]("r", script, TASK), hs.new_run(SYSTEM_PROMPT, TASK, script, run_id="r")


def reference(url, script):
    return asyncio.run(run(hs.new_run(SYSTEM_PROMPT, TASK, script), Workspace.copy_of().tools(**FAST_SCAN),
                           Options(base_url=url, max_turns=SCRIPTS[script][0])))


def same_run(mine, state, messages=True):
    assert (mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == \
        (state.turns, state.tool_runs, state.prompt_tokens, state.completion_tokens)
    assert mine["cost_usd"] == pytest.approx(state.own_cost_usd, abs=1e-12)
    assert mine["cost_usd"] == pytest.approx(CHAPTER_PRICES.cost(mine["in"], mine["out"]), abs=1e-12)
    assert not messages or mine["messages"] == state.messages


@pytest.mark.parametrize("script", SCRIPTS)
def test_uninterrupted_the_notebooks_loop_and_the_library_agree_and_save_what_they_return(
        built, url, monkeypatch, tmp_path, script):
    cap = SCRIPTS[script][0]
    mine_k, lib_k = Killer(url), Killer(url)
    mine_with(built, monkeypatch, mine_k)
    mine_new, lib_new = new_runs(built, script)
    mine = asyncio.run(built["agent_loop"](url, mine_new, mine_k.tools(Workspace.copy_of()), tmp_path, max_turns=cap))
    state = asyncio.run(run(lib_new, lib_k.tools(Workspace.copy_of()),
                            Options(client=lib_k, max_turns=cap, state_dir=tmp_path / "lib")))
    same_run(mine, state)
    assert (mine["status"], mine["answer"]) == (state.status, state.output or "")
    assert built["load"](tmp_path, "r") == mine and hs.load(tmp_path / "lib", "r").to_dict() == state.to_dict()
    assert (mine_k.calls, lib_k.calls, mine_k.completed, lib_k.completed) == \
        (state.turns, state.turns, state.tool_runs, state.tool_runs)


@pytest.mark.parametrize("script, where, n", KILLS)
def test_killed_anywhere_and_resumed_both_finish_as_the_uninterrupted_run(built, url, monkeypatch, tmp_path,
                                                                          script, where, n):
    cap = SCRIPTS[script][0]
    mine_k, lib_k = Killer(url, where, n), Killer(url, where, n)
    mine_with(built, monkeypatch, mine_k)
    mine_tools, lib_tools = mine_k.tools(Workspace.copy_of()), lib_k.tools(Workspace.copy_of())
    options = Options(client=lib_k, max_turns=cap, state_dir=tmp_path / "lib")
    mine_new, lib_new = new_runs(built, script)
    with pytest.raises(asyncio.CancelledError):  # the notebook's loop does not catch it: it dies, as a process would
        asyncio.run(built["agent_loop"](url, mine_new, mine_tools, tmp_path, max_turns=cap))
    stopped = asyncio.run(run(lib_new, lib_tools, options))
    assert stopped.status == "interrupted" and stopped.interruption["type"] == "cancelled"

    mine_disk, lib_disk = built["load"](tmp_path, "r"), hs.load(tmp_path / "lib", "r")
    same_run(mine_disk, lib_disk)
    assert mine_disk["status"] == "running" and lib_disk.status == "interrupted"
    assert [c["id"] for c in built["pending"](mine_disk)] == [c["id"] for c in hs.pending(lib_disk)]
    assert bool(hs.pending(lib_disk)) == (where == "tool run")  # a tool killed as it starts leaves its call owed

    mine = asyncio.run(built["agent_loop"](url, mine_disk, mine_tools, tmp_path, max_turns=cap))
    state = asyncio.run(run(lib_disk, lib_tools, options))
    ref = reference(url, script)
    assert (mine["status"], mine["answer"]) == (state.status, state.output or "") == (ref.status, ref.output or "")
    same_run(mine, state)
    same_run(mine, ref)
    for killer, finished in ((mine_k, mine["turns"]), (lib_k, state.turns)):
        assert killer.calls - (where == "model call") == finished  # the killed call was never answered, nor paid
        assert killer.completed == ref.tool_runs                   # each tool completed once, across both halves


def test_the_notebooks_loop_stopped_at_the_chapters_moment_gives_its_figures(built, url, monkeypatch, tmp_path):
    killer = Killer(url, "model call", 3)  # two tool results on disk, waiting for turn 3
    mine_with(built, monkeypatch, killer)
    tools = killer.tools(Workspace.copy_of())
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(built["agent_loop"](url, built["new_state"]("r", "plan", TASK), tools, tmp_path))
    restored = built["load"](tmp_path, "r")
    assert (restored["turns"], f'{restored["cost_usd"]:.6f}', len(restored["messages"]), restored["status"]) == \
        (2, "0.001570", 6, "running")
    finished = asyncio.run(built["agent_loop"](url, restored, tools, tmp_path))
    assert (finished["turns"], f'{finished["cost_usd"]:.6f}', finished["status"]) == (3, "0.002470", "completed")
    assert killer.completed == 2 and killer.calls == 4  # list_files and read_file once; turn 3 asked twice, paid once


def test_stop_when_stops_the_notebooks_run_at_its_moment_or_says_it_ended_first(built, url, tmp_path):
    """The notebook stops its run with s08.stop_when once two tool results are on disk, against a provider that holds
    each request: the run is then waiting for turn 3. A moment that never comes lets the run end, and says so."""
    from harness_lib.chapter import s08_resume as s08
    from harness_lib.scripted import ScriptedProvider

    def moment():
        return s08.results_on_disk(tmp_path / "r.json") >= 2

    with ScriptedProvider(latency_ms=s08.HOLD_MS) as held:
        result, stopped = asyncio.run(s08.stop_when(
            built["agent_loop"](held.base_url, built["new_state"]("r", "plan", TASK), Workspace.copy_of().tools(),
                                tmp_path), moment))
    on_disk = built["load"](tmp_path, "r")
    assert (result, stopped) == (None, True) and (on_disk["turns"], len(on_disk["messages"])) == (2, 6)
    result, stopped = asyncio.run(s08.stop_when(
        built["agent_loop"](url, built["new_state"]("q", "plan", TASK), Workspace.copy_of().tools(), tmp_path),
        lambda: False))
    assert stopped is False and (result["status"], result["turns"]) == ("completed", 3)
