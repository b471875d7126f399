"""``harness_lib.testing``: the fake model does what its docstring says, and the crash seam kills only when
asked, at the boundary asked for."""

import asyncio
import doctest
import os
import signal
import subprocess
import sys

import pytest

from harness_lib import testing
from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.testing import FakeModel, asks, call
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def test_the_docstring_example_runs():
    result = doctest.testmod(testing, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0


def test_replies_are_played_by_turn_and_billed_the_chapters_way(tmp_path):
    model = FakeModel([asks(call("c1", "list_files")), asks(call("c2", "read_file", {"path": "errors.log"})),
                       {"role": "assistant", "content": "errors.log mentions a timeout: worker 7 timed out after "
                                                        "30000 ms."}])
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "plan"), Workspace.copy_of(into=tmp_path).tools(),
                            Options(client=model)))
    # the chapter's plan, as the scripted provider plays it over HTTP: 204 + 269 + 342 in, 23 + 29 + 18 out
    assert [b["prompt_tokens"] for b in model.bills] == [204, 269, 342]
    assert [b["completion_tokens"] for b in model.bills] == [23, 29, 18]
    assert (state.status, state.turns, f"{state.own_cost_usd:.6f}") == ("completed", 3, "0.002470")


def test_after_the_script_the_model_answers_done_and_before_sees_each_turn():
    seen = []
    model = FakeModel([], before=seen.append)
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), [], Options(client=model)))
    assert (state.status, state.output, seen) == ("completed", "done", [0])


def test_call_keeps_raw_arguments_and_compacts_a_dict():
    assert call("c1", "read_file", '{"path": ')["function"]["arguments"] == '{"path": '
    assert call("c1", "read_file", {"path": "a b"})["function"]["arguments"] == '{"path":"a b"}'
    assert asks(call("c1", "x")) == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}]}


SEAM = "from harness_lib.testing import crash_seam\nfor k in ['turn', 'save', 'turn', 'turn']:\n" \
       "    print(k, flush=True)\n    crash_seam(k)\nprint('end')"


def seam(env_value):
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_CRASH_AT"}
    if env_value is not None:
        env["HARNESS_CRASH_AT"] = env_value
    return subprocess.run([sys.executable, "-c", SEAM], env=env, capture_output=True, text=True, timeout=60)


def test_the_crash_seam_does_nothing_unless_asked():
    r = seam(None)
    assert (r.returncode, r.stdout.split()) == (0, ["turn", "save", "turn", "turn", "end"])


@pytest.mark.parametrize("spec, printed", [("turn:2", ["turn", "save", "turn"]), ("save:1", ["turn", "save"]),
                                           ("turn:4", ["turn", "save", "turn", "turn", "end"])])
def test_the_crash_seam_kills_at_the_nth_boundary_of_its_kind(spec, printed):
    r = seam(spec)
    assert r.stdout.split() == printed
    assert r.returncode == (0 if printed[-1] == "end" else -signal.SIGKILL)


def test_a_malformed_crash_spec_is_an_error_not_a_silent_no_op(monkeypatch):
    monkeypatch.setenv("HARNESS_CRASH_AT", "turn")
    with pytest.raises(ValueError, match="expected KIND:N"):
        testing.crash_seam("turn")
