"""``harness_lib.testing``: the fake model does what its docstring says."""

import asyncio
import doctest

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
