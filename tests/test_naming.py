"""One naming style for the records in the state and the trace (issue 11, item 4), and the files saved before it.

The files in ``fixtures/states/saved-by-2ff5ba1/`` were written by the code at commit 2ff5ba1, the last before
the rename, each as that code leaves it (none edited by hand):

* ``old-journal``: a subagent run (in-process, scripted provider) killed by ``HARNESS_CRASH_AT=save:3`` right
  after the save that recorded its child: the child's summary, ``cost_usd`` in it, is in a journal line;
* ``old-unknown``: a write (``send_email``, not idempotent) begun by a process that died, resumed by another
  that recorded its unknown outcome (``unknown_outcome``, in a journal line) and died too;
* ``old-subrun``: ``run delegate --budget 0.0009 --state-dir ...`` (the CLI, with its ledger): stopped at the
  budget once its child had spent, the child's summary in ``subruns`` with ``cost_usd``;
* ``old-cut``: ``run plan --budget 0.0024 --strict-budget --state-dir ...``: the cut reply in
  ``interruption.cut_reply``.

The CLI's two name their state folder in ``meta.workspace`` and the ledger; the folder they were made in is
written ``@STATE_DIR@`` there, and each test puts its own in its place (moving a state folder, in effect).
"""

import asyncio
import json
from pathlib import Path

import pytest

from harness_lib.cli import main
from harness_lib.loop import UNKNOWN_OUTCOME, Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import STATE_VERSION, StateFileError, load, new_run, save
from harness_lib.stops import permanent_error, repeated_failure
from harness_lib.subagent import research_tool
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import Tool, string_params
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

OLD = Path(__file__).parent / "fixtures" / "states" / "saved-by-2ff5ba1"
OLD_KEYS = ("unknown_outcome", "cut_reply", "delay_s", "waited_s")


def place(run_id: str, into: Path) -> Path:
    """The old run's files in ``into``, as if its state folder had been moved there."""
    for f in OLD.glob(f"{run_id}.*"):
        (into / f.name).write_bytes(f.read_bytes().replace(b"@STATE_DIR@", str(into).encode()))
    if "@STATE_DIR@" in (OLD / f"{run_id}.json").read_text():
        Workspace.copy_of(into=into / f"{run_id}.workspace")  # the copy the CLI made for it
    return into


USAGE = {"prompt_tokens", "completion_tokens"}  # the API's own names, kept as the wire spells them


def breaks_the_rule(data: dict) -> set:
    """The snake_case keys in a state file's records that the rule (state.py) does not allow (it allows the token counts
    anywhere, and ``cost_usd`` in a per_turn entry, a usage record)."""
    bad = set()
    for t in data.get("per_turn", []):
        bad |= {k for k in t if "_" in k} - USAGE - {"cost_usd"}
    for r in data.get("tool_log", []) + data.get("subruns", []) + [data.get("interruption") or {}]:
        bad |= {k for k in r if "_" in k} - USAGE
    return bad


def sender(ran: list) -> Tool:
    async def send_email(args, ctx):
        ran.append(args)
        return "sent"
    return Tool("send_email", "Sends.", send_email, string_params("to"))


# -- the rule, on what the harness writes now ------------------------------------------------------------------
def delegate_tools(base_url: str) -> list[Tool]:
    ws = Workspace.copy_of()
    return [research_tool(ws.tools(), base_url), *ws.tools()]


def test_what_the_harness_writes_follows_the_rule(tmp_path):
    """A run with a child, an unknown outcome and a strict cut: no snake_case key in a record or a trace line
    but the API's token counts (and a usage record's cost_usd)."""
    trace = Trace(tmp_path / "t.jsonl", timestamps=False)
    with ScriptedProvider() as p:
        s = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "delegate", run_id="d"), delegate_tools(p.base_url),
                            Options(base_url=p.base_url, state_dir=tmp_path, trace=trace)))
        cut = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan", run_id="c"), Workspace.copy_of().tools(),
                              Options(base_url=p.base_url, state_dir=tmp_path, trace=trace, max_budget_usd=0.0024,
                                      strict_budget=True)))
    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="u")
    state.messages.append(asks(call("c1", "send_email", {"to": "ops"})))
    state.started.append("c1")
    unknown = asyncio.run(run(state, [sender([])], Options(client=FakeModel([]), state_dir=tmp_path, trace=trace)))
    assert (s.status, cut.status, unknown.status) == ("completed", "budget_exceeded", "completed")
    assert s.subruns[0]["costUsd"] > 0 and "cutReply" in cut.interruption and unknown.tool_log[0]["unknownOutcome"]
    for run_id in ("d", "c", "u"):
        data = json.loads((tmp_path / f"{run_id}.json").read_text())
        assert not breaks_the_rule(data), run_id
        assert all(set(t) <= {"prompt_tokens", "completion_tokens", "cost_usd", "estimated", "cut"}
                   for t in data["per_turn"])
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert {"turn", "tool_result", "strict_budget", "run_stopped"} <= {e["type"] for e in lines}
    for e in lines:
        assert {k for k in e if "_" in k} <= {"prompt_tokens", "completion_tokens", "total_tokens"}, e
    assert any(e.get("unknownOutcome") for e in lines if e["type"] == "tool_result")


# -- files saved before the rename -----------------------------------------------------------------------------
def test_a_journal_line_with_the_old_keys_replays(tmp_path):
    """The child's summary, in a journal line as ``cost_usd``, is read as ``costUsd``: its spend counts in the
    total, and the run resumes to the same total as one never interrupted. The first save writes the new key."""
    place("old-journal", tmp_path)
    s = load(tmp_path, "old-journal")
    assert (s.status, s.turns, s.version) == ("running", 1, STATE_VERSION)
    assert s.subruns == [{"runId": "old-journal.c1", "status": "completed", "turns": 3, "costUsd": 0.002476,
                          "messages": 7}]
    assert s.total_cost_usd == pytest.approx(0.000878 + 0.002476, abs=1e-12)
    with ScriptedProvider() as p:
        out = asyncio.run(run(s, delegate_tools(p.base_url), Options(base_url=p.base_url, state_dir=tmp_path)))
        whole = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "delegate"), delegate_tools(p.base_url),
                                Options(base_url=p.base_url)))
    assert (out.status, out.turns, out.output) == ("completed", whole.turns, whole.output)
    assert out.total_cost_usd == pytest.approx(whole.total_cost_usd, abs=1e-12)
    assert out.total_cost_usd > out.own_cost_usd  # the child's spend, read from the old key, counts
    saved = (tmp_path / "old-journal.json").read_text()
    assert '"costUsd":0.002476' in saved and not (tmp_path / "old-journal.journal").exists()
    assert json.loads(saved)["version"] == STATE_VERSION and not breaks_the_rule(json.loads(saved))


def test_an_old_unknown_outcome_is_still_not_a_failure(tmp_path):
    """``unknown_outcome`` in a journal line is read as ``unknownOutcome``: the stop conditions that end a run on
    a tool's failures still pass it over (read as an ordinary failure, ``repeated_failure(1)`` would end the run)."""
    place("old-unknown", tmp_path)
    s = load(tmp_path, "old-unknown")
    assert s.tool_log[0]["unknownOutcome"] is True and "unknown_outcome" not in s.tool_log[0]
    assert s.messages[-1]["content"] == UNKNOWN_OUTCOME and s.started == ["c1"]
    ran: list = []
    sent = sender(ran)
    model = FakeModel([asks(call("c1", "send_email", {"to": "ops"})), {"role": "assistant", "content": "Sent it."}])
    out = asyncio.run(run(s, [sent], Options(client=model, state_dir=tmp_path,
                                             stops=[repeated_failure(1), permanent_error()])))
    assert (out.status, out.output, out.turns, ran, len(model.bills)) == ("completed", "Sent it.", 2, [], 1)
    assert json.loads((tmp_path / "old-unknown.json").read_text())["tool_log"][0]["unknownOutcome"] is True


def test_an_old_subrun_resumes_through_its_ledger(tmp_path, capsys):
    """Made by the CLI: the migrated state still matches its ledger (workspace, options, spend), and the child's
    spend still counts against the budget: resumed with a budget below what parent and child spent, it stops at
    once, paying nothing (read without the child, $0.000878 < $0.0016 would buy another turn)."""
    place("old-subrun", tmp_path)
    assert main(["resume", "old-subrun", "--state-dir", str(tmp_path), "--budget", "0.0016", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["status"], s["turns"], s["cost_usd"]) == ("budget_exceeded", 1, round(0.000878 + 0.002476, 6))
    assert main(["resume", "old-subrun", "--state-dir", str(tmp_path), "--budget", "0.01", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["status"], s["turns"]) == ("completed", 2) and "timeout" in s["answer"]
    saved = json.loads((tmp_path / "old-subrun.json").read_text())
    assert saved["subruns"][0]["costUsd"] == 0.002476 and "cost_usd" not in saved["subruns"][0]


def test_an_old_cut_reply_resumes_through_its_ledger(tmp_path, capsys):
    place("old-cut", tmp_path)
    s = load(tmp_path, "old-cut")
    assert "cut_reply" not in s.interruption and s.interruption["cutReply"]["content"].startswith("errors.log")
    assert main(["resume", "old-cut", "--state-dir", str(tmp_path), "--budget", "0.004", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["turns"]) == ("completed", 4) and out["cost_usd"] <= 0.004


def test_the_old_and_the_new_spelling_together_are_refused(tmp_path):
    """No harness writes both: a file that holds both is edited, and which one to believe is not ours to guess."""
    place("old-journal", tmp_path)
    s = load(tmp_path, "old-journal")
    s.subruns[0]["cost_usd"] = 0.0
    s.status = "max_turns_exceeded"
    s.interruption = {"type": "max_turns"}
    save(s, tmp_path)
    data = json.loads((tmp_path / "old-journal.json").read_text())
    data["version"] = 1
    (tmp_path / "old-journal.json").write_text(json.dumps(data))
    with pytest.raises(StateFileError, match=r"subruns\[0\] has cost_usd, the old name of costUsd"):
        load(tmp_path, "old-journal")
    data["version"] = 2  # a file in the new names with an old one in it: refused too, never read as no spend
    del data["subruns"][0]["costUsd"]
    (tmp_path / "old-journal.json").write_text(json.dumps(data))
    with pytest.raises(StateFileError, match=r"subruns\[0\] has cost_usd, the old name of costUsd"):
        load(tmp_path, "old-journal")


def test_a_state_in_the_new_names_says_so_by_its_version(tmp_path):
    """An older harness reads version 1 and would take a child's ``costUsd`` for no spend at all: a file in the
    new names says so by its version."""
    place("old-journal", tmp_path)
    s = load(tmp_path, "old-journal")
    assert s.version == STATE_VERSION == 2
    save(s, tmp_path)
    assert json.loads((tmp_path / "old-journal.json").read_text())["version"] == 2


@pytest.mark.parametrize("key", OLD_KEYS)
def test_no_old_key_is_written_anywhere(key):
    """The renamed keys appear in the package only where they are read for the migration."""
    src = Path(__file__).parent.parent / "harness_lib"
    hits = [p for p in src.rglob("*.py") if f'"{key}"' in p.read_text() or f"{key}=" in p.read_text()]
    assert [p.name for p in hits] == (["state.py"] if key in ("unknown_outcome", "cut_reply") else [])
