"""Bad input never loses a run (issue 5).

Every case of ``harness_lib.reliability.bad_input_cases()`` is one test: malformed tool arguments, an
unknown tool, a tool raising any exception type or returning non-text (a tool result the model can read,
never a crash); paths escaping the workspace (refused, nothing outside touched); truncated, corrupted,
wrong-version state files (a clear error naming the file, nothing overwritten); decisions and resumes
that do not fit the run (a clear message, the state file unchanged); limits that make no sense (rejected
before anything runs); torn trace and journal lines (tolerated by every reader)."""

import asyncio

import pytest

from harness_lib import reliability as R
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.tools import Tool
from harness_lib.trace import Trace
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

CASES = R.bad_input_cases()


@pytest.mark.parametrize("check", [c for _, c in CASES], ids=[name for name, _ in CASES])
def test_bad_input(check):
    assert check() is not None


def test_there_are_many_kinds_of_bad_input():
    names = " ".join(name for name, _ in CASES)
    for kind in ("malformed arguments", "unknown tool", "raising", "returning", "symlink", "state file",
                 "approve twice", "resume a completed run", "NaN", "torn"):
        assert kind in names.replace("nan", "NaN")
    assert len(CASES) >= 90


def test_a_keyboard_interrupt_in_a_tool_is_not_swallowed():
    """The one exception a tool result does not absorb: Ctrl-C is the user's, not the tool's. The state on
    disk then says running, and the run is continued like any run whose process died."""
    async def interrupted(args, ctx):
        raise KeyboardInterrupt
    model = R.FakeModel([R.asks(R.call("c1", "ctrl_c"))])
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), [Tool("ctrl_c", "", interrupted)],
                        Options(client=model, trace=Trace(timestamps=False))))


def test_many_bad_calls_in_one_turn_each_get_their_own_answer(tmp_path):
    calls = [R.call("c1", "nope"), R.call("c2", "read_file", "{"), R.call("c3", "read_file", {"path": "../x"}),
             R.call("c4", "read_file", {"path": "errors.log"})]
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), Workspace.copy_of(into=tmp_path).tools(),
                            Options(client=R.FakeModel([R.asks(*calls)]))))
    answers = {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}
    assert list(answers) == ["c1", "c2", "c3", "c4"] and state.status == "completed"
    assert answers["c1"].startswith("Error: unknown tool") and answers["c2"].startswith("Error: malformed")
    assert answers["c3"] == "Error: permission denied: ../x" and "timed out" in answers["c4"]
