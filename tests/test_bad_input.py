"""Bad input never loses a run (issue 5): each case a test that says what it expects.

Malformed tool arguments, an unknown tool, a tool raising any exception type or returning non-text: a tool
result the model can read, in the call's own slot, never a crash. Paths escaping the workspace: refused,
nothing outside touched. Truncated, corrupted, wrong-version state files: a clear error naming the file,
nothing overwritten. Decisions and resumes that do not fit the run: a clear message, the state file
unchanged. Limits that make no sense: rejected, naming the limit, before anything runs. Torn trace and
journal lines: tolerated by every reader.

``python tests/reliability_campaign.py`` runs this file and counts its tests as the "bad inputs
tried" of docs/reliability.md."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import json
import math
import os
import re
from pathlib import Path

import pytest

from harness_lib import cli
from harness_lib.loop import Options, run
from harness_lib.state import DecisionError, StateFileError, approve, check_run_id, load, new_run, pending, reject, save
from harness_lib.state import check as state_check  # what load refuses, each way, without a file
from harness_lib.testing import FakeModel, asks, call
from harness_lib.tools import Tool, ToolContext
from harness_lib.trace import Trace, read
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

NOWHERE = "http://127.0.0.1:9/v1"  # a base URL no request may reach: every case here ends before one
TOOL_NAMES = "list_files, read_file, delete_file, scan_archive"


def run_fake(replies: list[dict], tools: list[Tool]):
    return asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), tools,
                           Options(client=FakeModel(replies), trace=Trace(timestamps=False))))


def answers(state) -> dict[str, str]:
    """Each tool call's answer, by call id; checks there is one answer per call, in order."""
    calls = [c["id"] for m in state.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    slots = [m for m in state.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in slots] == calls
    return {m["tool_call_id"]: m["content"] for m in slots}


def cli_main(*argv: str) -> tuple[int, str]:
    """The command line in process: its exit code and what it said on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return code, err.getvalue()


def tear(path: Path, fragment: bytes):
    with open(path, "ab") as f:
        f.write(fragment)


# -- tool calls a model gets wrong: answered in the call's slot, nothing deleted -----------------------------
@pytest.mark.parametrize("name, arguments, answer", [
    ("read_file", '{"path": "errors.l', "Error: malformed arguments for read_file: Unterminated string"),
    ("read_file", "path=errors.log", "Error: malformed arguments for read_file: Expecting value"),
    ("read_file", "[1, 2]", "Error: malformed arguments for read_file: arguments must be a JSON object"),
    ("read_file", "null", "Error: malformed arguments for read_file: arguments must be a JSON object"),
    ("read_file", '"errors.log"', "Error: malformed arguments for read_file: arguments must be a JSON object"),
    ("read_file", {"path": 7}, "Error: path must be a non-empty string, got 7"),
    ("read_file", {}, "Error: path must be a non-empty string, got None"),
    ("delete_file", '{"path": ', "Error: malformed arguments for delete_file: Expecting value"),
    ("rm_rf", {"path": "/"}, f"Error: unknown tool 'rm_rf'; the tools are: {TOOL_NAMES}"),
    ("", "{}", f"Error: unknown tool ''; the tools are: {TOOL_NAMES}"),
], ids=["malformed arguments: truncated JSON", "malformed arguments: not JSON", "malformed arguments: a JSON array",
        "malformed arguments: JSON null", "malformed arguments: a JSON string", "arguments of the wrong type",
        "a required argument missing", "malformed arguments to a tool that needs approval", "an unknown tool",
        "a tool with an empty name"])
def test_a_bad_tool_call_is_answered_in_its_slot(tmp_path, name, arguments, answer):
    ws = Workspace.copy_of(into=tmp_path)
    files = ws.files()
    state = run_fake([asks(call("c1", name, arguments))], ws.tools())
    assert (state.status, state.output) == ("completed", "done")
    assert answers(state)["c1"].startswith(answer)
    assert ws.deleted == [] and ws.files() == files


class Boom(BaseException):
    """Not an Exception: what a library's own control flow sometimes raises."""


class Mute(Exception):
    def __str__(self):
        raise RuntimeError("cannot even say what went wrong")


@pytest.mark.parametrize("exc, answer", [
    (ValueError("bad value"), "Error: bad value"), (KeyError("k"), "Error: 'k'"),
    (ZeroDivisionError("division by zero"), "Error: division by zero"), (RuntimeError(""), "Error: RuntimeError"),
    (TimeoutError(), "Error: TimeoutError"), (RecursionError("too deep"), "Error: too deep"),
    (NotImplementedError(), "Error: NotImplementedError"), (SystemExit(3), "Error: SystemExit: 3"),
    (Boom("from a library"), "Error: Boom: from a library"), (GeneratorExit(), "Error: GeneratorExit"),
    (Mute(), "Error: Mute"),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None)
def test_a_tool_raising_anything_is_a_tool_result(exc, answer):
    async def raising(args, ctx):
        raise exc
    state = run_fake([asks(call("c1", "flaky"))], [Tool("flaky", "Fails.", raising)])
    assert (state.status, answers(state)) == ("completed", {"c1": answer})


class Circular(list):
    pass


circular = Circular([1])
circular.append(circular)  # a list that contains itself: json cannot serialise it


@pytest.mark.parametrize("value, answer", [
    (None, "null"), ({"files": 3}, '{"files": 3}'), ([1, 2], "[1, 2]"), (42, "42"), (math.nan, "NaN"),
    (b"\x00bytes", json.dumps(str(b"\x00bytes"))), ({1, 2}, '"{1, 2}"'), (object(), '"<object object at 0x'),
    (circular, "Error: Circular reference detected"),
], ids=["None", "dict", "list", "int", "NaN", "bytes", "set", "object", "Circular"])  # ids a command line can name
def test_a_tool_returning_non_text_is_answered_as_text(value, answer):
    async def returning(args, ctx):
        return value
    state = run_fake([asks(call("c1", "odd"))], [Tool("odd", "Returns something else than text.", returning)])
    assert state.status == "completed"
    assert isinstance(answers(state)["c1"], str) and answers(state)["c1"].startswith(answer)


# -- paths that leave the workspace: refused, nothing outside touched --------------------------------------
PATHS = {"..": (lambda t: "../secret.txt", PermissionError, "permission denied: ../secret.txt"),
         "a nested ..": (lambda t: "dir/../../secret.txt", PermissionError, "permission denied: dir/../../secret"),
         "an absolute path outside": (lambda t: str(t / "secret.txt"), PermissionError, "permission denied: /"),
         "/etc/passwd": (lambda t: "/etc/passwd", PermissionError, "permission denied: /etc/passwd"),
         "a symlink pointing out": (lambda t: "link-out", PermissionError, "permission denied: link-out"),
         "a path through a symlinked folder": (lambda t: "dir-out/secret.txt", PermissionError,
                                               "permission denied: dir-out/secret.txt"),
         "an empty path": (lambda t: "", ValueError, "path must be a non-empty string, got ''"),
         "a NUL byte": (lambda t: "errors.log\x00.txt", ValueError, "path is not a file name: 'errors.log\\x00.txt'")}


@pytest.mark.parametrize("tool", ["read_file", "delete_file"])
@pytest.mark.parametrize("label", list(PATHS))
def test_a_path_outside_the_workspace_is_refused(tmp_path, tool, label):
    path_for, error, message = PATHS[label]
    ws = Workspace.copy_of(into=tmp_path)
    (tmp_path / "secret.txt").write_text("outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside")
    (ws.root / "link-out").symlink_to(tmp_path / "secret.txt")
    (ws.root / "dir-out").symlink_to(tmp_path / "outside", target_is_directory=True)
    before = sorted(p.name for p in ws.root.iterdir())
    fn = {"read_file": ws.read_file, "delete_file": ws.delete_file}[tool]
    with pytest.raises(error) as refused:
        asyncio.run(fn({"path": path_for(tmp_path)}, ToolContext("r", "c1")))
    assert str(refused.value).startswith(message)
    assert (tmp_path / "secret.txt").read_text() == "outside"
    assert (tmp_path / "outside" / "secret.txt").read_text() == "outside"
    assert sorted(p.name for p in ws.root.iterdir()) == before and ws.deleted == []


# -- broken state files: a clear error naming the file, nothing overwritten ---------------------------------
GOOD = new_run(SYSTEM_PROMPT, TASK, "plan", run_id="r1").to_dict()
TEXT = json.dumps(GOOD)
STATE_FILES = {
    "truncated": (TEXT[: len(TEXT) // 2], "not valid JSON"),
    "empty": ("", "not valid JSON"),
    "binary garbage": (b"\x00\xff\xfe\x80 garbage", "not valid JSON ('utf-8' codec can't decode"),
    "not an object": ("[1, 2, 3]", "expected a JSON object"),
    "a later version": (json.dumps({**GOOD, "version": 3}), "state version 3, this harness reads 1 and 2"),
    "no version": (json.dumps({k: v for k, v in GOOD.items() if k != "version"}), "state version None"),
    "another run's file": (json.dumps({**GOOD, "run_id": "r2"}), "run_id is 'r2'"),
    "an unknown status": (json.dumps({**GOOD, "status": "paused"}), "status 'paused' is not one of"),
    "negative turns": (json.dumps({**GOOD, "turns": -1}), "turns is not a whole number"),
    "a NaN cost": (TEXT.replace('"cost_usd": 0.0', '"cost_usd": NaN'), "cost_usd is not a number of dollars"),
    "messages not a list": (json.dumps({**GOOD, "messages": "hi"}), "messages is not a non-empty list"),
    "approvals not a list": (json.dumps({**GOOD, "approved": "c2"}), "approved is not a list"),
    "a folder in its place": (None, "cannot be read (Is a directory)"),
}


@pytest.mark.parametrize("label", list(STATE_FILES))
def test_a_broken_state_file_is_named_and_left_as_it_is(tmp_path, label):
    content, says = STATE_FILES[label]
    path = tmp_path / "r1.json"
    if content is None:
        path.mkdir()  # a folder where the file should be
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = sorted(os.listdir(tmp_path)), (None if content is None else path.read_bytes())
    with pytest.raises(StateFileError) as refused:
        load(tmp_path, "r1")
    assert str(path) in str(refused.value) and says in str(refused.value)
    code, err = cli_main("resume", "r1", "--state-dir", str(tmp_path))
    assert code == 2 and str(path) in err and says in err
    code, err = cli_main("run", "plan", "--run-id", "r1", "--state-dir", str(tmp_path), "--base-url", NOWHERE)
    assert code == 2 and "already exists" in err
    assert (sorted(os.listdir(tmp_path)), (None if content is None else path.read_bytes())) == before


MESSAGES = {  # a message edited by hand, checked directly (found by make mutate: state._check_message)
    "not an object": (5, ["messages[2] is not an object"]),
    "content not text": ({"role": "user", "content": 3}, ["messages[2].content is not text"]),
    "an answer without content": ({"role": "assistant", "content": None}, []),
    "a tool result without its call's id": ({"role": "tool", "content": "x", "name": "look"},
                                            ["messages[2] (a tool result) has no call id"]),
    "a tool result with a name that is no text": ({"role": "tool", "content": "x", "tool_call_id": "c1", "name": 1},
                                                  ["messages[2] (a tool result) has no call id"]),
    "a tool result without a name": ({"role": "tool", "content": "x", "tool_call_id": "c1"}, []),
    "a question without content": ({"role": "user", "content": None}, ["messages[2].content is not text"]),
    "calls that are no list": ({"role": "assistant", "content": None, "tool_calls": {}},
                               ["messages[2].tool_calls is not a list"]),
    "calls in a question": ({"role": "user", "content": "x", "tool_calls": 5}, []),
    "calls that are not calls": ({"role": "assistant", "content": 3, "tool_calls": [
        "c1", {"id": "", "function": {"name": "look", "arguments": "{}"}},
        {"id": "c3", "function": {"name": "look", "arguments": {}}}, {"id": "c4", "function": {"arguments": "{}"}},
        {"id": 5, "function": {"name": "look", "arguments": "{}"}}, {"id": "c6"},
        {"id": "c7", "function": {"name": "look", "arguments": "{}"}}]},
        ["messages[2].content is not text"] + [f"messages[2].tool_calls[{j}] is not a call with an id, a name and "
                                                f"arguments" for j in range(6)]),
}


@pytest.mark.parametrize("label", list(MESSAGES))
def test_a_message_edited_by_hand_is_refused_saying_which_and_what(label):
    message, says = MESSAGES[label]
    assert state_check({**GOOD, "messages": [*GOOD["messages"], message]}, "r1") == says


# A run with one turn, one call, one result, as the loop writes it: each field below edited by hand, alone, and
# what `check` says of it, word for word (found by make mutate: state.check, state._count, _money, _text)
RAN = {**GOOD, "turns": 1, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.5, "config": {"max_turns": 3},
       "per_turn": [{"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.5}],
       "messages": [*GOOD["messages"], asks(call("c1", "list_files")),
                    {"role": "tool", "tool_call_id": "c1", "name": "list_files", "content": "[]"}],
       "tool_log": [{"callId": "c1", "toolName": "list_files", "args": "{}", "signature": "s", "ok": True, "ms": 1}]}
PAUSED = ("status 'paused' is not one of ('running', 'completed', 'failed', 'max_turns_exceeded', 'budget_exceeded', "
          "'interrupted')")
TOP = 10 ** 15 - 1  # the largest count, and the largest whole number of dollars, a state file may hold
UNSET = object()  # the field left out of the file
STATE_FIELDS = {
    "as the loop wrote it": ({}, []),
    "every list and table left out": (dict.fromkeys(["per_turn", "tool_log", "approved", "rejected", "started",
                                                     "subruns", "meta", "config", "instance"], UNSET)
                                      | {"turns": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0}, []),
    "version 1 after the upgrade": ({"version": 1}, ["state version 1, this harness reads 2"]),
    "another run's id": ({"run_id": "r2"}, ["run_id is 'r2'"]),
    "an unknown status": ({"status": "paused"}, [PAUSED]),
    "no model": ({"model": None}, ["model is not a string"]),
    "an instance of 64 characters": ({"instance": "i" * 64}, []),
    "an instance of 65 characters": ({"instance": "i" * 65}, ["instance is not a short string"]),
    "an instance that is a number": ({"instance": 5}, ["instance is not a short string"]),
    "no messages": ({"messages": []}, ["messages is not a non-empty list"]),
    "messages that are text": ({"messages": "hi"}, ["messages is not a non-empty list"]),
    "two messages that are no objects": ({"messages": [*GOOD["messages"], 5, 6]},
                                         ["messages[2] is not an object", "messages[3] is not an object"]),
    "turns below 0": ({"turns": -1}, ["turns is not a whole number from 0 to 10^15"]),
    "prompt tokens as a fraction": ({"prompt_tokens": 1.5}, ["prompt_tokens is not a whole number from 0 to 10^15"]),
    "completion tokens as text": ({"completion_tokens": "5"},
                                  ["completion_tokens is not a whole number from 0 to 10^15"]),
    "the most tokens": ({"prompt_tokens": TOP, "per_turn": [{"prompt_tokens": TOP, "completion_tokens": 5,
                                                            "cost_usd": 0.5}]}, []),
    "one token more": ({"prompt_tokens": TOP + 1}, ["prompt_tokens is not a whole number from 0 to 10^15"]),
    "the most dollars": ({"cost_usd": float(TOP), "per_turn": [{"prompt_tokens": 10, "completion_tokens": 5,
                                                               "cost_usd": float(TOP)}]}, []),
    "a dollar more": ({"cost_usd": float(TOP + 1)}, ["cost_usd is not a number of dollars from 0 to 10^15"]),
    "dollars as text": ({"cost_usd": "0.5"}, ["cost_usd is not a number of dollars from 0 to 10^15"]),
    **{f"{key} of the wrong kind": ({key: bad}, [f"{key} is not a {kind}"]) for key, bad, kind in [
        ("approved", "c1", "list"), ("started", {}, "list"), ("rejected", [], "dict"), ("tool_log", {}, "list"),
        ("per_turn", {}, "list"), ("subruns", {}, "list"), ("meta", [], "dict"), ("config", [], "dict")]},
    "a turn that is no object": ({"per_turn": [5]}, ["per_turn[0] is not {prompt_tokens, completion_tokens, "
                                                     "cost_usd} of non-negative numbers"]),
    **{f"a turn without {key}": ({"per_turn": [{k: v for k, v in RAN["per_turn"][0].items() if k != key}]},
                                 ["per_turn[0] is not {prompt_tokens, completion_tokens, cost_usd} of non-negative "
                                  "numbers"]) for key in ("prompt_tokens", "completion_tokens", "cost_usd")},
    "a turn more than the record": ({"turns": 2}, ["turns is 2 but per_turn records 1"]),
    "prompt tokens not the sum": ({"prompt_tokens": 11}, ["prompt_tokens is not the sum of per_turn"]),
    "completion tokens not the sum": ({"completion_tokens": 4}, ["completion_tokens is not the sum of per_turn"]),
    "dollars a billionth off": ({"turns": 0, "prompt_tokens": 0, "completion_tokens": 0, "per_turn": [],
                                 "cost_usd": 1e-9}, []),
    "dollars more than a billionth off": ({"cost_usd": 0.5 + 3e-9}, ["cost_usd is not the sum of per_turn"]),
    "calls approved, begun and rejected that are in it": ({"approved": ["c1"], "started": ["c1"],
                                                           "rejected": {"c1": "no"}}, []),
    **{f"{key} naming {label}": ({key: [bad]}, [f"{key} names a call that is not in the transcript"])
       for key in ("approved", "started") for label, bad in (("no call", "c9"), ("a number", 5))},
    "rejected naming no call": ({"rejected": {"c9": "no"}},
                                ["rejected names a call that is not in the transcript, or gives it no text"]),
    "rejected without text": ({"rejected": {"c1": 5}},
                              ["rejected names a call that is not in the transcript, or gives it no text"]),
    "a tool run that is no object": ({"tool_log": [5]}, ["tool_log[0] is not a tool run record"]),
    **{f"a tool run with {key} {bad!r}": ({"tool_log": [{**RAN["tool_log"][0], key: bad}]},
                                          ["tool_log[0] is not a tool run record"])
       for key, bad in (("callId", None), ("toolName", 5), ("args", {}), ("ok", 1))},
    "a child without its cost": ({"subruns": [{"runId": "r1-1"}]}, []),
    "a child that is no object": ({"subruns": [5]}, ["subruns[0] has no cost from 0 to 10^15"]),
    "a child costing less than nothing": ({"subruns": [{"costUsd": -1}]}, ["subruns[0] has no cost from 0 to 10^15"]),
    "old names beside the new": ({"tool_log": [{**RAN["tool_log"][0], "unknown_outcome": True}],
                                  "subruns": [{"costUsd": 1, "cost_usd": 1}],
                                  "interruption": {"type": "max_turns", "cut_reply": True}},
                                 ["tool_log[0] has unknown_outcome, the old name of unknownOutcome",
                                  "subruns[0] has cost_usd, the old name of costUsd",
                                  "interruption has cut_reply, the old name of cutReply"]),
    "an output and an error": ({"output": "done", "error": "x"}, []),
    "an output that is no text": ({"output": 5}, ["output is not text or null"]),
    "an error that is no text": ({"error": []}, ["error is not text or null"]),
    "waiting for an approval": ({"status": "interrupted", "interruption": {
        "type": "approval", "callId": "c1", "toolName": "list_files", "args": {}}}, []),
    "cancelled with a reason": ({"status": "interrupted", "interruption": {"type": "cancelled", "reason": "r"}}, []),
    "stopped at the cap": ({"status": "max_turns_exceeded", "interruption": {"type": "max_turns"}}, []),
    **{f"an interruption {label}": ({"status": "interrupted", "interruption": why},
                                    ["interruption is not one of the chapter's shapes"]) for label, why in [
        ("that is no object", 5), ("of no known type", {"type": "paused"}),
        ("for approval without its call", {"type": "approval", "toolName": "list_files", "args": {}}),
        ("whose call id is a number", {"type": "approval", "callId": 1, "toolName": "list_files", "args": {}}),
        ("whose tool is a number", {"type": "approval", "callId": "c1", "toolName": 1, "args": {}}),
        ("whose reason is a number", {"type": "cancelled", "reason": 1})]},
    "a completed run waiting for an approval": ({"status": "completed", "interruption": {
        "type": "approval", "callId": "c1", "toolName": "list_files", "args": {}}},
        ["a completed run cannot be interrupted for approval"]),
    "a failed run cancelled": ({"status": "failed", "interruption": {"type": "cancelled", "reason": "r"}},
                               ["a failed run cannot be interrupted for cancelled"]),
    "an option that is a list": ({"config": {"max_turns": 3, "base_url": None, "tools": ["a"]}},
                                 ["config.tools is not a plain value"]),
    "an option named by a number": ({"config": {1: 3}}, ["config.1 is not a plain value"]),  # (only from a caller)
}


@pytest.mark.parametrize("label", list(STATE_FIELDS))
def test_a_state_field_edited_by_hand_is_refused_saying_what(label):
    changes, says = STATE_FIELDS[label]
    data = copy.deepcopy({**RAN, **{k: v for k, v in changes.items() if v is not UNSET}})
    for key in [k for k, v in changes.items() if v is UNSET]:
        del data[key]
    assert state_check(data, "r1") == says


SIX = {"model": None, "instance": 5, "turns": -1, "prompt_tokens": -1, "completion_tokens": -1, "cost_usd": -1}
SAID = ["model is not a string", "instance is not a short string", "turns is not a whole number from 0 to 10^15",
        "prompt_tokens is not a whole number from 0 to 10^15",
        "completion_tokens is not a whole number from 0 to 10^15",
        "cost_usd is not a number of dollars from 0 to 10^15"]


@pytest.mark.parametrize("more, says", [({}, SAID), ({"status": "paused"}, [
    PAUSED, *SAID[:5], "and 1 more"]), ({"status": "paused", "run_id": "r2"}, [
        "run_id is 'r2'", PAUSED, *SAID[:4], "and 2 more"])],
    ids=["six", "seven", "eight"])
def test_a_state_file_names_six_problems_and_counts_the_rest(tmp_path, more, says):
    """(found by make mutate: state.load)"""
    path = tmp_path / "r1.json"
    path.write_text(json.dumps({**GOOD, **SIX, **more}))
    with pytest.raises(StateFileError) as refused:
        load(tmp_path, "r1")
    assert str(refused.value) == f"{path}: {'; '.join(says)}; the file is left as it is"


def test_a_missing_state_file_is_named_alone_when_no_journal_is_there_either(tmp_path):
    """(found by make mutate: state.load)"""
    with pytest.raises(StateFileError) as refused:
        load(tmp_path, "r1")
    assert str(refused.value) == f"{tmp_path / 'r1.json'}: no such state file"


def test_an_invalid_run_id_is_refused(tmp_path):
    with pytest.raises(StateFileError, match=r"invalid run id \.\./etc"):
        load(tmp_path, "../etc")


def test_a_run_id_of_100_characters_is_taken_and_one_that_is_no_text_is_shown_as_what_it_is():
    """(found by make mutate: state.check_run_id)"""
    assert check_run_id("r" * 100) == "r" * 100
    with pytest.raises(StateFileError, match=r"^invalid run id r{60}\.\.\. \(101 characters\)"):
        check_run_id("r" * 101)
    with pytest.raises(StateFileError, match=r"^invalid run id PosixPath\('r1'\) \(0 characters\)"):
        check_run_id(Path("r1"))


# -- decisions and resumes that do not fit the run: a clear message, the state file unchanged --------------
def saved_run(tmp: Path, status: str, approved=()) -> Path:
    state = new_run(SYSTEM_PROMPT, TASK, "destructive", run_id="r1")
    state.messages += [asks(call("c1", "list_files")),
                       {"role": "tool", "tool_call_id": "c1", "name": "list_files", "content": "[]"},
                       asks(call("c2", "delete_file", {"path": "access.log"}))]
    state.status, state.turns, state.approved = status, 2, list(approved)
    state.per_turn = [{"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}] * 2  # load checks
    state.interruption = {"type": "approval", "callId": "c2", "toolName": "delete_file",
                          "args": {"path": "access.log"}} if status == "interrupted" else None
    if status in ("completed", "failed"):
        state.messages.append({"role": "tool", "tool_call_id": "c2", "name": "delete_file", "content": "x"})
        state.messages.append({"role": "assistant", "content": "done"})
    state.meta["workspace"] = str(Workspace.copy_of(into=tmp).root)
    return save(state, tmp / "runs")


@pytest.mark.parametrize("status, argv, says, approved", [
    ("interrupted", ["--approve", "c9"], "call 'c9' is not pending in run r1 (pending: ['c2'])", ()),
    ("interrupted", ["--approve", "c1"], "call 'c1' is not pending in run r1 (pending: ['c2'])", ()),
    ("interrupted", ["--reject", "c9"], "call 'c9' is not pending in run r1 (pending: ['c2'])", ()),
    ("running", ["--approve", "c2"], "call 'c2' was already approved in run r1", ["c2"]),
    ("running", ["--reject", "c2"], "call 'c2' was already approved in run r1", ["c2"]),
    ("completed", ["--approve", "c2"], "run r1 is completed; only a run that stopped", ()),
    ("completed", [], "run r1 is completed; only a run that stopped", ()),
    ("failed", [], "run r1 is failed; only a run that stopped", ()),
    ("interrupted", ["--approve", "c2", "--reject", "c2"], "argument --reject: not allowed with argument --approve",
     ()),
], ids=["approve a call that is not pending", "approve a call already answered", "reject a call that is not pending",
        "approve twice", "reject after approving", "approve in a completed run", "resume a completed run",
        "resume a failed run", "approve and reject at once"])
def test_a_decision_that_does_not_fit_is_refused(tmp_path, status, argv, says, approved):
    path = saved_run(tmp_path, status, approved)
    before = path.read_bytes()
    code, err = cli_main("resume", "r1", "--state-dir", str(path.parent), "--base-url", NOWHERE, *argv)
    assert code == 2 and says in err
    assert path.read_bytes() == before


def waiting():
    state = new_run(SYSTEM_PROMPT, TASK, "destructive", run_id="r1")
    state.messages.append(asks(call("c2", "delete_file", {"path": "access.log"})))
    state.status = "interrupted"
    return state


def test_approving_in_a_failed_run_is_refused_in_process():
    state = waiting()
    state.status = "failed"
    with pytest.raises(DecisionError, match="run r1 is failed: there is nothing to approve or reject"):
        approve(state, "c2")


def test_rejecting_twice_is_refused_in_process():
    with pytest.raises(DecisionError, match="call 'c2' was already rejected in run r1"):
        reject(reject(waiting(), "c2"), "c2")


def test_the_pending_calls_are_the_last_answers_unanswered_ones_until_someone_speaks_after_it():
    """(found by make mutate: state.pending)"""
    state = new_run(SYSTEM_PROMPT, TASK, "destructive", run_id="r1")
    first, second = call("c1", "list_files"), call("c2", "delete_file", {"path": "access.log"})
    state.messages.append(asks(first, second))
    assert pending(state) == [first, second]
    state.messages.append({"role": "tool", "tool_call_id": "c1", "name": "list_files", "content": "[]"})
    assert pending(state) == [second]  # the transcript ends in a tool's answer: the other call still waits
    state.messages.append({"role": "user", "content": "never mind"})
    assert pending(state) == []  # someone spoke after the calls: none is pending
    state.messages = state.messages[:2] + state.messages[3:4]  # a tool's answer with no call before it (edited)
    assert pending(state) == []
    state.messages = []
    assert pending(state) == []


# -- limits that make no sense: refused, naming the limit, before anything runs -----------------------------
@pytest.mark.parametrize("bad", [
    dict(max_turns=-1), dict(max_turns=0), dict(max_turns=2.5), dict(max_turns=True), dict(max_turns="3"),
    dict(max_budget_usd=math.nan), dict(max_budget_usd=math.inf), dict(max_budget_usd=-1.0),
    dict(max_budget_usd=0), dict(max_budget_usd="0.1"), dict(timeout_s=0), dict(timeout_s=math.nan),
    dict(backoff_s=-1), dict(max_retries=-1), dict(max_retries=1.5),
], ids=lambda b: ", ".join(f"{k}={v!r}" for k, v in b.items()))
def test_options_refuse_a_limit_that_makes_no_sense(bad):
    (name, value), = bad.items()
    with pytest.raises(ValueError, match=rf"^{name} must be a .*, got {re.escape(repr(value))}$"):
        Options(base_url=NOWHERE, **bad)


@pytest.mark.parametrize("flag, value", [
    ("--max-turns", "-1"), ("--max-turns", "2.5"), ("--max-turns", "many"), ("--budget", "nan"),
    ("--budget", "-1"), ("--budget", "inf"), ("--budget", "0"), ("--cancel-after", "-1"),
    ("--cancel-after", "nan"), ("--latency-ms", "inf"),
])
def test_run_refuses_a_flag_that_makes_no_sense(tmp_path, flag, value):
    code, err = cli_main("run", "plan", "--state-dir", str(tmp_path), "--base-url", NOWHERE, flag, value)
    assert code == 2 and f"argument {flag}: " in err
    assert os.listdir(tmp_path) == []  # no run started


# -- torn trace and journal lines: every reader copes ---------------------------------------------------------
@pytest.mark.parametrize("fragment", [b'{"runId":"r","type":"tu', b"12", '{"label":"caf\u00e9'.encode()[:-1]],
                         ids=["a torn last line", "a torn line that is valid JSON but not an object",
                              "a torn multibyte character"])
def test_a_torn_trace_line_is_skipped_then_cut(tmp_path, fragment):
    path = tmp_path / "t.jsonl"
    Trace(path).emit("r", "turn", turn=1)
    tear(path, fragment)
    assert [e["turn"] for e in read(path)] == [1]
    Trace(path).emit("r", "turn", turn=2)  # the next process cuts the fragment off
    assert [e["turn"] for e in read(path)] == [1, 2]
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(line)["turn"] for line in lines[:-1]] == [1, 2]  # the fragment is gone


def test_a_bad_trace_line_in_the_middle_names_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"type":"turn"}\nnot json\n{"type":"turn"}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not a JSON line: 'not json'"):
        read(path)


def test_a_torn_journal_line_does_not_make_a_delete_run_twice(tmp_path):
    ws = Workspace.copy_of(into=tmp_path)
    tear(ws.journal, b'{"op":"delete","key":"r:c0","pa')
    first = asyncio.run(ws.delete_file({"path": "access.log"}, ToolContext("r", "c1")))
    again = asyncio.run(ws.delete_file({"path": "access.log"}, ToolContext("r", "c1")))
    assert first == again == "deleted access.log"
    assert ws.deleted == ["access.log"] and "access.log" not in ws.files()


# -- more than one bad thing at once ---------------------------------------------------------------------------
def test_a_keyboard_interrupt_in_a_tool_is_not_swallowed():
    """The one exception a tool result does not absorb: Ctrl-C is the user's, not the tool's. The state on
    disk then says running, and the run is continued like any run whose process died."""
    async def interrupted(args, ctx):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_fake([asks(call("c1", "ctrl_c"))], [Tool("ctrl_c", "", interrupted)])


def test_many_bad_calls_in_one_turn_each_get_their_own_answer(tmp_path):
    calls = [call("c1", "nope"), call("c2", "read_file", "{"), call("c3", "read_file", {"path": "../x"}),
             call("c4", "read_file", {"path": "errors.log"})]
    state = run_fake([asks(*calls)], Workspace.copy_of(into=tmp_path).tools())
    got = answers(state)
    assert list(got) == ["c1", "c2", "c3", "c4"] and state.status == "completed"
    assert got["c1"].startswith("Error: unknown tool") and got["c2"].startswith("Error: malformed")
    assert got["c3"] == "Error: permission denied: ../x" and "timed out" in got["c4"]
