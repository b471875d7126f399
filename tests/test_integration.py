"""Where the merged pieces meet: the run's journal, the trace kept open, the ledger, the subagent's shared
client, the command line. Each test here failed before the fix beside it (see the commit that added it)."""

import asyncio
import os
import sys

import pytest

from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.testing import FakeModel, asks, call
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def open_files_under(folder) -> list[str]:
    """The files under ``folder`` this process holds open (Linux: /proc/self/fd)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts descriptors in /proc/self/fd")
def test_many_runs_in_one_process_leave_no_file_open(tmp_path):
    """A notebook session keeps its runs' results, and each result its Trace: 200 runs, each with a trace
    file of its own and a state dir, ended at each kind of stop, must not leave 200 descriptors open (the
    trace used to keep its file open for as long as the Trace lived)."""
    tools = Workspace.copy_of(into=tmp_path / "ws").tools()
    runs_dir = tmp_path / "runs"
    kept = []

    async def many():
        for i in range(200):
            model = FakeModel([asks(call("c1", "read_file", {"path": "errors.log"})),
                               asks(call("c2", "delete_file", {"path": "access.log"}))])
            trace = Trace(tmp_path / f"t{i}.jsonl")
            state = await run(new_run(SYSTEM_PROMPT, TASK, "fake", run_id=f"r{i}"), tools,
                              Options(client=model, trace=trace, state_dir=runs_dir, max_turns=(1, 2, 3)[i % 3]))
            kept.append((state, trace))

    asyncio.run(many())
    assert {s.status for s, _ in kept} == {"max_turns_exceeded", "interrupted"}  # a cap, and an approval
    assert open_files_under(tmp_path) == []
    state, trace = kept[-1]
    trace.emit(state.run_id, "note", said="a later line opens the file again")
    assert read(tmp_path / "t199.jsonl")[-1]["type"] == "note"
    trace.close()


def test_a_state_file_that_forgets_its_childrens_spend_is_refused(tmp_path, capsys):
    """The budget counts the children's spend (``total_cost_usd``); the ledger recorded only the run's own
    (``own_cost_usd``), so a state file edited to forget its subagents' spend resumed under a budget it had
    already crossed and paid for another turn."""
    import json

    from harness_lib.cli import main
    from harness_lib.state import state_path

    runs = tmp_path / "runs"
    assert main(["run", "delegate", "--state-dir", str(runs), "--run-id", "d1", "--budget", "0.003", "--json"]) == 0
    stopped = json.loads(capsys.readouterr().out)
    assert stopped["status"] == "budget_exceeded" and stopped["cost_usd"] > 0.003  # the child's spend counted
    path = state_path(runs, "d1")
    data = json.loads(path.read_text())
    assert data["subruns"] and data["cost_usd"] < 0.003  # its own spend alone is under the budget
    data["subruns"] = []                                 # the edit: the children never ran
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    assert main(["resume", "d1", "--state-dir", str(runs), "--json"]) == 2
    err = capsys.readouterr().err
    assert "already spent" in err and err.count("\n") == 1
    assert path.read_bytes() == before                   # refused before anything ran or was saved


def test_a_stale_collect_variable_never_breaks_a_readers_notebook(monkeypatch, tmp_path, capsys):
    """``HARNESS_CHAPTER_COLLECT`` left set in a reader's environment, naming a folder that is gone (a
    temporary one): every notebook's last cell raised FileNotFoundError, in Jupyter and under nbval. The
    figures are shown; the record is skipped with one line saying why (the report then measures that section
    itself)."""
    from harness_lib.chapter import collected
    from harness_lib.chapter.figures import beside_the_chapter

    monkeypatch.setenv(collected.ENV, str(tmp_path / "gone" / "measured.jsonl"))
    assert collected.record({"plan.turns": 3}, "01-loop") is False
    table = beside_the_chapter({"plan.turns": 3}, section="01-loop")
    assert table is not None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(collected.ENV in line and "gone" in line for line in err)
    assert not (tmp_path / "gone").exists()


@pytest.mark.slow  # a child process, killed
def test_resume_after_kill_with_a_readers_hold_is_not_reported_as_the_chapters(url):
    """Notebook 08's HOLD_MS is what makes the kill land while the child waits for its next turn, as the
    chapter's did; a reader who shortens it may kill the child after that turn is saved, and those figures
    differ from the chapter's for a reason that is not the harness's. Measured under another hold they are
    the reader's (relabelled), as with every other notebook parameter, never counted as the chapter's."""
    from harness_lib.chapter import s08_resume as s08
    from harness_lib.chapter.report import chapter_only

    out = asyncio.run(s08.resume_after_kill(url, hold_ms=s08.HOLD_MS / 4))
    assert out.measured and chapter_only(out.measured) == {}
    assert all("HOLD_MS=100" in k or "never killed" in k for k in out.measured)


@pytest.mark.slow  # a child process
def test_resume_after_kill_when_the_child_finishes_first_reports_it_and_does_not_resume(url, monkeypatch):
    """With HOLD_MS at 0 the child can finish the run between two looks at its state file (CI saw it once, in
    test_parameters' 08 edges): there is then nothing to resume, and resuming a completed run is refused. The
    table says so and the figures are the child's, never counted as the chapter's. Made certain here by never
    seeing the kill point, so the child always ends by itself."""
    from harness_lib.chapter import s08_resume as s08
    from harness_lib.chapter.report import chapter_only

    monkeypatch.setattr(s08, "_saved_tool_results", lambda *_: 0)
    out = asyncio.run(s08.resume_after_kill(url, hold_ms=0))
    assert list(out.table.index) == ["child ended by itself before the kill point (exit 0)",
                                     "not resumed: the child's run is completed"]
    assert out.finished.status == "completed" and out.finished.turns == out.restored.turns == 3
    assert chapter_only(out.measured) == {} and all("never killed" in k for k in out.measured)


def test_the_report_names_files_that_exist(tmp_path, monkeypatch):
    """After the data moved into the package, reports/chapter.md still sent its reader to
    `data/chapter_figures.csv` for the tolerances: every file the report names must be there."""
    import re
    from pathlib import Path

    import pandas as pd

    from harness_lib.chapter import report

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    table = pd.DataFrame([{"section": "01-loop", "figure": "turns", "chapter": 3, "ours": 3, "tolerance": "exact",
                           "match": "exact"}])
    report.write_reports(table, "1 of 1 chapter figures reproduced exactly", {})
    text = (tmp_path / "reports" / "chapter.md").read_text()
    named = re.findall(r"`([\w./-]+\.(?:csv|jsonl|ipynb|py))`", text)
    assert named and all((root / name).is_file() for name in named), named


def test_a_subagents_answer_is_not_streamed_as_the_runs_own(capsys):
    """The child asks through its parent's client (one connection for the tree); with --stream that client
    printed the child's answer on the screen as it arrived, a second answer before the run's own, and the
    child's step lines were numbered as the parent's (step 1, step 1, 2, 3, step 2)."""
    from harness_lib.cli import main

    assert main(["run", "delegate", "--stream"]) == 0
    out, err = capsys.readouterr()
    child_answer = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    streamed = out.split("delegate, cap 50")[0]  # what arrived as text, before the run's line
    assert streamed.strip() == "> The research subagent reports: " + child_answer  # (the model's lines marked)
    steps = [line.strip() for line in err.splitlines() if "step " in line]
    assert [s.split(":")[0] for s in steps] == ["step 1", "child step 1", "child step 2", "child step 3",
                                               "step 2"], steps


def test_a_journal_line_cannot_change_the_state_version(tmp_path):
    """``load`` checked the snapshot's version before its journal was applied, and never after: a framed
    line setting ``version`` was accepted, and the next save wrote a snapshot this harness then refuses."""
    import json
    import zlib

    from harness_lib.state import STATE_VERSION, StateFileError, journal_path, load, save

    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="r")
    save(state, tmp_path)                       # the snapshot
    state.messages.append({"role": "assistant", "content": "done"})
    save(state, tmp_path)                       # one journal line
    path = journal_path(tmp_path, "r")
    last = json.loads(path.read_bytes().splitlines()[-1].split(b" ", 1)[1])
    body = json.dumps({"j": last["j"], "n": last["n"] + 1, "set": {"version": STATE_VERSION + 1}, "add": {}}).encode()
    path.write_bytes(path.read_bytes() + b"%08x " % zlib.crc32(body) + body + b"\n")
    with pytest.raises(StateFileError, match="version"):
        load(tmp_path, "r")


def test_options_without_a_way_to_the_model_names_the_seam_a_reader_plugs_into():
    """After the ChatModel protocol, any object with complete() is a client: the error said ModelClient."""
    from harness_lib.client import Transport

    for make in (lambda: Options(), lambda: Transport().connect()):
        with pytest.raises(ValueError, match=r"client=, any ChatModel"):
            make()


def test_a_tool_error_policy_function_that_raises_ends_the_run_failed_saying_so(tmp_path):
    """policy.py's fourth policy is a reader's function of the exception. One that raised escaped ``run``
    and left the run ``running``, saved so, with no run_stopped: now the run ends failed, naming it."""
    model = FakeModel([asks(call("c1", "read_file", {"path": "nope.log"}))])
    trace = Trace(timestamps=False)
    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="p")
    out = asyncio.run(run(state, Workspace.copy_of(into=tmp_path / "ws").tools(),
                          Options(client=model, trace=trace, state_dir=tmp_path, tool_errors=lambda e: 1 / 0)))
    assert out.status == "failed" and trace.events[-1]["type"] == "run_stopped"
    assert "tool_errors" in out.error and "ZeroDivisionError" in out.error and "nope.log" in out.error
    from harness_lib.state import load
    assert load(tmp_path, "p").status == "failed"


@pytest.mark.parametrize("at", ["turn", "tool_start", "tool_result", "run_stopped"])
def test_an_on_event_hook_that_raises_ends_the_run_failed_saying_so(tmp_path, at):
    """``Trace(on_event=...)`` is the documented hook for a reader's own view of a run. One that raised
    escaped ``run`` wherever it was called and left the run ``running`` on disk: now the run ends failed
    (as a stop condition that raises does), saved, naming the hook; the hook is not called again."""
    from harness_lib.state import load

    calls = []

    def hook(event):
        calls.append(event["type"])
        if event["type"] == at:
            raise RuntimeError("my view broke")

    model = FakeModel([asks(call("c1", "read_file", {"path": "errors.log"}))])
    trace = Trace(timestamps=False, on_event=hook)
    tools = Workspace.copy_of(into=tmp_path / "ws").tools()
    out = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake", run_id="h"), tools,
                          Options(client=model, trace=trace, state_dir=tmp_path)))
    ended = "completed" if at == "run_stopped" else "failed"  # at the last line, the run's own end stands
    assert out.status == ended and "on_event" in out.error and "my view broke" in out.error
    assert load(tmp_path, "h").status == ended and load(tmp_path, "h").error == out.error
    assert calls[-1] == at and calls.count(at) == 1       # not called again after it failed
    assert [e["status"] for e in trace.events if e["type"] == "run_stopped"] == [ended]


def test_a_hook_that_fails_as_a_stopped_run_ends_leaves_it_resumable(tmp_path):
    """Stop pressed, and the reader's hook fails on the run_stopped line: the run is still interrupted,
    saved so (it escaped ``run`` from the cancellation handler, the state left running on disk)."""
    from harness_lib.state import load

    def hook(event):
        if event["type"] == "run_stopped":
            raise RuntimeError("my view broke")

    async def stopped():
        model = FakeModel([], before=lambda turn: asyncio.current_task().cancel("user pressed Stop"))
        return await run(new_run(SYSTEM_PROMPT, TASK, "fake", run_id="s"), [],
                         Options(client=model, trace=Trace(timestamps=False, on_event=hook), state_dir=tmp_path))
    out = asyncio.run(stopped())
    assert (out.status, out.interruption["reason"]) == ("interrupted", "user pressed Stop") and "my view" in out.error
    assert load(tmp_path, "s").status == "interrupted"
