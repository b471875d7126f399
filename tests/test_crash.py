"""Crash anywhere, resume exactly once (issue 5).

The campaign (``crash_campaign`` in ``tests/reliability_campaign.py``) drives ``plan``, ``destructive`` (approved)
and ``runaway`` through child processes and SIGKILLs them at every event boundary of the trace and at
random instants, at least 200 times; each run is then continued from disk and compared with a run that
never crashed. It spawns some 350 processes, four chains in five forked from a fork server that imported the
harness once (``tests/warm.py``), every fifth (at boundaries and at random instants) on fresh interpreters, so
kills during the real ``python -m harness_lib`` start-up stay covered: 76 to 113 s on a busy two-core machine,
against 174 to 485 s with every child fresh (``python tests/reliability_campaign.py --fresh``), run one after
the other. The smaller tests below pin the mechanisms the campaign relies on, in-process.
"""

import asyncio
import json

import pytest
import reliability_campaign as R
import warm

from harness_lib.loop import UNKNOWN_OUTCOME, Options, run
from harness_lib.state import load, new_run, save
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import Tool, ToolContext, string_params
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

KILLS = 200


@pytest.fixture(scope="module")
def campaign():
    return R.crash_campaign(min_kills=KILLS, seed=0)


@pytest.mark.slow
def test_at_least_200_kills_across_the_three_scenarios(campaign):
    f = campaign["figures"]
    assert f["kills"] >= KILLS
    assert set(f["kills_by_scenario"]) == {"plan", "destructive", "runaway"}
    assert f["kills_at_boundaries"] >= 60 and f["kills_at_random_instants"] >= 100
    assert f["random_kills_after_the_run_began"] >= f["kills_at_random_instants"] // 2
    # a sample on fresh interpreters: kills at boundaries, and at random instants (start-up included)
    assert f["kills_on_fresh_interpreters"] - f["random_kills_on_fresh_interpreters"] >= 5
    assert f["random_kills_on_fresh_interpreters"] >= 10
    print(f"\n{f['kills']} kills over {f['processes']} processes in {campaign['seconds']:.0f} s: {f}")


@pytest.mark.slow
def test_no_process_is_left_after_the_campaign(campaign):
    assert warm.leftovers() == []  # the process table: neither the fork server nor a child of it


@pytest.mark.slow
def test_every_event_boundary_of_every_process_was_a_kill(campaign):
    hit = {(c.scenario, c.target) for c in campaign["chains"] if c.kind == "boundary" and c.kills}
    for name, ref in campaign["refs"].items():
        for role, kinds in R._event_counts(ref).items():
            for kind, count in kinds.items():
                for n in range(1, count + 1):
                    assert (name, f"{role}/{kind}:{n}") in hit
            assert (name, f"{role}/save:1") in hit and (name, f"{role}/save:2") in hit
    # the approval's own process was killed at each of its boundaries too
    assert {t for n, t in hit if n == "destructive" and t.startswith("approve/")} >= {
        "approve/save:1", "approve/save:2", "approve/tool_start:1", "approve/tool_result:1", "approve/turn:1"}


@pytest.mark.slow
def test_no_run_lost_every_run_ends_as_if_it_never_crashed(campaign):
    problems = [f"{c.scenario} {c.kind} {c.target}: {p}" for c in campaign["chains"] for p in c.problems]
    assert problems == []
    for c in campaign["chains"]:
        ref = campaign["refs"][c.scenario].final
        for key in ("status", "turns", "prompt_tokens", "completion_tokens", "cost_usd", "per_turn", "messages"):
            assert c.final[key] == ref[key], (c.scenario, c.target, key)


@pytest.mark.slow
def test_deletion_happens_exactly_once_across_any_crash(campaign):
    destructive = [c for c in campaign["chains"] if c.scenario == "destructive"]
    assert len(destructive) >= 20
    assert all(c.deleted == ["access.log"] and "access.log" not in c.files for c in destructive)
    assert campaign["figures"]["writes_duplicated"] == 0


@pytest.mark.slow
def test_no_turn_paid_twice_and_lost_turns_are_counted(campaign):
    f = campaign["figures"]
    assert f["turns_paid_twice_in_transcript"] == 0
    for c in campaign["chains"]:
        # A kill can lose at most the one reply it interrupted; the trace shows the lost turn's line.
        assert 0 <= c.lost_turns <= c.kills
        turn_lines = sum(e["type"] == "turn" for e in c.events)
        assert c.final["turns"] <= turn_lines <= c.final["turns"] + c.lost_turns
    # Kills right after a turn line (before its save) lose that turn, every time: counted, not hidden.
    after_turn = [c for c in campaign["chains"] if c.kind == "boundary" and "/turn:" in c.target]
    assert all(c.lost_turns == 1 for c in after_turn)
    assert f["turns_paid_but_lost_to_a_kill"] >= len(after_turn)


@pytest.mark.slow
def test_reads_may_run_again_and_are_counted(campaign):
    f = campaign["figures"]
    assert f["reads_run_again"] > 0  # a kill between a read and its save runs the read again: shown
    killed_after_read = [c for c in campaign["chains"] if c.kind == "boundary"
                         and c.scenario == "plan" and c.target.startswith("run/tool_result:")]
    for c in killed_after_read:
        starts = [e["callId"] for e in c.events if e["type"] == "tool_start"]
        assert len(starts) == len(set(starts)) + 1


@pytest.mark.slow
def test_torn_lines_are_survived(campaign):
    torn = [c for c in campaign["chains"] if c.torn]
    assert len(torn) >= 10 and all(not c.problems for c in torn)
    assert all(read_ok(c) for c in torn)


def read_ok(chain) -> bool:
    return all(isinstance(e, dict) and "type" in e for e in chain.events)


# -- the mechanisms, in-process ----------------------------------------------------------------------
def go(state, tools, replies, tmp_path, **options):
    model = FakeModel(replies)
    out = asyncio.run(run(state, tools, Options(client=model, state_dir=tmp_path, trace=Trace(timestamps=False),
                                                **options)))
    return out, model


def test_a_saved_answer_completes_without_paying_again(tmp_path):
    """Killed after the answer's turn was saved but before the stop was: resuming must not ask again."""
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages.append({"role": "assistant", "content": "the answer"})
    state.turns, state.status = 1, "running"
    out, model = go(state, [], [], tmp_path)
    assert (out.status, out.output, out.turns, model.bills) == ("completed", "the answer", 1, [])


def test_a_write_begun_before_a_crash_is_not_silently_run_again(tmp_path):
    ran = []

    async def send_email(args, ctx):
        ran.append(ctx.idempotency_key)
        return "sent"
    tool = Tool("send_email", "Sends.", send_email, string_params("to"))
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    state.messages.append(asks(call("c1", "send_email", {"to": "ops"})))
    state.started.append("c1")  # saved just before the dead process began the write
    out, _ = go(state, [tool], [], tmp_path)
    assert ran == [] and out.status == "completed"
    assert out.messages[3]["content"] == UNKNOWN_OUTCOME
    assert out.tool_log[0]["unknownOutcome"] is True


def test_a_write_is_recorded_as_begun_before_it_runs(tmp_path):
    seen = []

    async def write(args, ctx):
        seen.append(load(tmp_path, ctx.run_id).started)
        return "written"
    state = new_run(SYSTEM_PROMPT, TASK, "fake")
    out, _ = go(state, [Tool("write", "Writes.", write)], [asks(call("c1", "write"))], tmp_path)
    assert seen == [["c1"]] and out.status == "completed"


@pytest.mark.parametrize("journal", [
    [],                                                                  # died before journaling
    [{"op": "delete", "key": "r:c2", "path": "access.log", "started": True}],   # before the unlink
    "unlinked",                                                          # after the unlink, before 'done'
    "done",                                                              # after 'done', before the save
])
def test_delete_file_happens_once_whatever_the_journal_says(tmp_path, journal):
    ws = Workspace.copy_of(into=tmp_path)
    ctx = ToolContext("r", "c2")
    if journal == "done":
        asyncio.run(ws.delete_file({"path": "access.log"}, ctx))
    else:
        lines = journal if isinstance(journal, list) else [
            {"op": "delete", "key": "r:c2", "path": "access.log", "started": True}]
        ws.journal.write_text("".join(json.dumps(e) + "\n" for e in lines))
        if journal == "unlinked":
            (ws.root / "access.log").unlink()
    again = asyncio.run(ws.delete_file({"path": "access.log"}, ctx))
    assert again == "deleted access.log" and ws.deleted == ["access.log"] and "access.log" not in ws.files()


def test_a_failed_delete_replays_as_the_same_failure(tmp_path):
    ws = Workspace.copy_of(into=tmp_path)
    for _ in range(2):
        with pytest.raises(FileNotFoundError, match="no such file: gone.log. Call list_files"):
            asyncio.run(ws.delete_file({"path": "gone.log"}, ToolContext("r", "c9")))
    assert ws.deleted == []


def test_tools_receive_the_idempotency_key(tmp_path):
    keys = []

    async def remember(args, ctx):
        keys.append(ctx.idempotency_key)
        return "ok"
    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="run7")
    go(state, [Tool("remember", "", remember)], [asks(call("c3", "remember"))], tmp_path)
    assert keys == [f"run7:{state.instance}:c3"]  # issue 9: the key names the run instance too


def test_the_run_is_on_disk_before_anything_is_paid_for(tmp_path):
    seen = []

    class Refuses:
        async def complete(self, *a):
            seen.append(load(tmp_path, "r1").status)
            raise RuntimeError("refused")  # an unexpected failure of the model call ends the run failed
    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="r1")
    state = asyncio.run(run(state, [], Options(client=Refuses(), state_dir=tmp_path)))
    assert seen == ["running"]
    assert (state.status, load(tmp_path, "r1").status) == ("failed", "failed") and "refused" in state.error


def test_a_trace_writer_cuts_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / "t.jsonl"
    Trace(path).emit("r", "turn", turn=1)
    with open(path, "ab") as f:
        f.write(b'{"runId":"r","ty')
    trace = Trace(path)
    trace.emit("r", "turn", turn=2)
    trace.emit("r", "turn", turn=3)
    assert [e["turn"] for e in read(path)] == [1, 2, 3]


def test_resume_accepts_a_run_whose_process_died(tmp_path):
    from harness_lib.cli import main
    ws = Workspace.copy_of(into=tmp_path)
    state = new_run(SYSTEM_PROMPT, TASK, "answer", run_id="r1")
    state.meta.update(scenario="answer", workspace=str(ws.root))
    save(state, tmp_path / "runs")  # status running: the process died before anything else
    assert main(["resume", "r1", "--state-dir", str(tmp_path / "runs"), "--json"]) == 0
    assert load(tmp_path / "runs", "r1").status == "completed"
