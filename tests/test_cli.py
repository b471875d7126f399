"""The command line is a contract: its line format, its JSON, its exit codes."""

import json
import subprocess
import sys

import pytest

from harness_lib.cli import main


def cli(*args):
    return subprocess.run([sys.executable, "-m", "harness_lib", *args], capture_output=True, text=True, timeout=60)


def test_run_prints_the_chapters_line(capsys):
    assert main(["run", "plan", "--max-turns", "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("plan, cap 20    turns=3  tools=2  in=815  out=70  cost=$0.002470  ms=")
    assert out[0].endswith("status=completed")
    assert out[1] == '   answer: "errors.log mentions a timeout: worker 7 timed out after 30000 ms."'
    assert out[2] == "   per-turn prompt tokens: 204, 269, 342"


def test_json_has_the_documented_fields(capsys):
    assert main(["run", "runaway", "--budget", "0.01", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert {"run_id", "scenario", "status", "interruption", "turns", "tool_runs", "prompt_tokens",
            "completion_tokens", "cost_usd", "wall_ms", "answer", "per_turn_prompt_tokens", "error"} <= set(s)
    assert (s["status"], s["interruption"]) == ("budget_exceeded", {"type": "max_budget"})
    assert (s["turns"], s["cost_usd"]) == (9, 0.01078)


@pytest.mark.slow
def test_approval_across_two_processes(tmp_path):
    first = cli("run", "destructive", "--state-dir", str(tmp_path), "--run-id", "r1", "--json")
    s = json.loads(first.stdout)
    assert first.returncode == 0 and s["status"] == "interrupted" and s["interruption"]["callId"] == "c2"
    second = cli("resume", "r1", "--state-dir", str(tmp_path), "--reject", "c2", "--reason", "no", "--json")
    s = json.loads(second.stdout)
    assert (s["status"], s["turns"]) == ("completed", 3)
    assert s["answer"] == "I did not delete anything: you declined the deletion."
    again = cli("resume", "r1", "--state-dir", str(tmp_path), "--approve", "c2")
    assert again.returncode == 2 and "completed" in again.stderr


@pytest.mark.parametrize("args", [["run", "plan", "--max-turns", "-1"], ["run", "plan", "--budget", "nan"],
                                  ["run", "plan", "--tool-errors", "loud"]])
def test_usage_errors_exit_2(args):
    r = cli(*args)
    assert r.returncode == 2 and r.stderr


def test_broken_state_file_exits_2_and_is_left_alone(tmp_path):
    (tmp_path / "r9.json").write_text('{"run_id": "r9", "messa')
    r = cli("resume", "r9", "--state-dir", str(tmp_path))
    assert r.returncode == 2 and "r9.json" in r.stderr
    assert (tmp_path / "r9.json").read_text() == '{"run_id": "r9", "messa'


def test_cancel_after(capsys):
    assert main(["run", "slow", "--cancel-after", "0.3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["status"] == "interrupted" and s["interruption"] == {"type": "cancelled", "reason": "user pressed Stop"}
    assert s["wall_ms"] < 1000


def test_step_lines_on_stderr_show_a_models_arguments_without_obeying_them(capsys):
    """--stream prints each tool call on stderr: a model's escape sequence is shown, not sent raw."""
    from harness_lib.cli import _Visible
    from harness_lib.trace import Trace

    trace = Trace(None, on_event=_Visible(steps=True))
    trace.emit("r", "tool_start", toolName="read_file", args='{"path":"a\r\x1b[2Kb"}', callId="c1")
    trace.emit("r", "retry", problem="HTTP 503: \x1b]0;pwned\x07", delayS=0.5)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\x07" not in err
    assert "\\x1b[2K" in err and "\\x1b]0;pwned" in err


def test_a_subagent_is_priced_at_the_runs_prices(tmp_path, capsys):
    """`run delegate` at the reader's prices: the child's spend, counted in the parent's total and budget,
    is at those prices too (it was at the chapter's $2 / $12 whatever the run's)."""
    from harness_lib.state import load
    from harness_lib.trace import read
    trace = tmp_path / "t.jsonl"
    assert main(["run", "delegate", "--price-in", "1", "--price-out", "1", "--state-dir", str(tmp_path),
                 "--run-id", "d1", "--trace", str(trace), "--json"]) == 0
    (sub,) = load(tmp_path, "d1").subruns
    child = [e for e in read(trace) if e["type"] == "turn" and e["runId"] == sub["runId"]]
    tokens = sum(e["prompt_tokens"] + e["completion_tokens"] for e in child)
    assert len(child) == sub["turns"] >= 1 and sub["costUsd"] == pytest.approx(tokens / 1e6, abs=1e-12)


def test_prices_given_to_a_scripted_run_name_the_scripted_provider(capsys):
    """The line that says a run's prices said "None at None" when no server was named (the scripted provider)."""
    assert main(["run", "plan", "--price-in", "2", "--price-out", "12.5", "--json"]) == 0
    err = capsys.readouterr().err
    assert "plan, cap 50: the scripted provider; $2 / $12.5 per million tokens" in err and "None" not in err, err


# -- Ctrl-C while Python imports the package, before harness_lib/__main__.py's first line --------------------------
# `python -m harness_lib` imports the package (harness_lib/__init__.py) before __main__.py runs; a Ctrl-C landing
# in that import printed a KeyboardInterrupt traceback through harness_lib/__init__.py (the operator campaign
# saw it once, timed at spawn + 0.25 s). The package now puts __main__'s quiet handler in place at its first
# lines, only when it is being imported as the start of `python -m harness_lib`.
INTERRUPT_AT_TYPING = '''
import os, signal, sys
class Interrupt:  # Ctrl-C exactly when harness_lib/__init__.py imports typing
    def find_spec(self, name, path=None, target=None):
        if name == "typing":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
'''


def test_ctrl_c_while_python_imports_the_package_exits_130_without_a_traceback(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_AT_TYPING)
    import os
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "harness_lib", "--help"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert (done.returncode, done.stderr) == (130, ""), done.stderr[-600:]


@pytest.mark.parametrize("orig_argv, ours", [
    (["-m", "harness_lib", "run", "plan"], True),
    (["-mharness_lib"], True),
    (["-B", "-X", "importtime", "-W", "error", "-m", "harness_lib"], True),
    (["-m", "harness_lib.chapter.translations", "build"], False),   # its own Ctrl-C: a KeyboardInterrupt
    (["-m", "pytest"], False),
    (["script.py", "-m", "harness_lib"], False),
])
def test_only_python_m_harness_lib_puts_the_quiet_handler_in_place_at_import(orig_argv, ours):
    code = ("import signal, sys\nsys.argv[:1] = ['-m']\nsys.orig_argv = [sys.executable, *%r]\n"
            "import harness_lib\nprint(signal.getsignal(signal.SIGINT) is harness_lib._early)" % (orig_argv,))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == str(ours), done.stderr[-600:]


def test_importing_the_package_changes_no_signal_handler():
    # compared with what the child had before: it inherits its parent's disposition (an xdist worker's SIGINT is
    # ignored, and so is its children's: Python then leaves SIG_IGN in place instead of its own handler)
    done = subprocess.run([sys.executable, "-c", "import signal\nbefore = signal.getsignal(signal.SIGINT)\n"
                           "import harness_lib\nprint(signal.getsignal(signal.SIGINT) is before)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr


# -- a signal while asyncio builds the run's event loop ----------------------------------------------------------
# The operator campaign saw it once (SIGINT twice, the first 0.34 s after the spawn): the signal's exception left
# a half-built event loop, whose clean-up printed "AttributeError: ... no attribute '_ssock'", and the run's
# coroutine, made before the loop, "was never awaited". The loop is now built with the signals held.
SIGNAL_IN_THE_LOOPS_MAKING = '''
import asyncio.selector_events as se, os, signal, sys
made = se.BaseSelectorEventLoop._make_self_pipe
def interrupted(self):  # the signal lands exactly while the loop makes its self-pipe
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    made(self)
se.BaseSelectorEventLoop._make_self_pipe = interrupted
from harness_lib.cli import main
sys.exit(main(sys.argv[2:]))
'''


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("command", [["run", "plan"], ["resume", "r1"]])
def test_a_signal_while_the_event_loop_is_built_is_one_line(tmp_path, sig, code, command):
    if command[0] == "resume":
        assert main(["run", "runaway", "--run-id", "r1", "--max-turns", "1", "--state-dir", str(tmp_path)]) == 0
    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_THE_LOOPS_MAKING, sig, *command, "--state-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == code and done.stderr.startswith("stopped by "), done.stderr[-800:]
    assert len(done.stderr.splitlines()) == 1, done.stderr[-800:]


def test_on_python_3_10_without_asyncio_runner_a_run_still_runs(monkeypatch, capsys):
    import asyncio
    monkeypatch.delattr(asyncio, "Runner")
    assert main(["run", "plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"


# -- a second signal once the run is over, while its event loop stops and closes -------------------------------
# The operator campaign saw it once (SIGINT twice, at saved + 0.195 s): the first stopped the run; the second came
# once the run's handlers were gone and its exception was raised inside asyncio, halfway through loop.close() (the
# self-pipe closed but kept, so the loop's __del__ closed it again: "ValueError: Invalid file descriptor: -1"), or
# in the callback that stops the loop (logged as a traceback; the loop never stopped and the process hung, deaf to
# any signal). Such a signal is now held until the loop is closed, then acted on.
SIGNAL_AS_THE_LOOP_ENDS = '''
import asyncio.base_events as be, os, signal, socket, sys
from harness_lib import loop
sig, moment = getattr(signal, sys.argv[1]), sys.argv[2]
recorded = loop.record
def record(*args):  # the first signal: while the run goes (it stops at the next step)
    if not getattr(record, "sent", False):
        record.sent = True
        os.kill(os.getpid(), sig)
    return recorded(*args)
loop.record = record
def again():  # the second: exactly at the moment asked for
    if not getattr(again, "sent", False):
        again.sent = True
        os.kill(os.getpid(), sig)
stop_the_loop = be._run_until_complete_cb
def stopping(fut):  # the run's task has ended and tells the loop to stop
    again()
    stop_the_loop(fut)
closed = socket.socket.close
def close(self):  # the loop has closed its self-pipe's reading end, not yet forgotten it
    closed(self)
    if sys._getframe(1).f_code.co_name == "_close_self_pipe":
        again()
if moment == "stopping":
    be._run_until_complete_cb = stopping
else:
    socket.socket.close = close
from harness_lib.cli import main
sys.exit(main(sys.argv[3:]))
'''


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("moment", ["stopping", "closing"])
def test_a_second_signal_while_the_event_loop_ends_stops_in_one_line(tmp_path, sig, code, moment):
    from harness_lib.state import load
    done = subprocess.run([sys.executable, "-c", SIGNAL_AS_THE_LOOP_ENDS, sig, moment, "run", "runaway", "--budget",
                           "0.01", "--run-id", "r1", "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=30)   # (a hang, before: the loop never stopped)
    lines = done.stderr.splitlines()
    assert done.returncode == code and len(lines) == 2 and lines[1].startswith("stopped by "), done.stderr[-1500:]
    assert load(tmp_path, "r1").status == "interrupted"   # saved at the step the first signal stopped it
    assert main(["resume", "r1", "--state-dir", str(tmp_path)]) == 0
    assert load(tmp_path, "r1").status == "budget_exceeded"
