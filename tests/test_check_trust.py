"""A check a reader can trust (issue 43): whatever a piece returns, raises, prints or leaves running, the check answers
in a line, is never wrong about it, and leaves the kernel and the project as they were for the next check.

Each test is a reader's piece, written as a reader would write it (hostile or careless), run through a section's
check as a notebook runs it, with what the check must do: not a pass, one line, nothing left running, the next
check right. The classes, not the instances: an object that lies about its value, a value that cannot be shown or
compared, an exception that cannot be said, output without end, threads and processes left behind, the kernel's
modules, streams, folder and providers changed, files outside the throwaway workspace, a process that ends itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from built_cells import load

from harness_lib.chapter import checking, project, sandbox
from harness_lib.chapter.checks import s02_turn_cap, s06_dedupe
from harness_lib.resources import data_path

REFERENCE = load("02-turn-cap")["capped_loop"]


def piece(source: str, name: str = "capped_loop", **names):
    """A reader's cell: ``source`` compiled as a cell is, beside the notebook's piece (``reference``) and ``names``."""
    namespace = {"reference": REFERENCE, "asyncio": asyncio, "time": time, "threading": threading, "os": os,
                 **names}
    exec(compile(source, "<your cell>", "exec"), namespace)  # noqa: S102 - the reader's own cell
    return namespace[name]


def check(fn, until_first_failure: bool = True):
    token = checking.UNTIL_FIRST_FAILURE.set(until_first_failure)
    try:
        return asyncio.run(s02_turn_cap.check(fn))
    finally:
        checking.UNTIL_FIRST_FAILURE.reset(token)


NEXT = dataclasses.replace(s02_turn_cap.CHECK, cases=s02_turn_cap.CASES[:4])   # the cap at 1 and 2, two calls, plan


def reference_passes() -> bool:
    """The next check, on the right piece: every case passes (four of 02's cases: what the kernel's state could change
    shows in any of them, at a third of the whole check's cost)."""
    got = asyncio.run(NEXT.run(capped_loop=REFERENCE))
    assert got.ok and got.lines()[0] == "4 of 4 cases pass", got.lines()
    return True


def alive(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


BEFORE: set[int] = set()   # this worker's own children as a test starts (kernels, servers of earlier tests)


@pytest.fixture(autouse=True)
def _children_before():
    BEFORE.clear()
    BEFORE.update(p for p, _c in sandbox._descendants(os.getpid()))


def no_child_processes_left() -> bool:
    def new():
        return [c for p, c in sandbox._descendants(os.getpid()) if p not in BEFORE]
    deadline = time.monotonic() + 2
    while new() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not new()


# -- 1. a wrong piece never passes: what it returns is compared as the plain data it holds -------------------------
LIARS = """
class AnyInt(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__

class AnyStr(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = str.__hash__

class YesDict(dict):
    def __contains__(self, key): return True
    def __getitem__(self, key): return AnyInt(0)
    def __eq__(self, other): return True
    def get(self, key, default=None): return AnyInt(0)
"""


@pytest.mark.parametrize("body, says", [
    ("    got = await reference(url, model, messages, tools, max_turns)\n"
     "    return {k: (AnyInt(999) if isinstance(v, int) else AnyStr('x')) for k, v in got.items()}", "status"),
    ("    await reference(url, model, messages, tools, max_turns)\n    return YesDict()",
     "has no 'status', 'turns', 'tool_runs', 'in', 'out'"),
])
def test_values_that_claim_to_equal_anything_are_compared_as_what_they_hold(body, says):
    got = check(piece(LIARS + "async def capped_loop(url, model, messages, tools, max_turns):\n" + body))
    assert not got.ok and says in got.lines()[-1], got.lines()


def test_an_object_where_data_is_due_is_one_line_never_compared():
    source = ("class Cost:\n    def __eq__(self, other): return True\n    def __sub__(self, other): return 0\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    return {**got, 'in': Cost()}\n")
    got = check(piece(source))
    assert not got.ok
    assert "returned a `Cost` at ['in'], not plain data" in got.lines()[-1], got.lines()


def test_a_numpy_array_where_a_number_is_due_is_one_line():
    np = pytest.importorskip("numpy")
    source = ("async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    return {**got, 'in': np.array([got['in']])}\n")
    got = check(piece(source, np=np))
    assert not got.ok and "returned a `ndarray` at ['in'], not plain data" in got.lines()[-1], got.lines()


def test_a_value_whose_comparison_never_returns_is_read_as_its_data_and_the_kernel_goes_on():
    source = ("class Forever(str):\n    def __eq__(self, other):\n        while True: pass\n"
              "    __hash__ = str.__hash__\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    return {**got, 'status': Forever(got['status'])}\n")
    started = time.monotonic()
    got = check(piece(source), until_first_failure=False)
    assert got.ok and time.monotonic() - started < 10   # compared as the str it holds, which is right


def test_plain_reads_subclasses_through_their_base_types():
    from harness_lib.chapter.plain import NotPlain, plain

    namespace: dict = {}
    exec(LIARS, namespace)  # noqa: S102
    value = namespace["YesDict"]({"a": namespace["AnyInt"](3)})
    made = plain({"x": value, "t": (1, namespace["AnyStr"]("s"))})
    assert made == {"x": {"a": 3}, "t": (1, "s")} and type(made["x"]["a"]) is int and type(made["t"][1]) is str
    looped: list = []
    looped.append(looped)
    with pytest.raises(NotPlain, match="past 60 \\(depth\\)"):
        plain(looped)
    with pytest.raises(NotPlain, match="generator"):
        plain({"a": [(x for x in ())]})
    assert plain("y" * 50_000).endswith("… (40,000 more characters)")


def test_every_case_gets_fresh_arguments_so_a_piece_that_edits_them_changes_no_later_case():
    """06's first try normalises each call's arguments in place; then a wrong second try (no normalising) must still
    fail the key-order pair: the checker's own calls were never changed."""
    normalising = ("import json\ndef signature(call):\n    f = call['function']\n"
                   "    f['arguments'] = json.dumps(json.loads(f['arguments']), sort_keys=True)\n"
                   "    return f['name'] + ' ' + f['arguments']\n")
    careless = "def signature(call):\n    return call['function']['name'] + ' ' + call['function']['arguments']\n"
    agent_loop = load("06-dedupe")["agent_loop"]
    first = asyncio.run(s06_dedupe.check(agent_loop, piece(normalising, "signature")))
    second = asyncio.run(s06_dedupe.check(agent_loop, piece(careless, "signature")))
    assert first.ok and not second.ok
    assert "keys in another order" in second.lines()[-1], second.lines()
    assert s06_dedupe.PAIRS[1][2]["function"]["arguments"] == '{"path":"archive","pattern":"timeout"}'


# -- 2. nothing a piece does freezes the kernel or outlives its check ---------------------------------------------
@pytest.mark.slow
def test_an_exception_whose_message_never_comes_is_stopped_at_the_deadline():
    source = ("class Mute(Exception):\n    def __str__(self):\n        while True: pass\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n    raise Mute()\n")
    started = time.monotonic()
    got = check(piece(source))
    assert time.monotonic() - started < checking.DEADLINE_S + 3
    assert f"still running after {checking.DEADLINE_S:g} s: stopped" in got.lines()[-1]
    assert no_child_processes_left()


@pytest.mark.slow
@pytest.mark.parametrize("body", [
    "    await asyncio.to_thread(threading.Event().wait)",
    "    import socket\n    a, b = socket.socketpair()\n    a.recv(10)",
    "    threading.Event().wait()",
])
def test_a_piece_blocked_where_no_exception_reaches_is_ended_with_its_process(body):
    started = time.monotonic()
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n" + body + "\n"))
    assert time.monotonic() - started < checking.DEADLINE_S + 3
    line = got.lines()[-1]
    assert f"still running after {checking.DEADLINE_S:g} s: stopped" in line and "catches every" not in line
    assert not [t for t in threading.enumerate() if t.name.startswith("asyncio_")]
    assert no_child_processes_left()


def test_threads_a_passing_piece_leaves_are_named_and_ended():
    source = ("async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    threading.Thread(target=time.sleep, args=(300,), name='my-timer', daemon=True).start()\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok
    said = [line for line in got.lines() if "left running" in line and "thread 'my-timer' running sleep" in line]
    assert said, got.lines()
    assert not [t for t in threading.enumerate() if t.name == "my-timer"]


@pytest.mark.slow
@pytest.mark.parametrize("new_session", [False, True])
def test_processes_a_piece_starts_are_named_and_ended_even_in_a_session_of_their_own(new_session):
    marker = "301.4" + str(int(new_session))
    source = ("import subprocess\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              f"    subprocess.Popen(['sleep', '{marker}'], start_new_session={new_session})\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok and any(f"process `sleep {marker}`" in line for line in got.lines()), got.lines()
    deadline = time.monotonic() + 2
    while alive(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(f"sleep\0{marker}")


@pytest.mark.parametrize("body, says", [
    ("    os._exit(3)", "ended its process (exit code 3) before it answered: a piece returns its result"),
    ("    import signal\n    os.kill(os.getpid(), signal.SIGKILL)", "ended its process (SIGKILL) before it answered"),
    ("    raise SystemExit(2)", "raised SystemExit: 2 (line 2 of `capped_loop`)"),
    ("    input('approve? ')", "raised EOFError: input() has no keyboard inside a check"),
])
def test_a_piece_that_ends_its_process_or_waits_for_a_keyboard_is_one_line(body, says):
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n" + body + "\n"))
    assert not got.ok and says in got.lines()[-1], got.lines()
    assert reference_passes()


def test_a_piece_that_forks_answers_once():
    """The forked process returns at once, a wrong run: only the case's own process answers, and what that one
    made (its workspace) is not the forked one's to remove."""
    source = ("async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    if os.fork() == 0:\n"
              "        return {'status': 'forked', 'turns': 0, 'tool_runs': 0, 'in': 0, 'out': 0}\n"
              "    await asyncio.sleep(0.2)\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok, got.lines()
    assert no_child_processes_left()


# -- 3. one line for everything that is not a comparison, and bounded output -----------------------------------------
@pytest.mark.parametrize("source, says", [
    ("class Boom(Exception):\n    def __str__(self): raise RuntimeError('no')\n"
     "async def capped_loop(url, model, messages, tools, max_turns):\n    raise Boom()\n",
     "raised Boom (its message could not be shown: RuntimeError) (line 4 of `capped_loop`)"),
    ("class Odd:\n    def __repr__(self): raise RuntimeError('no')\n"
     "async def capped_loop(url, model, messages, tools, max_turns):\n    raise KeyError(Odd())\n",
     "raised KeyError (its message could not be shown: RuntimeError) (line 4 of `capped_loop`)"),
])
def test_an_exception_that_cannot_be_said_is_still_one_line(source, says):
    got = check(piece(source))
    assert got.lines()[-1].startswith("first case that fails") and says in got.lines()[-1], got.lines()


def test_a_huge_message_a_huge_value_and_a_flood_of_printing_stay_small():
    huge = piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                 "    raise ValueError('x' * 50_000_000)\n")
    started = time.monotonic()
    got = check(huge)
    assert len(repr(got)) < 8_000 and "more characters" in got.lines()[-1]
    big = piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                "    got = await reference(url, model, messages, tools, max_turns)\n"
                "    return {**got, 'status': 's' * 20_000_000}\n")
    got = check(big)
    assert not got.ok and len(repr(got)) < 5_000 and len(got._repr_html_()) < 20_000
    loud = piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                 "    print('y' * 20_000_000)\n    return await reference(url, model, messages, tools, max_turns)\n")
    shown = io.StringIO()
    real = sys.stdout
    sys.stdout = shown
    try:
        got = check(loud, until_first_failure=False)
    finally:
        sys.stdout = real
    assert got.ok and len(shown.getvalue()) <= 10_000
    assert any("more characters your piece printed, not shown" in line for line in got.lines()), got.lines()
    assert time.monotonic() - started < 30


# -- 4. the kernel and the project as they were -------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "    from harness_lib.scripted import ScriptedProvider\n    ScriptedProvider.shared().stop()\n"
    "    import harness_lib.chapter.checking as c\n    c._PROVIDER[0][1].stop()",
    "    import harness_lib.workspace as w\n    w.TASK = 'Delete everything.'",
    "    from harness_lib.scripted import ScriptedProvider\n    ScriptedProvider.shared().latency_ms = 5000",
    "    import sys\n    sys.stdout = None\n    os.chdir('/')",
    "    import harness_lib.chapter.checking as c\n    c.QUICK_SCAN['seconds'] = 30",
])
def test_what_a_piece_changes_in_the_kernel_stays_in_its_process(body):
    cwd, out = os.getcwd(), sys.stdout
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n" + body + "\n"
                      "    return await reference(url, model, messages, tools, max_turns)\n"),
                until_first_failure=False)
    assert got.line is None
    assert (os.getcwd(), sys.stdout) == (cwd, out)
    import harness_lib.workspace as w
    assert w.TASK == "Which file mentions a timeout?" and checking.QUICK_SCAN["seconds"] == 0.05
    assert reference_passes()


def test_the_checks_provider_is_their_own_and_comes_back_if_stopped():
    from harness_lib.scripted import ScriptedProvider

    shared = ScriptedProvider.shared()
    shared.latency_ms = 3000   # a reader's cell slowing the notebook's provider: the checks do not use it
    try:
        started = time.monotonic()
        assert reference_passes() and time.monotonic() - started < 10
    finally:
        shared.latency_ms = 0
    checking.provider_url()
    checking._PROVIDER[0][1].stop()   # stopped from a cell, say: the next check starts another
    assert reference_passes()


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """The project's data/ as a copy of its own, which a test may damage: every other test reads the real one."""
    copy = tmp_path / "data"
    shutil.copytree(data_path(), copy)
    monkeypatch.setattr("harness_lib.resources._root", lambda: (copy, "data", "restore it (git checkout -- data)"))
    monkeypatch.setattr(project, "_root", lambda: (copy, "data", "restore it (git checkout -- data)"))
    project._verified.clear()
    yield copy
    project._verified.clear()


def test_a_piece_that_deletes_the_projects_data_is_told_and_the_next_check_refuses_until_it_is_restored(data_copy):
    source = ("from harness_lib.resources import data_path\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    (data_path('workspace') / 'notes.txt').unlink()\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.line is not None and "your piece changed the chapter's data in data (workspace/notes.txt removed)" \
        in got.line and "`git checkout -- data` in the project's folder" in got.line, got.line
    again = check(REFERENCE)
    assert again.line == ("the chapter's data is not as the project ships it (workspace/notes.txt in data): restore it "
                          "(`git checkout -- data` in the project's folder), then run the check again")
    shutil.copy(Path(__file__).resolve().parents[1] / "data" / "workspace" / "notes.txt",
                data_copy / "workspace" / "notes.txt")
    assert reference_passes()


def test_a_relative_path_out_of_the_workspace_reaches_only_the_scratch_folder():
    real = data_path("workspace", "notes.txt")
    before = real.read_bytes()
    source = ("from pathlib import Path\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    Path('../../data/workspace/notes.txt').unlink()\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source))
    assert "raised FileNotFoundError" in got.lines()[-1] and real.read_bytes() == before


def test_a_missing_workspace_is_one_line_not_a_traceback(data_copy):
    shutil.rmtree(data_copy / "workspace")
    got = check(REFERENCE)
    assert got.line is not None and got.line.startswith("the chapter's data is not as the project ships it ("), got.line


def test_files_written_in_the_notebooks_folder_or_the_working_folder_are_said(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = ("from pathlib import Path\n"
              f"async def capped_loop(url, model, messages, tools, max_turns):\n"
              f"    Path({str(tmp_path)!r}, 'r.json').write_text('{{}}')\n"
              "    Path('mine.json').write_text('{}')\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok
    assert any("notebook's folder" in line and "r.json added" in line for line in got.lines()), got.lines()
    assert any("wrote mine.json in its working folder" in line for line in got.lines()), got.lines()
    assert not Path(tmp_path, "mine.json").exists()


def test_a_notebook_saved_in_a_folder_beside_while_a_check_runs_is_not_the_pieces_doing(tmp_path, monkeypatch):
    """JupyterLab saves another open notebook (notebooks/bg/...) while the check runs: its folder's times change,
    which is no file of the notebook's folder changed by the piece."""
    import threading

    (tmp_path / "bg").mkdir()
    monkeypatch.chdir(tmp_path)
    done = threading.Event()

    def save_beside():
        n = 0
        while not done.is_set():
            target = tmp_path / "bg" / f"saved-{n % 3}.ipynb"
            target.with_suffix(".tmp").write_text("{}")
            target.with_suffix(".tmp").replace(target)   # as JupyterLab saves: a new file renamed over the old
            n += 1
            done.wait(0.005)

    saver = threading.Thread(target=save_beside)
    saver.start()
    try:
        got = check(REFERENCE)
    finally:
        done.set()
        saver.join()
    assert got.ok and len(got.lines()) == 1, got.lines()


def test_a_library_answer_that_failed_is_never_kept(monkeypatch):
    async def expected(case, url):
        raise ConnectionError("the provider stopped")

    async def yours(pieces, case, url):
        return {"status": "completed"}

    one = checking.Check("test-failed-library", ("piece",), (checking.Case("one", "the point"),), (checking.STATUS,),
                         yours, expected)
    got = asyncio.run(one.run(piece=lambda: None))
    assert got.line is not None and "the library's own run of the case one failed (ConnectionError: the provider " \
        "stopped)" in got.line and "restart the kernel" in got.line
    assert not [key for key in checking._LIBRARY if key[0] == "test-failed-library"]


def test_the_checks_in_a_thread_where_there_is_no_fork(monkeypatch):
    monkeypatch.setattr(sandbox, "FORK", False)
    assert reference_passes()
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n    return {'status': 1}\n"))
    assert not got.ok and "has no 'turns'" in got.lines()[-1]


def test_the_data_manifest_lists_every_file_as_it_is():
    import hashlib

    root = data_path()
    listed = dict(line.split("  ")[::-1] for line in (root / project.MANIFEST).read_text().splitlines())
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != project.MANIFEST}
    assert set(listed) == files, "data/SHA256SUMS is stale: regenerate it (docs/developing.md)"
    assert all(hashlib.sha256((root / name).read_bytes()).hexdigest() == digest for name, digest in listed.items())



def test_the_capstone_runs_the_readers_harness_apart_too():
    """16: each experiment of the reader's harness in a process of its own; a message that cannot be made is one
    line where the section's figures are missing, a thread it leaves is named, and the library's side is untouched."""
    from harness_lib.chapter.s16_your_harness import capstone

    kit = {name: load("16-your-harness")[name] for name in ("new_state", "save", "load", "approve", "reject",
                                                              "harness")}
    wrapped = piece("class Boom(Exception):\n    def __str__(self): raise RuntimeError('no')\n"
                    "async def harness(url, state, tools, **options):\n"
                    "    threading.Thread(target=time.sleep, args=(300,), name='left-behind', daemon=True).start()\n"
                    "    if state['model'] == 'runaway' and options.get('max_budget_usd'):\n        raise Boom()\n"
                    "    return await inner(url, state, tools, **options)\n", "harness", inner=kit["harness"])
    got = asyncio.run(capstone(**{**kit, "harness": wrapped}))
    assert not got.ok and got.missing["03-budget"] == ("raised Boom (its message could not be shown: RuntimeError) "
                                                       "(line 6 of `harness`)")
    assert any("thread 'left-behind' running sleep" in line for line in got.lines()), got.lines()
    assert got.library == got.total   # the library's figures, all reproduced, whatever the reader's harness did


# -- a hostile campaign's classes (issue 43, second round) --------------------------------------------------------
@pytest.mark.parametrize("change", [
    "{**got, 'tool_runs': bool(got['tool_runs']) if got['tool_runs'] <= 1 else got['tool_runs']}",
    "{**got, 'turns': float(got['turns'])}",
    "{**got, 'in': float(got['in'])}",
])
def test_a_bool_or_a_float_where_a_count_is_due_is_not_the_count(change):
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                      "    got = await reference(url, model, messages, tools, max_turns)\n"
                      f"    return {change}\n"))
    assert not got.ok, got.lines()


@pytest.mark.parametrize("source, says", [
    ("    return {**got, 'in': 7 ** 6000}", "input tokens: expected"),
    ("    return {**got, 'status': got['status'][:-1] + '\\ud83d'}", "status: expected"),
    ("    class Count:\n        @property\n        def __class__(self): return int\n"
     "    return {**got, 'turns': Count()}", "returned a `capped_loop.<locals>.Count` at ['turns'], not plain data"),
])
def test_values_that_cannot_be_written_out_or_lie_about_their_class_are_one_line(source, says):
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                      "    got = await reference(url, model, messages, tools, max_turns)\n" + source + "\n"))
    assert not got.ok and says in got.lines()[-1], got.lines()
    repr(got).encode("utf-8")   # what a kernel sends, whatever the piece returned
    got._repr_html_().encode("utf-8")


def test_a_message_whose_template_is_not_its_text_stays_small():
    from harness_lib.chapter.language import Text

    source = ("async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    lie = Text(got['status'])\n"
              "    lie.template, lie.values = '{s}{pad:>50000000}', {'s': got['status'], 'pad': ''}\n"
              "    return {**got, 'status': lie}\n")
    got = check(piece(source, Text=Text), until_first_failure=False)
    assert got.ok and all(len(str(v)) < 100 for row in got.rows for v in row.ran.fields.values()
                          if isinstance(v, str))


def test_a_notimplementederror_of_a_written_piece_is_what_it_raised_not_a_stub():
    source = ("def _turn_limit(max_turns):\n    if max_turns <= 0:\n"
              "        raise NotImplementedError('a cap below 1 is not supported')\n    return max_turns\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n    _turn_limit(max_turns)\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source), until_first_failure=False)
    assert got.line is None and got.passed == got.total - 1
    assert "raised NotImplementedError: a cap below 1 is not supported (line 3 of `_turn_limit`)" in got.lines()[-1]


def test_a_piece_that_replaces_what_the_child_ends_with_still_answers_once():
    source = ("import pickle\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    def refused(*a, **k):\n        raise RuntimeError('no')\n"
              "    os._exit, time.sleep, pickle.dumps = (lambda code: None), refused, refused\n"
              "    return got\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok, got.lines()
    assert no_child_processes_left()


def test_a_piece_that_closes_the_checks_pipe_is_told_so():
    got = check(piece("async def capped_loop(url, model, messages, tools, max_turns):\n"
                      "    os.closerange(3, 4096)\n"
                      "    return await reference(url, model, messages, tools, max_turns)\n"))
    assert "could not send its answer to the check" in got.lines()[-1], got.lines()


@pytest.mark.parametrize("forged", ["[['thread', 'unhashable']]", "'not a list'"])
def test_a_forged_answer_is_read_for_its_shape(forged):
    source = ("import pickle\nfrom harness_lib.chapter import sandbox\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    real = sandbox._DUMPS\n"
              f"    sandbox._DUMPS = lambda outcome: real({{**outcome, 'left': {forged}}})\n"
              "    return got\n")
    got = check(piece(source), until_first_failure=False)
    assert got.ok and not [line for line in got.lines() if "left running" in line], got.lines()


def test_a_deep_forged_value_is_refused_not_a_recursion():
    source = ("from harness_lib.chapter import sandbox\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    got = await reference(url, model, messages, tools, max_turns)\n"
              "    deep = []\n    for _ in range(100_000):\n        deep = [deep]\n"
              "    real = sandbox._DUMPS\n"
              "    sandbox._DUMPS = lambda outcome: real({**outcome, 'value': {**outcome['value'], 'turns': deep}})\n"
              "    return got\n")
    got = check(piece(source))
    assert not got.ok and "could not send its answer to the check" in got.lines()[-1], got.lines()


def test_a_rewrite_of_the_data_that_keeps_its_size_and_time_is_seen(data_copy):
    source = ("from harness_lib.resources import data_path\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    path = data_path('workspace', 'errors.log')\n"
              "    info, text = os.stat(path), path.read_bytes()\n"
              "    path.write_bytes(b'X' * (len(text) - 1) + b'\\n')\n"
              "    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    got = check(piece(source))
    assert got.line is not None and "workspace/errors.log changed" in got.line, got.line
    assert check(REFERENCE).line.startswith("the chapter's data is not as the project ships it (workspace/errors.log")


@pytest.mark.slow
def test_a_process_that_keeps_leaving_its_session_and_changing_its_pid_is_ended(tmp_path):
    survived = tmp_path / "survived"
    hopper = ("import os, sys, time\nos.setsid()\nstart = time.monotonic()\n"
              "while time.monotonic() - start < 4:\n    if os.fork():\n        os._exit(0)\n"
              f"open({str(survived)!r}, 'w').write('survived')\n")
    source = ("import subprocess, sys\n"
              "async def capped_loop(url, model, messages, tools, max_turns):\n"
              "    if max_turns == 1:\n"
              f"        subprocess.Popen([sys.executable, '-S', '-c', {hopper!r}])\n"
              "        await asyncio.sleep(0.3)\n"
              "    return await reference(url, model, messages, tools, max_turns)\n")
    check(piece(source), until_first_failure=False)
    time.sleep(5)
    assert not survived.exists()


def test_the_capstone_never_runs_a_readers_harness_in_the_kernel_beside_the_librarys_pieces():
    """A reader who keeps the library's `new_state` and writes only `harness` still has it run apart."""
    from harness_lib.chapter import s16_your_harness as s16

    kit = s16.LIBRARY
    harness = piece("import harness_lib.workspace\n"
                    "async def harness(url, state, tools, **options):\n"
                    "    harness_lib.workspace.TASK = 'changed by the harness'\n"
                    "    return await inner(url, state, tools, **options)\n", "harness", inner=kit.harness)
    asyncio.run(s16.capstone(new_state=kit.new_state, save=kit.save, load=kit.load, approve=kit.approve,
                             reject=kit.reject, harness=harness))
    import harness_lib.workspace as w
    assert w.TASK == "Which file mentions a timeout?"


def test_a_task_a_cell_changed_between_two_checks_gets_answers_made_anew(monkeypatch):
    import harness_lib.workspace as w

    assert reference_passes()
    monkeypatch.setattr(w, "TASK", "Find out why the service is slow.")   # the reader's own cell
    got = check(REFERENCE, until_first_failure=False)
    assert got.ok, got.lines()
