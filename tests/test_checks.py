"""The checks of the reader's pieces (harness_lib/chapter/checks/): each notebook's check cell passes the
reference on every case, fails each mistake of tests/mistakes.py with its hint, says one line for its exercise's
stub; and the checking itself holds up against a piece that raises, hangs, returns nonsense or deletes files."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import time

import pytest
from built_cells import load
from checked import check_cells, parameters, report, stems_with_checks
from mistakes import every

from harness_lib.chapter import checking, sandbox
from harness_lib.chapter.checks import s02_turn_cap
from harness_lib.resources import data_path

STEMS = stems_with_checks()
MISTAKES = every()
EXERCISES = load.__globals__["NOTEBOOKS"] / "exercises"


def cases(stem: str) -> list[tuple[str, int]]:
    return [(stem, i) for i in range(len(check_cells(stem)))]


@pytest.mark.slow
@pytest.mark.parametrize("stem, which", [c for s in STEMS for c in cases(s)], ids=lambda v: str(v))
def test_the_reference_passes_every_case(stem, which):
    got = report(stem, which)
    assert got.line is None and got.ok, repr(got)
    assert got.total >= 8 and len(got.lines()) == 1   # "N of N cases pass" (16: "... 60 of the 60 exact figures")
    assert f"{got.total} of {got.total} cases pass" in got.lines()[0] or \
        f"reproduces {got.total} of the {got.total} exact figures" in got.lines()[0]


@pytest.mark.slow
@pytest.mark.parametrize("stem, mistake", [(s, m) for s, ms in MISTAKES.items() for m in ms],
                         ids=lambda v: v if isinstance(v, str) else v.what[:40])
def test_each_mistake_fails_its_check_with_its_hint(stem, mistake):
    # Every case, as the reader's check runs them: the hint is chosen from the pattern of all the failing cases.
    got = report(stem, namespace=load(stem, edits=mistake.edits))
    assert not got.ok, f"{mistake.what}: every case passes"
    assert mistake.hint in (getattr(got, "hint", None) or got.lines()[-1]), got.lines()


def test_every_check_knows_at_least_three_mistakes():
    assert set(STEMS) <= set(MISTAKES), f"no mistakes written out for {sorted(set(STEMS) - set(MISTAKES))}"
    assert all(len(ms) >= 3 for ms in MISTAKES.values())


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_an_exercises_stub_is_one_line_naming_the_piece(stem):
    got = report(stem, namespace=load(stem, folder=EXERCISES))
    assert got.line is not None and got.line.startswith("not written yet: write `"), repr(got)
    assert repr(got) == got.line and got._repr_html_() is None


# -- the checking itself, on 02's check ---------------------------------------------------------------------
def reference():
    return load("02-turn-cap")["capped_loop"]


def run_check(piece):
    return asyncio.run(s02_turn_cap.check(piece))


BEFORE: set[int] = set()   # this worker's own children as a test starts (kernels, servers of earlier tests)


@pytest.fixture(autouse=True)
def _children_before():
    BEFORE.clear()
    BEFORE.update(p for p, _c in sandbox._descendants(os.getpid()))


def no_case_left_running():
    """No process of a case is left: each is this process's child, ended and reaped with its case."""
    def new():
        return [c for p, c in sandbox._descendants(os.getpid()) if p not in BEFORE]
    deadline = time.monotonic() + 2
    while new() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not new()


def test_the_table_and_the_tally_line_read_as_the_issue_says():
    got = run_check(reference())
    text = repr(got)
    assert text.splitlines()[0].startswith("✓ runaway, cap 1: max_turns_exceeded, 1 turn")
    assert text.splitlines()[-1] == "12 of 12 cases pass" and text.count("✓") == 12
    assert max(map(len, text.splitlines())) <= checking.WIDTH
    assert "<table" in got._repr_html_() and "<p>12 of 12 cases pass</p>" in got._repr_html_()


def test_a_reader_s_check_runs_every_case_and_the_hint_reads_the_pattern_of_all_failures():
    """A reader's check runs every case, and its hint line ends on which fields differ across every failing case;
    ``until_first_failure`` (the hostile pieces' tests, which need only a verdict) stops at the first."""
    stem = "02-turn-cap"
    mistake = MISTAKES[stem][0]
    whole = report(stem, namespace=load(stem, edits=mistake.edits))
    first = report(stem, namespace=load(stem, edits=mistake.edits), until_first_failure=True)
    assert len(whole.rows) == whole.total == 12 and not whole.not_run
    failing = [row for row in whole.rows if not row.passed]
    assert len(first.rows) == whole.rows.index(failing[0]) + 1 and first.not_run
    assert mistake.hint in whole.hint and f"{len(failing)} cases fail; what differs: " in whole.hint
    assert not checking.UNTIL_FIRST_FAILURE.get()   # set for that report only


@pytest.mark.slow
@pytest.mark.parametrize("body, hang", [
    ("await asyncio.sleep(3600)", "awaits for ever"),
    ("while True:\n        pass", "never awaits"),
    ("while True:\n        try:\n            await asyncio.sleep(3600)\n        except asyncio.CancelledError:\n"
     "            pass", "swallows its cancellation"),
    ("while True:\n        try:\n            time.sleep(0.01)\n        except BaseException:\n            pass",
     "catches every exception"),
], ids=lambda v: v if " " in v and len(v) < 30 else None)
def test_a_piece_that_hangs_is_stopped_and_nothing_is_left_running(body, hang):
    """The case's process is ended at the deadline, whatever the piece catches: no thread of the kernel to
    interrupt, no grace to wait out."""
    namespace: dict = {"asyncio": asyncio, "time": time}
    exec(f"async def capped_loop(url, model, messages, tools, max_turns):\n    {body}\n", namespace)  # noqa: S102
    started = time.perf_counter()
    got = run_check(namespace["capped_loop"])
    took = time.perf_counter() - started
    assert got.passed == 0 and got.rows[0].ran.hung and len(got.rows) == 1 and len(got.not_run) == 11
    assert f"still running after {checking.DEADLINE_S:g} s: stopped" in got.lines()[-1]
    assert "never stopped the runaway" in got.lines()[-1]
    assert took < checking.DEADLINE_S + 2, took   # stopped at the first case, not at each
    assert no_case_left_running()


def test_a_piece_that_raises_is_one_line_with_the_case_and_the_line():
    namespace: dict = {}
    exec(compile("async def capped_loop(url, model, messages, tools, max_turns):\n    x = 1\n    return {}['turns']\n",
                 "<your cell>", "exec"), namespace)  # noqa: S102
    got = run_check(namespace["capped_loop"])
    assert got.passed == 0 and len(got.rows) == 12
    assert got.lines()[-1] == "first case that fails: runaway, cap 1 (raised KeyError: 'turns' (line 3 of " \
                              "`capped_loop`)). 12 cases fail; what differs: raised an exception (12)."


@pytest.mark.parametrize("value, says", [
    (None, "`capped_loop` returned NoneType: return a dict with status, turns, tool_runs, in, out"),
    ({"status": "completed"}, "what `capped_loop` returned has no 'turns', 'tool_runs', 'in', 'out'"),
])
def test_a_piece_that_returns_something_else_is_told_what_to_return(value, says):
    async def capped_loop(url, model, messages, tools, max_turns):
        return value
    got = run_check(capped_loop)
    assert got.passed == 0 and says in got.lines()[-1]


def test_what_is_not_a_function_and_a_stub_are_one_line_each():
    got = asyncio.run(s02_turn_cap.check("capped_loop"))
    assert got.line == "`capped_loop` is not a function yet: run the cell above that defines it (it is str)"
    namespace: dict = {}
    exec(compile("async def capped_loop(url, model, messages, tools, max_turns):\n    'doc'\n"
                 "    # YOUR CODE HERE\n    raise NotImplementedError\n", "<cell>", "exec"), namespace)  # noqa: S102
    got = run_check(namespace["capped_loop"])
    assert got.line == "not written yet: write `capped_loop` in its cell above, where it says YOUR CODE HERE"


def test_a_piece_that_deletes_files_deletes_them_in_a_throwaway_copy():
    def digest():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in data_path("workspace").iterdir()}

    before = digest()

    async def capped_loop(url, model, messages, tools, max_turns):
        delete = next(t for t in tools if t.name == "delete_file")
        for name in ("errors.log", "access.log", "notes.txt"):
            await delete.run({"path": name}, checking_context())
        return await reference()(url, model, messages, tools, max_turns)

    got = run_check(capped_loop)
    assert digest() == before   # the project's workspace as it was; each case had a copy of its own
    assert not got.ok and "message 4 of the transcript" in got.lines()[-1]   # list_files found them gone


def checking_context():
    from harness_lib.tools import ToolContext
    return ToolContext(run_id="reader", call_id="x")


def test_the_check_changes_none_of_the_readers_variables():
    namespace = {**parameters("02-turn-cap"), **load("02-turn-cap")}   # the notebook's names, as in its kernel
    before = {k: (id(v), repr(v)) for k, v in namespace.items() if not k.startswith("__")}
    report("02-turn-cap", namespace=namespace)
    after = {k: (id(v), repr(v)) for k, v in namespace.items() if k in before}
    assert before == after and {k for k in namespace if not k.startswith("__")} - set(before) == {"check"}


@pytest.mark.slow
def test_the_librarys_side_is_computed_once():
    run_check(reference())
    kept = dict(checking._LIBRARY)
    run_check(reference())
    assert kept and all(checking._LIBRARY[k] is v for k, v in kept.items())


# -- in a kernel: the stub from any cell, and the toolbar's Stop during a check -------------------------------
KERNEL_SETUP = """
import asyncio, threading
from harness_lib.chapter.checks.s02_turn_cap import check

async def capped_loop(url, model, messages, tools, max_turns):
    '''a stub, as an exercise notebook has it'''
    # YOUR CODE HERE
    raise NotImplementedError
"""

HANGING = """
async def capped_loop(url, model, messages, tools, max_turns):
    print("the case is under way", flush=True)
    await asyncio.sleep(3600)
"""


def _execute(kc, code, on_output=None, timeout=60):
    """Run ``code``; (its reply's status, its error output or None, its text)."""
    error, text = [], []

    def hook(msg):
        kind = msg["msg_type"]
        if kind == "error":
            error.append(msg["content"])
        elif kind == "stream":
            text.append(msg["content"]["text"])
            if on_output:
                on_output(msg["content"]["text"])
    reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    return reply["content"]["status"], (error[0] if error else None), "".join(text)


@pytest.mark.slow
def test_in_a_kernel_a_stub_says_one_line_and_stop_ends_a_check_leaving_nothing_running():
    jupyter_client = pytest.importorskip("jupyter_client.manager")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3")
    try:
        assert _execute(kc, KERNEL_SETUP)[0] == "ok"
        status, error, _ = _execute(kc, "result = await capped_loop('u', 'plan', [], [], 3)")
        assert status == "error" and error["ename"] == "NotImplementedError"
        assert error["traceback"] == ["NotImplementedError: not written yet: write `capped_loop` in its cell above, "
                                      "where it says YOUR CODE HERE"]
        status, error, _ = _execute(kc, "raise NotImplementedError('of the library')")   # not a stub: as usual
        assert status == "error" and len(error["traceback"]) > 1
        status, error, _ = _execute(kc, "print(result['turns'])")   # a cell after the stub's: for want of it
        assert error["traceback"] == ["NameError: name 'result' is not defined: a cell above could not run, because "
                                      "`capped_loop` is not written yet; write it where it says YOUR CODE HERE, then "
                                      "run the cells again"]
        written = "async def capped_loop(url, model, messages, tools, max_turns):\n    return {}\n"
        assert _execute(kc, written)[0] == "ok"   # written: a NameError is a NameError again
        status, error, _ = _execute(kc, "print(result['turns'])")
        assert error["ename"] == "NameError" and len(error["traceback"]) > 1
        assert _execute(kc, KERNEL_SETUP)[0] == "ok"   # the stub again
        status, error, text = _execute(kc, "print((await check(capped_loop)).line)")
        assert (status, text.strip()) == ("ok", "not written yet: write `capped_loop` in its cell above, where it "
                                                "says YOUR CODE HERE")
        assert _execute(kc, HANGING)[0] == "ok"
        pressed = []
        msg_id = kc.execute("await check(capped_loop)")
        while not pressed:   # Stop pressed once the reader's piece is running, an event of the check, not a delay
            msg = kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                km.interrupt_kernel()
                pressed.append(time.monotonic())
        errors = []
        while True:
            msg = kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                errors.append(msg["content"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        took = time.monotonic() - pressed[0]
        assert [e["traceback"] for e in errors] == [["Stopped: user pressed Stop; the cell's partial result was "
                                                     "discarded. Run it again for a whole one."]]
        assert took < 1.0, took   # the case awaited, so it heard the cancel at once: no deadline, no grace
        _, _, text = _execute(kc, "import os\nfrom harness_lib.chapter import sandbox\n"
                                  "print(sandbox._descendants(os.getpid()))")
        assert text.strip() == "[]", text   # the case's process, ended with the check
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_stop_pressed_while_the_library_runs_keeps_no_answer_for_the_case():
    """The library's run catches the cancellation and returns, interrupted: that is no answer to keep for the case."""
    import os
    import signal

    from harness_lib.chapter.stop_button import Stopped

    pressed = []

    async def expected(case, url):
        if not pressed:   # the first time: Stop lands while the library's side runs
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            try:
                await asyncio.sleep(5)   # the handler cancels the check's task meanwhile
            except asyncio.CancelledError:   # and the library's run, as harness_lib.run does, returns
                return {"status": "interrupted"}
        return {"status": "completed"}

    async def yours(pieces, case, url):
        return {"status": "completed"}

    check = checking.Check("test-stop", ("piece",), (checking.Case("one", "the point"),), (checking.STATUS,),
                           yours, expected)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    unretrieved = []
    try:
        with pytest.raises(Stopped):
            loop = asyncio.new_event_loop()
            loop.set_exception_handler(lambda _loop, context: unretrieved.append(context.get("message")))
            try:
                loop.run_until_complete(check.run("http://unused", piece=lambda: None))
            finally:
                loop.close()
        gc.collect()   # the library's task, ended by the Stop with nobody awaiting it: nothing to log from here
        assert unretrieved == []
        assert not [key for key in checking._LIBRARY if key[0] == "test-stop"]
        assert asyncio.run(check.run("http://unused", piece=lambda: None)).ok
    finally:
        signal.signal(signal.SIGINT, previous)
        for key in [key for key in checking._LIBRARY if key[0] == "test-stop"]:
            checking._LIBRARY.pop(key)


def test_a_failing_case_shows_only_what_differs_within_the_width():
    """The text form: one line a passing case, then for a failing one only the fields that differ, each with both
    sides, wrapped at ``WIDTH``; the HTML form: the same cells, its lines' code set as code."""
    mistake = next(m for m in MISTAKES["04-five-exits"] if "interruption" in m.hint)
    got = report("04-five-exits", namespace=load("04-five-exits", edits=mistake.edits))
    text = repr(got)
    assert max(map(len, text.splitlines())) <= checking.WIDTH
    failing = [row for row in got.rows if not row.passed]
    expected, yours = failing[0].sides(got.fields)
    assert expected != yours and all(part.split(":")[0] in yours for part in expected.split("; "))
    html = got._repr_html_()
    assert "`" not in html.split("</table>")[1] and "<code>" in html.split("</table>")[1]


def test_the_capstones_first_difference_says_what_the_run_behind_it_shows():
    """16: a figure that differs is explained by the first run behind it that differs from the library's, in its own
    words, then the section's lesson (not the section's sentence alone)."""
    mistake = next(m for m in MISTAKES["16-your-harness"] if "`>`" in m.what)
    got = report("16-your-harness", namespace=load("16-your-harness", edits=mistake.edits))
    assert "The run behind it that differs first: runaway, cap 8 (turns: the library's 8, yours 9). section 2:" \
        in got.lines()[1], got.lines()


def test_a_key_not_returned_is_said_with_what_it_means_and_a_spelling_of_it_seen():
    async def capped_loop(url, model, messages, tools, max_turns):
        got = await reference()(url, model, messages, tools, max_turns)
        return {**{k: v for k, v in got.items() if k != "tool_runs"}, "tool_run": got["tool_runs"]}

    got = run_check(capped_loop)
    assert "what `capped_loop` returned has no 'tool_runs', but has 'tool_run': a key spelt another way?" \
        in got.hint and "Hint: `tool_runs` counts the tools that ran" in got.hint, got.hint
