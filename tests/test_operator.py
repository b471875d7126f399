"""Operating a run safely (issue 9): one owner, options that travel, writes at most once, clean signals
and environment faults, a state file that cannot be turned against the workspace, safe terminal output.

The campaign (``tests/operator_campaign.py``, also a script that prints the figures of docs/reliability.md, issue
20's cases included) has its timed groups run by the ``slow`` test at the end: 100 races between two commands on
one run, signals at random instants, a disk filled under a running run (a tmpfs). Its quick groups (tampered
state files, bad environments, hostile text, the issue's other reports) run one case per test here; issue 20's,
one per test in ``tests/test_hostile.py``: each case once in ``make test``.
"""

import json
import os
import socket
import subprocess
import sys
import time

import operator_campaign as C
import pytest
import warm

from harness_lib.cli import main
from harness_lib.lock import RunLock, RunLockError, lock_path
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import StateFileError, load, new_run, save
from harness_lib.terminal import json_safe, visible
from harness_lib.trace import read
from harness_lib.workspace import SYSTEM_PROMPT, TASK


def _ok(case):
    assert case.problems == [], case.problems
    assert case.tracebacks == 0 and case.writes_doubled == 0 and case.turns_paid_twice == 0 and not case.run_lost


# -- quick groups of the campaign, one case per test --------------------------------------------------------------
@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.mark.parametrize("name", list(C.TAMPERS))
def test_a_tampered_state_file_is_refused_and_nothing_happens(name, provider):
    _ok(C.tamper_case(name, provider))


def test_bad_environments_are_one_line_and_exit_2(provider):
    cases = C.env_cases(provider)
    assert len(cases) >= 9
    for case in cases:
        _ok(case)


def test_hostile_text_reaches_the_terminal_visible():
    for case in C.hostile_text_cases():
        _ok(case)


@pytest.mark.slow
def test_the_issues_other_reports(provider):
    cases = C.issue_cases(provider)
    assert len(cases) == 6
    for case in cases:
        _ok(case)


# -- mechanisms -----------------------------------------------------------------------------------------------------
def test_one_owner_at_a_time_and_the_lock_names_its_holder(tmp_path):
    with RunLock(tmp_path, "r1"):
        with pytest.raises(RunLockError, match=rf"run r1 is in use by process {os.getpid()} "):
            RunLock(tmp_path, "r1").__enter__()
        assert json.loads(lock_path(tmp_path, "r1").read_text())["pid"] == os.getpid()
        with RunLock(tmp_path, "r2"):  # another run is another lock
            pass
    assert not lock_path(tmp_path, "r1").exists()
    with RunLock(tmp_path, "r1"):  # free again
        pass


def test_a_live_holder_refuses_resume_a_dead_one_does_not(tmp_path, provider):
    state = new_run(SYSTEM_PROMPT, TASK, "plan", run_id="r1")
    state.meta["scenario"] = "plan"
    save(state, tmp_path)  # "running": crashed, or live?
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from harness_lib.lock import RunLock\n"
                               f"with RunLock({str(tmp_path)!r}, 'r1'): print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    code, _, err = C.in_process("resume", "r1", "--state-dir", tmp_path, "--base-url", provider.base_url)
    assert code == 2 and f"in use by process {holder.pid}" in err and len(err.strip().splitlines()) == 1
    holder.kill()  # SIGKILL: the kernel lets go of the lock
    holder.wait()
    code, out, err = C.in_process("resume", "r1", "--state-dir", tmp_path, "--base-url", provider.base_url, "--json")
    assert code == 0 and json.loads(out)["status"] == "completed", err


def test_a_scripted_run_is_not_moved_to_a_real_model_on_resume(tmp_path, provider):
    """Its model is a script's name and its prices the chapter's: moved to another endpoint it would ask
    for 'runaway' and go on costing made-up dollars. Refused in one line, the state file untouched; the
    scripted provider (here, another one) is still welcome."""
    assert main(["run", "runaway", "--run-id", "r1", "--max-turns", "2", "--state-dir", str(tmp_path)]) == 0
    before = (tmp_path / "r1.json").read_bytes()
    with socket.socket() as free:  # a port nothing listens on: an endpoint that cannot say it is scripted
        free.bind(("127.0.0.1", 0))
        elsewhere = f"http://127.0.0.1:{free.getsockname()[1]}/v1"
    code, out, err = C.in_process("resume", "r1", "--state-dir", tmp_path, "--base-url", elsewhere)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, err)
    assert "made on the scripted provider (model 'runaway'" in err and elsewhere in err
    assert (tmp_path / "r1.json").read_bytes() == before
    code, out, err = C.in_process("resume", "r1", "--state-dir", tmp_path, "--base-url", provider.base_url,
                                  "--max-turns", "3", "--json")
    assert (code, json.loads(out)["turns"]) == (0, 3), err


def test_resume_continues_with_the_runs_options_and_traces_a_change(tmp_path, provider):
    trace = tmp_path / "t.jsonl"
    common = ("--state-dir", tmp_path, "--json")
    assert main(["run", "runaway", "--run-id", "r1", "--budget", "0.01", "--max-turns", "2", "--trace", str(trace),
                 "--base-url", provider.base_url, "--state-dir", str(tmp_path)]) == 0
    code, out, _ = C.in_process("resume", "r1", *common)  # no options: the budget and the endpoint travel
    assert code == 0 and json.loads(out)["status"] == "max_turns_exceeded"
    code, out, _ = C.in_process("resume", "r1", *common, "--max-turns", "50")
    s = json.loads(out)
    assert (code, s["status"], s["turns"], s["cost_usd"]) == (0, "budget_exceeded", 9, 0.01078)
    changes = [e for e in read(trace) if e["type"] == "config_changed"]
    assert [c["changes"] for c in changes] == [{"max_turns": {"old": 2, "new": 50}}]
    assert load(tmp_path, "r1").config["max_turns"] == 50


def test_a_saved_option_is_checked_on_resume(tmp_path, provider):
    assert main(["run", "plan", "--run-id", "r1", "--max-turns", "1", "--base-url", provider.base_url,
                 "--state-dir", str(tmp_path)]) == 0
    path = tmp_path / "r1.json"
    data = json.loads(path.read_text())
    data["config"]["max_turns"] = 0
    path.write_text(json.dumps(data))
    code, _, err = C.in_process("resume", "r1", "--state-dir", tmp_path)
    assert code == 2 and "max_turns" in err


def test_the_api_key_is_never_saved(tmp_path, provider, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-secret-123")
    assert main(["run", "plan", "--run-id", "r1", "--base-url", provider.base_url, "--state-dir", str(tmp_path)]) == 0
    assert not any("sk-secret-123" in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("run_id", ["r" * 250, "../up", ".hidden", "a b", "a\x1b[2K", ""])
def test_a_bad_run_id_is_a_one_line_error(tmp_path, run_id):
    with pytest.raises(StateFileError, match="invalid run id"):
        load(tmp_path, run_id)
    code, _, err = C.in_process("run", "plan", "--run-id", run_id, "--state-dir", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "\x1b" not in err
    assert os.listdir(tmp_path) == []


def test_visible_shows_every_control_and_cannot_be_forged():
    assert visible("c2\r\x1b[2K\u202eok\x9b") == "c2\\x0d\\x1b[2K\\u202eok\\x9b"
    assert visible("a\\x1b") == "a\\\\x1b"  # a backslash typed by the model is not an escape we made
    assert visible("plain text, é, 日本") == "plain text, é, 日本"
    for ch in ("\x00", "\x07", "\n", "\t", "\x7f", "\x85", "\u200b", "\u2066", "\ufeff", "\U000e0041", "\ud800"):
        assert ch not in visible(f"x{ch}y")
    value = {"a": "\x1b]0;t\x07 \u202e \x9b \ud800 \U0001F600"}
    dumped = json_safe(json.dumps(value, ensure_ascii=False))
    assert json.loads(dumped) == value and "\x1b" not in dumped and "\u202e" not in dumped and "\x9b" not in dumped


@pytest.mark.slow
def test_sigterm_while_a_tool_runs_saves_the_run_and_exits_143(tmp_path, provider):
    p = subprocess.Popen([sys.executable, "-m", "harness_lib", "run", "slow", "--run-id", "r1", "--state-dir",
                          str(tmp_path), "--base-url", provider.base_url, "--trace", str(tmp_path / "t.jsonl")],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    trace, deadline = tmp_path / "t.jsonl", time.monotonic() + 20
    while time.monotonic() < deadline and not any(
            e["type"] == "tool_progress" for e in (read(trace) if trace.exists() else [])):
        time.sleep(0.02)
    p.terminate()
    time.sleep(0.1)
    p.terminate()  # a second SIGTERM: stop now, still no traceback
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143 and "Traceback" not in err
    state = load(tmp_path, "r1")
    assert state.status == "interrupted" and state.interruption == {"type": "cancelled", "reason": "SIGTERM"}
    assert read(tmp_path / "t.jsonl")[-1]["type"] == "run_stopped"
    assert provider.requests >= state.turns


# -- the whole campaign -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_operator_campaign():
    # the groups that need no timing run above, one case per test, and issue 20's in tests/test_hostile.py:
    # here, only what takes a campaign (the script, tests/operator_campaign.py, runs them all)
    result = C.campaign(races=100, signals=20, disk=6, seed=0, quick=False, hostile=False)
    f, cases = result["figures"], result["cases"]
    problems = [f"{c.group} / {c.name}: {p}" for c in cases for p in c.problems]
    assert problems == []
    assert set(f["by_group"]) == {"race", "signal", "full disk"}, f["by_group"]
    # How many of the 100 races overlap (the second refused while the first holds the run) depends on the machine's
    # speed: the faster it runs, the more often the first has ended before the second starts. 49 alone on a quiet
    # machine (4 December), more within make test. 40: most races are still races.
    assert f["by_group"]["race"] >= 100 and f["races_refused_while_the_other_held_the_run"] >= 40
    assert f["signals_stopping_a_run"] >= 5 and f["full_disk_stops"] >= 3
    assert (f["writes_doubled"], f["turns_paid_twice"], f["runs_lost"], f["tracebacks"]) == (0, 0, 0, 0)
    assert f["turns_lost_to_a_second_signal"] <= f["second_signals"]
    assert f["races_on_fresh_interpreters"] >= 10 and f["signals_on_fresh_interpreters"] >= 3
    assert warm.leftovers() == []  # the process table: neither the fork server nor a child of it
    print(f"\n{f['cases']} cases in {result['seconds']} s: {f}")


def test_a_strict_budget_without_a_budget_on_resume_is_refused_before_it_is_saved(tmp_path, provider):
    """--strict-budget given to resume a run that has no budget: a usage error, and the run keeps its options
    (saved, it would make every later resume fail: the flag cannot be taken back)."""
    assert main(["run", "runaway", "--run-id", "r1", "--max-turns", "2", "--base-url", provider.base_url,
                 "--state-dir", str(tmp_path)]) == 0
    code, _, err = C.in_process("resume", "r1", "--state-dir", tmp_path, "--strict-budget")
    assert code == 2 and "needs a budget" in err and len(err.strip().splitlines()) == 1
    assert load(tmp_path, "r1").config["strict_budget"] is False
    code, out, _ = C.in_process("resume", "r1", "--state-dir", tmp_path, "--max-turns", "3", "--json")
    assert code == 0 and json.loads(out)["status"] == "max_turns_exceeded"
    code, out, _ = C.in_process("resume", "r1", "--state-dir", tmp_path, "--max-turns", "50", "--json",
                                "--strict-budget", "--budget", "0.01")
    assert code == 0 and json.loads(out)["status"] == "budget_exceeded"


@pytest.mark.slow
def test_a_run_made_in_process_resumes_under_the_default_turn_cap(tmp_path, provider):
    """A notebook's run saves no options: resumed from the command line it gets the default cap (it had
    none at all: the runaway scenario ran on until killed; here a budget, not the test, would stop it)."""
    import asyncio

    from harness_lib.cli import DEFAULT_MAX_TURNS
    from harness_lib.loop import Options, run
    from harness_lib.workspace import Workspace
    state = new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="nb1")
    state.meta["scenario"] = "runaway"
    state = asyncio.run(run(state, Workspace.copy_of().tools(),
                            Options(base_url=provider.base_url, max_turns=2, state_dir=tmp_path)))
    assert state.status == "max_turns_exceeded" and "max_turns" not in state.config
    code, out, err = C.in_process("resume", "nb1", "--state-dir", tmp_path, "--base-url", provider.base_url,
                                  "--price-in", "2", "--price-out", "12", "--budget", "1", "--json")
    s = json.loads(out)
    assert (code, s["status"], s["turns"], s["max_turns"]) == (0, "max_turns_exceeded", DEFAULT_MAX_TURNS,
                                                               DEFAULT_MAX_TURNS), err
    code, out, _ = C.in_process("resume", "nb1", "--state-dir", tmp_path, "--max-turns", "52", "--json")
    assert (code, json.loads(out)["turns"]) == (0, 52)


SITE_TRACEBACK = """Error processing line 1 of /venv/lib/python3.11/site-packages/__editable__.harness_lib-0.1.0.pth:

  Traceback (most recent call last):
    File "/usr/lib/python3.11/ipaddress.py", line 2101, in <module>
      class IPv6Interface(IPv6Address):
  KeyboardInterrupt

  The above exception was the direct cause of the following exception:

  Traceback (most recent call last):
    File "<frozen site>", line 186, in addpackage
    File "<string>", line 40, in <module>
      import ipaddress
  RuntimeError: Error calling __set_name__ on 'cached_property' instance 'hostmask' in 'IPv6Interface'

Remainder of file ignored
"""


@pytest.mark.parametrize("err, startup, problems", [
    ("Traceback (most recent call last):\n  File \"<frozen site>\", line 1\nKeyboardInterrupt\n", 1, 0),
    (SITE_TRACEBACK, 1, 0),  # a CI-like run met it: site printed it, ignored it, and Python started anyway
    (SITE_TRACEBACK.replace("KeyboardInterrupt", "ValueError"), 0, 1),
    ("Traceback (most recent call last):\n  File \"/x/harness_lib/cli.py\", line 1\nKeyboardInterrupt\n", 0, 1),
])
def test_a_ctrl_c_in_pythons_own_start_up_is_counted_apart(err, startup, problems):
    """Ctrl-C before harness_lib's first line is no traceback of the harness's, however site shows it."""
    case = C.Case("signal", "test")
    C.count_tracebacks(case, err)
    assert (case.startup_tracebacks, len(case.problems)) == (startup, problems)
