"""Operating a run as a library (``runs.py``) and the one vocabulary of a run's options (``config.py``).

The command line's own behaviour is pinned by test_cli, test_operator, test_crash and test_faults; here, what
a program (a notebook) gets by calling ``runs`` directly, and the names: one per option, in ``Options``, the
state file and the flags, with the names of files written before read through one table."""

import asyncio
import dataclasses
import json

import pytest

from harness_lib import cli, config, ledger, runs
from harness_lib.client import Transport
from harness_lib.lock import RunLock, RunLockError
from harness_lib.loop import Options
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import StateFileError, load
from harness_lib.trace import read


def test_every_saved_option_has_one_name_in_options_the_state_file_and_the_flags():
    options = {f.name for f in dataclasses.fields(Options)}
    operators = {"latency_ms", "local_model", "price_in", "price_out"}  # the command line's, not the loop's
    assert set(config.SAVED) - operators <= options, set(config.SAVED) - operators - options
    args = cli.parser().parse_args(["run", "plan", "--budget", "0.5", "--timeout", "7", "--max-turns", "none"])
    assert (args.max_budget_usd, args.timeout_s, args.max_turns) == (0.5, 7.0, None)  # argparse's dests: the names
    assert set(cli._given(args)) == set(config.SAVED)
    assert [config.flag(n) for n in ("max_budget_usd", "timeout_s", "max_turns")] == \
        ["--budget", "--timeout", "--max-turns"]


def test_the_defaults_are_decided_once_and_agree_with_the_transport():
    assert config.DEFAULTS["timeout_s"] == Transport.timeout_s
    assert config.DEFAULTS["max_turns"] == config.DEFAULT_MAX_TURNS
    assert config.read({}) == config.DEFAULTS  # a run made in-process: the default cap, never none
    assert config.read({"max_turns": None})["max_turns"] is None  # no cap, saved as such


def test_options_saved_under_their_old_names_are_read_under_todays():
    """State files and ledgers written before the options had one name each said ``budget`` and ``timeout``.
    Fails without ``config.OLD_NAMES``: the budget would be read as none, and the run would never stop at it."""
    old = {"max_turns": 5, "budget": 0.25, "timeout": 30.0, "price_in": 2.0, "price_out": 12.0}
    new = config.read(old)
    assert (new["max_budget_usd"], new["timeout_s"]) == (0.25, 30.0)
    assert "budget" not in new and "timeout" not in new


def test_an_old_name_beside_its_new_one_is_an_edit_and_refused():
    with pytest.raises(StateFileError, match="budget, the old name of max_budget_usd"):
        config.read({"budget": 100.0, "max_budget_usd": 0.01})


def test_an_option_given_under_no_name_of_ours_is_refused_naming_the_right_one():
    with pytest.raises(ValueError, match=r"no run option is called 'budget' \(now max_budget_usd\)"):
        config.given({"budget": 1.0})
    with pytest.raises(ValueError, match="the option max_turns"):
        config.given({"max_turns": 0})


def test_a_run_saved_in_the_old_names_resumes_with_its_budget_through_its_ledger(tmp_path, capsys):
    """A run made and saved before the rename (its state file and its ledger's records in the old names) is
    checked against its ledger and continued with the budget it was given; the change a resume records is
    in today's names."""
    with ScriptedProvider() as provider:
        assert cli.main(["run", "runaway", "--run-id", "r", "--budget", "0.005", "--max-turns", "2", "--base-url",
                         provider.base_url, "--state-dir", str(tmp_path)]) == 0
        old = {"max_budget_usd": "budget", "timeout_s": "timeout"}
        state = tmp_path / "r.json"
        data = json.loads(state.read_text())
        data["config"] = {old.get(k, k): v for k, v in data["config"].items()}
        state.write_text(json.dumps(data))
        lines = [json.loads(line) for line in ledger.ledger_path(tmp_path, "r").read_text().splitlines()]
        for entry in lines:
            if "config" in entry:
                entry["config"] = {old.get(k, k): v for k, v in entry["config"].items()}
        ledger.ledger_path(tmp_path, "r").write_text("".join(json.dumps(e) + "\n" for e in lines))
        capsys.readouterr()
        out = asyncio.run(runs.resume(tmp_path, "r", options={"max_turns": 50}))
    assert (out.state.status, out.state.config["max_budget_usd"]) == ("budget_exceeded", 0.005)
    assert "budget" not in json.loads(state.read_text())["config"]
    assert ledger.read(ledger.ledger_path(tmp_path, "r"))[-2]["config"]["max_budget_usd"] == 0.005


def test_a_program_starts_approves_and_resumes_a_run_as_the_command_line_does(tmp_path):
    """``runs`` in-process: the run saved with its options and ledger, its approval recorded there, the
    change traced; the same refusals as the command line, as exceptions."""
    trace = tmp_path / "t.jsonl"
    out = asyncio.run(runs.start("destructive", run_id="r", state_dir=tmp_path,
                                 options={"max_turns": 5, "trace": str(trace)}))
    assert (out.state.status, out.state.interruption["callId"], out.label) == \
        ("interrupted", "c2", "destructive, cap 5")
    with pytest.raises(runs.RunError, match="already exists"):
        asyncio.run(runs.start("plan", run_id="r", state_dir=tmp_path))
    with RunLock(tmp_path, "r"), pytest.raises(RunLockError, match="in use by"):
        asyncio.run(runs.approve(tmp_path, "r", "c2"))
    out = asyncio.run(runs.approve(tmp_path, "r", "c2", options={"max_turns": 6}))
    assert (out.state.status, out.state.config["max_turns"]) == ("completed", 6)
    assert [e["verdict"] for e in ledger.read(ledger.ledger_path(tmp_path, "r")) if e["type"] == "decision"] == \
        ["approve"]
    assert [e["changes"] for e in read(trace) if e["type"] == "config_changed"] == \
        [{"max_turns": {"old": 5, "new": 6}}]
    with pytest.raises(runs.RunError, match="is completed"):
        asyncio.run(runs.resume(tmp_path, "r"))
    assert load(tmp_path, "r").status == "completed"


@pytest.mark.slow  # the resumed scan takes its seconds
def test_a_cell_stopped_during_a_run_leaves_it_saved_interrupted_and_its_lock_free(tmp_path):
    """A notebook's Stop cancels the coroutine that awaits ``runs.start``: the run stops as at any Stop (saved,
    ``interrupted``, the reason given), the lock is let go and the spend recorded, so ``resume`` finishes it."""
    trace = tmp_path / "t.jsonl"

    async def stopped_in_its_scan():
        task = asyncio.ensure_future(runs.start("slow", run_id="r", state_dir=tmp_path,
                                                options={"trace": str(trace)}))
        while not (trace.exists() and any(e["type"] == "tool_start" for e in read(trace))):
            await asyncio.sleep(0.01)  # the scan has begun: Stop lands while a tool runs
        task.cancel("the cell's Stop")
        return (await asyncio.gather(task, return_exceptions=True))[0]

    out = asyncio.run(stopped_in_its_scan())  # the run caught its Stop and returned, as run() does
    saved = load(tmp_path, "r")
    assert (out.state.status, saved.status, saved.interruption) == \
        ("interrupted", "interrupted", {"type": "cancelled", "reason": "the cell's Stop"})
    with RunLock(tmp_path, "r"):
        pass  # nobody holds it
    assert ledger.read(ledger.ledger_path(tmp_path, "r"))[-1]["type"] == "spent"
    finished = asyncio.run(runs.resume(tmp_path, "r"))
    assert (finished.state.status, finished.state.turns) == ("completed", 2)


def test_a_run_the_old_code_saved_resumes_under_its_own_budget(tmp_path):
    """``old-subrun`` (tests/fixtures/states/saved-by-2ff5ba1, written by the code before the rename: ``budget``
    in its state file and in its ledger's record) resumed with no option given stops at once at its own
    budget, $0.0009, paying nothing. Fails without ``config.OLD_NAMES``: its budget read as none, it ran on."""
    from test_naming import place
    place("old-subrun", tmp_path)
    before = load(tmp_path, "old-subrun")
    out = asyncio.run(runs.resume(tmp_path, "old-subrun"))
    assert (out.state.status, out.state.turns, out.state.config["max_budget_usd"]) == \
        ("budget_exceeded", before.turns, 0.0009)


def test_a_program_starts_a_strict_budget_run_and_one_without_a_budget_is_refused(tmp_path):
    """The strict budget through ``runs`` (a program's way, the command line's too): given its budget, the run
    goes and stops at it, never across; without one, refused before anything is saved. Found by make mutate:
    ``budget.check_options`` handing the ceiling on as the budget refused every strict run."""
    out = asyncio.run(runs.start("runaway", options={"strict_budget": True, "max_budget_usd": 0.002,
                                                     "max_turns": 50}))
    assert (out.state.status, out.state.interruption["strict"]) == ("budget_exceeded", True)
    assert 0 < out.state.total_cost_usd <= 0.002
    with pytest.raises(runs.RunError, match=r"^--strict-budget: strict_budget needs a budget"):
        asyncio.run(runs.start("plan", run_id="s", state_dir=tmp_path, options={"strict_budget": True}))
    assert list(tmp_path.iterdir()) == []
