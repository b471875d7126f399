"""Links, planted files, cut streams and rounding (issue 20): each way a run could still be led astray,
tried as a hostile server, model or operator would, with what the harness must do instead.

The command-line cases (a tampered state file, a planted link in the state folder, a lock file removed)
are also cases of the operator campaign (``tests/operator_campaign.py``), which counts them with the others.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import tracemalloc
from fractions import Fraction
from pathlib import Path

import operator_campaign as C
import pytest
from replay_server import SERVERS, ReplayServer, fixture
from test_conformance import ANSWER, FAST, drive

from harness_lib import ledger
from harness_lib.lock import RunLock, lock_path
from harness_lib.loop import Options
from harness_lib.pricing import CHAPTER_PRICES, Pricing
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import load
from harness_lib.tools import ToolContext
from harness_lib.trace import read
from harness_lib.workspace import Workspace

NOWHERE = "http://127.0.0.1:9/v1"  # no request may reach it: every case that uses it ends before one


# -- 7. a stream cut short is a dropped reply, never an answer ---------------------------------------------------
class CutStream(ReplayServer):
    """Streams the final turn's text without its finish_reason and without [DONE], then closes the connection
    cleanly (no transport error): ``cuts`` times, then whole."""

    def __init__(self, *args, cuts: int, **kw):
        super().__init__(*args, **kw)
        self.cuts = cuts

    def _sse(self, h, chunks):
        final = any(c.get("choices") and c["choices"][0].get("finish_reason") == "stop" for c in chunks)
        if not final or self.cuts == 0:
            return super()._sse(h, chunks)
        self.cuts -= 1
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for c in chunks:
            if c.get("choices") and c["choices"][0].get("finish_reason"):
                break  # the text so far, and then the stream simply ends
            h.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        h.wfile.flush()


def test_a_stream_cut_short_is_asked_again_not_taken_as_the_answer(tmp_path):
    f = fixture("openai")
    with CutStream(f["replies"], f["stream"], cuts=1) as replay:
        state, events = drive(tmp_path, replay.base_url, stream=True, **FAST)
    assert (state.status, state.output, state.turns) == ("completed", ANSWER, 3)
    retries = [e for e in events if e["type"] == "retry"]
    assert len(retries) == 1 and "without a finish_reason and [DONE]" in retries[0]["problem"]


def test_a_stream_always_cut_short_ends_the_run_interrupted_and_resumable(tmp_path):
    f = fixture("openai")
    with CutStream(f["replies"], f["stream"], cuts=99) as replay:
        state, _ = drive(tmp_path, replay.base_url, stream=True, max_retries=1, **FAST)
    assert (state.status, state.output, state.turns) == ("interrupted", None, 2)
    assert state.interruption["type"] == "cancelled" and "provider unreachable" in state.interruption["reason"]
    assert "cut short" in state.interruption["reason"]


# -- 9. every number an operator gives goes through the one number check, bounds included -------------------------
@pytest.mark.parametrize("argv", [
    ["run", "runaway", "--strict-budget", "--budget", "0.01", "--strict-margin", "1e306"],
    ["run", "runaway", "--price-in", "1e300", "--price-out", "1"],
    ["run", "runaway", "--price-in", "1e-320", "--price-out", "1"],  # not 0, yet 0 a token once divided
    ["run", "runaway", "--budget", "1e300", "--strict-budget"],
    ["run", "runaway", "--latency-ms", "1e300"],
    ["serve", "--latency-ms", "nan"],
], ids=["strict margin 1e306", "price 1e300", "price 1e-320", "budget 1e300", "latency 1e300", "serve latency nan"])
def test_a_number_past_its_bounds_is_a_usage_error_before_anything_runs(tmp_path, argv):
    code, out, err = C.in_process(*argv, "--state-dir", tmp_path) if argv[0] == "run" else C.in_process(*argv)
    assert code == 2 and "must be a finite number" in err and "unexpected" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_saved_margin_past_its_bound_is_refused_not_run(tmp_path):
    """A state file saved before the bound (or edited): resume says which option, in one line; it does not
    start the run and leave it `running` with an OverflowError."""
    assert C.in_process("run", "runaway", "--run-id", "r", "--max-turns", "2", "--budget", "0.01",
                        "--strict-budget", "--state-dir", tmp_path)[0] == 0
    path = tmp_path / "r.json"
    data = json.loads(path.read_text())
    data["config"]["strict_margin"] = 1e306
    path.write_text(json.dumps(data))
    code, _, err = C.in_process("resume", "r", "--state-dir", tmp_path, "--max-turns", "5")
    assert code == 2 and "strict_margin: must be a finite number of at least 0 and at most 10" in err
    assert len(err.strip().splitlines()) == 1 and load(tmp_path, "r").status == "max_turns_exceeded"


def test_options_refuse_a_margin_or_a_price_that_would_overflow():
    with pytest.raises(ValueError, match="strict_margin must be a finite number of at least 0 and at most 10"):
        Options(base_url=NOWHERE, max_budget_usd=0.01, strict_budget=True, strict_margin=1e306)
    with pytest.raises(ValueError, match="the input price must be .* at most 10000 per million tokens"):
        Pricing.per_million(1e300, 1)
    with pytest.raises(ValueError, match="max_budget_usd must be .* at most 1e\\+09"):
        Options(base_url=NOWHERE, max_budget_usd=1e300)


# -- 10. a cost is never rounded below what was spent ---------------------------------------------------------------
def exact_cost(state, usd_in: str, usd_out: str) -> Fraction:
    """What the turns cost at the prices as typed, in exact rational arithmetic."""
    per_in, per_out = Fraction(usd_in) / 10 ** 6, Fraction(usd_out) / 10 ** 6
    return sum((t["prompt_tokens"] * per_in + t["completion_tokens"] * per_out for t in state.per_turn), Fraction(0))


@pytest.mark.parametrize("price", ["1e-10", "1e-9", "0.15"])
def test_the_strict_budget_holds_however_small_the_prices(tmp_path, price):
    """--budget 1e-12 at $1e-10 a million tokens: each turn costs about $2e-14, which rounding to $1e-12 recorded
    as $0, and the run went on for 40 turns to 5.9 times its budget. Now every turn is recorded at its exact cost
    (or a hair above), and the strict budget stops the run before it crosses."""
    budget = "1e-12" if price != "0.15" else "0.0003"
    code, out, err = C.in_process("run", "runaway", "--run-id", "r", "--budget", budget, "--price-in", price,
                                  "--price-out", price, "--strict-budget", "--max-turns", "60", "--state-dir",
                                  tmp_path, "--json")
    s = json.loads(out)
    state = load(tmp_path, "r")
    spent = exact_cost(state, price, price)
    assert code == 0 and s["status"] == "budget_exceeded" and state.turns >= 3, err
    assert 0 < spent <= Fraction(budget)                      # the budget held, counted exactly
    assert Fraction(state.own_cost_usd) >= spent              # and nothing was recorded below what was spent
    assert Fraction(state.own_cost_usd) - spent < Fraction(budget) / 10 ** 9
    assert s["cost_usd"] == state.total_cost_usd > 0


def test_a_turns_cost_is_exact_or_above_never_below():
    from harness_lib.pricing import add
    for usd_in, usd_out in (("1e-10", "1e-10"), ("0.4", "1.6"), ("0.15", "0.6"), ("2", "12"), ("3.3", "7.77")):
        pricing = Pricing.per_million(float(usd_in), float(usd_out))
        total = 0.0
        exact_total = Fraction(0)
        for prompt, completion in ((204, 20), (1, 0), (99_999, 12_345), (0, 7), (337_299, 1)):
            cost = pricing.cost(prompt, completion)
            exact = prompt * Fraction(usd_in) / 10 ** 6 + completion * Fraction(usd_out) / 10 ** 6
            assert Fraction(repr(cost)) >= exact and float(exact) == pytest.approx(cost, rel=1e-15)
            total, exact_total = add(total, cost), exact_total + exact
            assert Fraction(repr(total)) >= exact_total


def test_the_chapters_dollars_are_the_floats_they_were():
    """The chapter prints six places; its sums come out as the very floats rounding to 1e-12 made."""
    from harness_lib.pricing import add
    assert CHAPTER_PRICES.cost(204, 20) == 0.000648 and CHAPTER_PRICES.cost(815, 70) == 0.00247
    assert add(0.00247, 0.00831) == 0.01078 and add(0.000684, 0.000886) == 0.00157
    assert Pricing.per_million(2, 12) == CHAPTER_PRICES and CHAPTER_PRICES.per_million_prices() == (2.0, 12.0)


# -- 1, 2. links and hard links in the workspace ---------------------------------------------------------------
def tool(ws, name: str, path: str, call_id: str = "c1"):
    return asyncio.run(getattr(ws, name)({"path": path}, ToolContext("r", call_id, instance="i1")))


@pytest.fixture
def linked(tmp_path):
    """A workspace with a link inside (to errors.log), a link out, and a hard link to a file outside it."""
    ws = Workspace.copy_of(into=tmp_path / "run")
    outside = tmp_path / "outside.txt"
    outside.write_text("the operator's own notes\n")
    (ws.root / "link_in.log").symlink_to("errors.log")
    (ws.root / "link_out.txt").symlink_to(outside)
    os.link(outside, ws.root / "hard.txt")
    return ws, outside


def test_an_approved_delete_of_a_link_deletes_the_link_never_its_target(linked):
    ws, _ = linked
    errors = (ws.root / "errors.log").read_text()
    assert tool(ws, "delete_file", "link_in.log") == "deleted link_in.log"
    assert not os.path.lexists(ws.root / "link_in.log")
    assert (ws.root / "errors.log").read_text() == errors and ws.deleted == ["link_in.log"]
    assert not any(ws.trash.iterdir())  # the link, moved aside, then removed: nothing left behind


def test_a_link_inside_is_read_through(linked):
    ws, _ = linked
    assert tool(ws, "read_file", "link_in.log") == (ws.root / "errors.log").read_text()


@pytest.mark.parametrize("name", ["read_file", "delete_file"])
@pytest.mark.parametrize("path, says", [("hard.txt", "permission denied: hard.txt has 2 hard links"),
                                        ("link_out.txt", "permission denied: link_out.txt")])
def test_a_hard_link_or_a_link_out_is_refused_for_reading_and_deleting(linked, name, path, says):
    ws, outside = linked
    before = sorted(os.listdir(ws.root))
    with pytest.raises(PermissionError) as refused:
        tool(ws, name, path)
    assert str(refused.value).startswith(says)
    assert outside.read_text() == "the operator's own notes\n" and outside.stat().st_nlink == 2
    assert sorted(os.listdir(ws.root)) == before and ws.delete_runs == []


def test_a_fifo_is_no_file_and_does_not_block_the_read(tmp_path):
    ws = Workspace.copy_of(into=tmp_path)
    os.mkfifo(ws.root / "pipe.log")
    with pytest.raises(FileNotFoundError, match="no such file: pipe.log"):
        tool(ws, "read_file", "pipe.log")
    with pytest.raises(FileNotFoundError, match="no such file: pipe.log"):
        tool(ws, "delete_file", "pipe.log")
    assert (ws.root / "pipe.log").exists()


def test_a_link_put_in_place_after_the_path_was_resolved_is_not_followed(linked, monkeypatch):
    """What ``resolve`` saw was a file inside; by the time it is opened, a link out stands there."""
    ws, outside = linked
    monkeypatch.setattr(ws, "resolve", lambda path: ws.root / "link_out.txt")
    with pytest.raises(PermissionError, match="permission denied: errors.log"):
        tool(ws, "read_file", "errors.log")


def test_the_command_line_run_deletes_the_link_not_the_file(tmp_path):
    """The issue's own case, through the command line: an approved delete of link_in.log."""
    ws = Workspace.copy_of(into=tmp_path / "mine")
    (ws.root / "access.log").rename(ws.root / "real.log")
    (ws.root / "access.log").symlink_to("real.log")  # the destructive scenario deletes access.log
    d = tmp_path / "runs"
    assert C.in_process("run", "destructive", "--run-id", "r", "--workspace", ws.root, "--state-dir", d)[0] == 0
    code, out, err = C.in_process("resume", "r", "--state-dir", d, "--approve", "c2", "--json")
    assert code == 0 and json.loads(out)["status"] == "completed", err
    assert not os.path.lexists(ws.root / "access.log") and (ws.root / "real.log").is_file()


# -- 11. links planted in the state folder: never followed ------------------------------------------------------
VICTIM = "the operator's notes: nothing of the harness's belongs here\n"


def plant(tmp_path, name: str, hard: bool = False) -> Path:
    """A victim file outside the state folder, and a link to it at ``name`` in the state folder ``runs``. A
    hard link takes the place of a file with what it held (the ledger's lines, say): only the link is wrong."""
    victim = tmp_path / "notes.txt"
    (tmp_path / "runs").mkdir(exist_ok=True)
    link = tmp_path / "runs" / name
    victim.write_bytes(link.read_bytes() if hard and link.exists() else VICTIM.encode())
    link.unlink(missing_ok=True)
    os.link(victim, link) if hard else link.symlink_to(victim)
    return victim


@pytest.mark.parametrize("name", ["r.lock", ".r.reserve"])
def test_a_link_planted_where_run_writes_is_refused_and_not_followed(tmp_path, name):
    victim = plant(tmp_path, name)
    code, out, err = C.in_process("run", "plan", "--run-id", "r", "--state-dir", tmp_path / "runs")
    assert code == 2 and f"{name} is a symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == VICTIM and not (tmp_path / "runs" / "r.json").exists()


def saved_run(tmp_path) -> Path:
    d = tmp_path / "runs"
    code, _, err = C.in_process("run", "runaway", "--run-id", "r", "--max-turns", "2", "--state-dir", d)
    assert code == 0, err
    return d


@pytest.mark.parametrize("name, hard, says", [
    ("r.ledger.jsonl", False, "r.ledger.jsonl is a symbolic link"),
    ("r.ledger.jsonl", True, "r.ledger.jsonl has 2 hard links"),
    ("r.journal", False, "r.journal is a symbolic link"),
    ("r.lock", True, "r.lock has 2 hard links"),
    ("r.json", False, "r.json is a symbolic link"),
])
def test_a_link_planted_where_resume_reads_or_writes_is_refused(tmp_path, name, hard, says):
    d = saved_run(tmp_path)
    keep = (d / "r.json").read_bytes()
    victim = plant(tmp_path, name, hard)
    before = victim.read_bytes()
    code, out, err = C.in_process("resume", "r", "--state-dir", d, "--max-turns", "4")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_bytes() == before
    if name != "r.json":
        assert (d / "r.json").read_bytes() == keep


def test_a_link_planted_for_the_journal_of_writes_or_the_trash_is_refused(tmp_path):
    ws = Workspace.copy_of(into=tmp_path / "run")
    victim = tmp_path / "notes.txt"
    victim.write_text(VICTIM)
    ws.journal.symlink_to(victim)
    with pytest.raises(OSError, match="is a symbolic link"):
        tool(ws, "delete_file", "access.log")
    assert victim.read_text() == VICTIM and (ws.root / "access.log").exists()
    ws.journal.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws.trash.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PermissionError, match="is not a folder of the harness's own"):
        tool(ws, "delete_file", "access.log")
    assert (ws.root / "access.log").exists() and list(elsewhere.iterdir()) == []


# -- 6. sizes bounded before reading ---------------------------------------------------------------------------
@pytest.mark.parametrize("name, what", [("r.json", "a state file"), ("r.journal", "a run's journal"),
                                        ("r.ledger.jsonl", "a ledger")], ids=["snapshot", "journal", "ledger"])
def test_a_huge_file_is_refused_in_one_line_without_being_read(tmp_path, name, what):
    """A 3 GiB sparse file where the run keeps its snapshot, journal or ledger: refused by its size, before a
    byte is read (the memory the refusal takes is measured: a read would take gigabytes)."""
    d = saved_run(tmp_path)
    with open(d / name, "r+b" if (d / name).exists() else "wb") as f:
        f.truncate(3 * 2 ** 30)
    tracemalloc.start()
    code, out, err = C.in_process("resume", "r", "--state-dir", d, "--max-turns", "4")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert code == 2 and "3,221,225,472 bytes, more than the" in err and len(err.strip().splitlines()) == 1, err
    assert f"MiB {what} may hold" in err, err  # which of the run's files it is
    assert peak < 64 * 2 ** 20, f"{peak:,} bytes allocated to refuse it"


def test_a_state_file_that_is_a_device_is_refused(tmp_path):
    d = saved_run(tmp_path)
    (d / "r.json").unlink()
    (d / "r.json").symlink_to("/dev/zero")
    code, _, err = C.in_process("resume", "r", "--state-dir", d)
    assert code == 2 and "r.json is a symbolic link" in err and "MemoryError" not in err
    (d / "r.json").unlink()
    os.mkfifo(d / "r.json")  # a FIFO nobody writes to: opening it must not hang, reading it must not start
    code, _, err = C.in_process("resume", "r", "--state-dir", d)
    assert code == 2 and "r.json is not a regular file" in err, err


# -- 3, 4, and a ledger deleted: the ledger binds every option and decision to its latest value -----------------
def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_an_older_higher_budget_restored_in_the_file_is_refused(tmp_path):
    """The issue's case: a run given $0.05, then lowered to $0.012 by a resume (it stopped at 10 turns,
    $0.012618); the file's budget set back to $0.05 was the one before the latest, which the ledger took."""
    d = tmp_path / "runs"
    with ScriptedProvider() as provider:
        common = ("--state-dir", d, "--base-url", provider.base_url, "--json")
        assert C.in_process("run", "runaway", "--run-id", "r", "--budget", "0.05", "--max-turns", "2", *common)[0] == 0
        code, out, _ = C.in_process("resume", "r", "--budget", "0.012", "--max-turns", "50", *common)
        s = json.loads(out)
        assert (s["status"], s["turns"], s["cost_usd"]) == ("budget_exceeded", 10, 0.012618)
        edit(d / "r.json", lambda data: data["config"].update(max_budget_usd=0.05))
        before = (d / "r.json").read_bytes(), provider.requests
        code, out, err = C.in_process("resume", "r", *common)
        assert code == 2 and "options (max_budget_usd) differ from the latest the run was given" in err, err
        assert ((d / "r.json").read_bytes(), provider.requests) == before


def test_options_a_resume_recorded_but_never_saved_are_the_runs(tmp_path):
    """resume records a change in the ledger, then saves the state with it: killed in between, the state is one
    change behind, and nothing came after the change in the ledger. The run continues with the latest."""
    d = tmp_path / "runs"
    assert C.in_process("run", "runaway", "--run-id", "r", "--max-turns", "2", "--state-dir", d)[0] == 0
    state = load(d, "r")
    ledger.append(d, state, "config", config={**state.config, "max_turns": 3})  # what the killed resume left
    code, out, err = C.in_process("resume", "r", "--state-dir", d, "--json")
    s = json.loads(out)
    assert (code, s["status"], s["turns"], s["max_turns"]) == (0, "max_turns_exceeded", 3, 3), err


@pytest.mark.parametrize("field, value", [("model", "destructive"), ("scenario", "delegate")])
def test_the_model_or_the_scenario_changed_in_the_file_is_refused(tmp_path, field, value):
    d = tmp_path / "runs"
    with ScriptedProvider() as provider:
        assert C.in_process("run", "plan", "--run-id", "r", "--max-turns", "1", "--state-dir", d,
                            "--base-url", provider.base_url)[0] == 0
        edit(d / "r.json", lambda data: data.update(model=value) if field == "model"
             else data["meta"].update(scenario=value))
        requests = provider.requests
        code, _, err = C.in_process("resume", "r", "--state-dir", d, "--max-turns", "5")
        assert code == 2 and f"the state file's {field} differs from what the run was given" in err, err
        assert len(err.strip().splitlines()) == 1 and provider.requests == requests


def test_a_missing_ledger_of_a_command_line_run_is_refused_not_bound_again(tmp_path):
    d = tmp_path / "runs"
    assert C.in_process("run", "destructive", "--run-id", "r", "--state-dir", d)[0] == 0
    ws = Path(load(d, "r").meta["workspace"])
    (d / "r.ledger.jsonl").unlink()
    code, _, err = C.in_process("resume", "r", "--state-dir", d, "--approve", "c2")
    assert code == 2 and "the run's ledger r.ledger.jsonl is missing" in err and len(err.strip().splitlines()) == 1
    assert (ws / "access.log").exists() and not (d / "r.ledger.jsonl").exists()


def test_a_ledger_deleted_and_the_file_made_to_look_in_process_binds_no_approval(tmp_path):
    """The issue's attack: the ledger deleted, the workspace pointed elsewhere, an approval forged. With its
    options removed the file passes for a run made in-process, which is bound to what it says; but an
    approval is never taken from a file, only from `resume --approve`."""
    d = tmp_path / "runs"
    assert C.in_process("run", "destructive", "--run-id", "r", "--state-dir", d)[0] == 0
    outside = Workspace.copy_of(into=tmp_path / "outside")
    (d / "r.ledger.jsonl").unlink()
    edit(d / "r.json", lambda data: (data.update(config={}, approved=["c2"]),
                                     data["meta"].update(workspace=str(outside.root))))
    code, _, err = C.in_process("resume", "r", "--state-dir", d)
    assert code == 2 and "lists c2 as approved, but no approval was given" in err, err
    assert (outside.root / "access.log").exists()


def test_a_ledger_from_before_the_model_was_recorded_binds_it_at_the_next_resume(tmp_path):
    d = tmp_path / "runs"
    assert C.in_process("run", "runaway", "--run-id", "r", "--max-turns", "1", "--state-dir", d)[0] == 0
    path = d / "r.ledger.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in e.items() if k not in ("model", "scenario")}) + "\n"
                            for e in lines))
    assert C.in_process("resume", "r", "--state-dir", d, "--max-turns", "2")[0] == 0
    edit(d / "r.json", lambda data: data.update(model="plan"))
    code, _, err = C.in_process("resume", "r", "--state-dir", d, "--max-turns", "3")
    assert code == 2 and "the state file's model differs" in err, err


# -- 5. the lock survives the loss of its file ---------------------------------------------------------------------
def test_a_holder_knows_when_its_lock_file_is_gone_or_replaced_and_leaves_a_new_one_alone(tmp_path):
    lock = RunLock(tmp_path, "r").__enter__()
    assert lock.lost() is None
    lock_path(tmp_path, "r").unlink()  # a temp-folder cleaner
    assert "r.lock was removed" in lock.lost()
    other = RunLock(tmp_path, "r").__enter__()  # what a second process can do now
    assert "r.lock was replaced by another file" in lock.lost() and other.lost() is None
    lock.release()  # the first holder lets go: the second's file stays, and is still the second's
    assert lock_path(tmp_path, "r").exists() and other.lost() is None
    other.release()
    assert not lock_path(tmp_path, "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_run_whose_lock_file_goes_stops_at_its_next_step_saved_and_pays_nothing_twice(tmp_path, how):
    """The issue's case: r.lock removed while a run holds it, then a second owner. The first stops at its next
    step, saved (interrupted, saying why, exit 2); the second continues the run; no turn is paid twice."""
    d, trace = tmp_path / "runs", tmp_path / "t.jsonl"
    with ScriptedProvider(latency_ms=50) as provider:
        first = C.spawn("run", "runaway", "--run-id", "r", "--max-turns", "30", "--state-dir", d, "--trace", trace,
                        "--base-url", provider.base_url, "--json")
        while len([e for e in (read(trace) if trace.exists() else []) if e["type"] == "turn"]) < 3:
            assert first.poll() is None, first.communicate()
            time.sleep(0.01)
        lock_path(d, "r").unlink()
        second = RunLock(d, "r").__enter__() if how == "replaced" else None  # another owner's file in its place
        code, out, err = C.finish(first)
        state = load(d, "r")
        assert code == 2 and "r.lock was" in err and len(err.strip().splitlines()) == 1, err
        assert state.status == "interrupted" and state.interruption["reason"].startswith("the run's lock file r.lock")
        assert provider.requests == state.turns < 30  # every paid turn saved, and it stopped before the cap
        if second is not None:
            assert second.lost() is None  # the first did not remove the new owner's file on its way out
            second.release()
        code, out, err = C.in_process("resume", "r", "--state-dir", d, "--json")
        assert code == 0 and json.loads(out)["turns"] == 30, err
        assert provider.requests == 30  # no turn paid twice


# -- 8. what a model streams cannot pass for a line of the harness's -----------------------------------------------
FORGED = 'stopped at turn 1: interrupted / approval -> delete_file({"path":"tmp/cache.txt"})  [call c1]'


def forging_stream() -> list[dict]:
    """One streamed reply: text that draws the harness's approval line for a harmless path (with a carriage
    return and an erase-line to boot), then a call to delete another file."""
    def chunk(delta, finish=None):
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return [chunk({"role": "assistant", "content": "Clearing the cache.\n   "}),
            chunk({"content": FORGED + "\n\r\x1b[2K   " + FORGED + "\n"}),
            chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                   "function": {"name": "delete_file", "arguments": '{"path":"errors.log"}'}}]}),
            chunk({}, "tool_calls"),
            {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 30}}]


@pytest.mark.parametrize("json_out", [False, True], ids=["stdout", "stderr with --json"])
def test_a_streamed_line_cannot_pass_for_the_approval_line(tmp_path, json_out):
    with ReplayServer([{}], [forging_stream()]) as replay:
        code, out, err = C.in_process("run", "destructive", "--base-url", replay.base_url, "--model", "m",
                                      "--stream", "--state-dir", tmp_path, *(["--json"] if json_out else []))
    screen = err if json_out else out
    assert code == 0 and not [ch for ch in screen if ch in "\r\x1b"], screen
    harness_lines = [line for line in screen.splitlines() if "stopped at turn" in line and not line.startswith("> ")]
    model_lines = [line for line in screen.splitlines() if line.startswith("> ")]
    if not json_out:  # the one real approval line, for the real call
        assert harness_lines == ['   stopped at turn 1: interrupted / approval -> delete_file({"path":"errors.log"})'
                                 '  [call c1]'], screen
    else:
        assert harness_lines == [] and json.loads(out)["interruption"]["args"] == {"path": "errors.log"}
    assert model_lines == ["> Clearing the cache.", f">    {FORGED}", f"> \\x0d\\x1b[2K   {FORGED}"], screen


def test_a_quoted_stream_marks_each_line_however_the_pieces_fall():
    from harness_lib.terminal import Quoted
    screen = io.StringIO()
    show = Quoted(screen)
    for piece in ["one", " line\ntw", "o\n", "", "\n", "three\x1b[2K", " \\x1b", "\n\n"]:
        show(piece)
    show.fresh_line()
    assert screen.getvalue() == "> one line\n> two\n\n> three\\x1b[2K \\\\x1b\n\n"  # a backslash typed: doubled


# -- the strict budget against a server that bills far fewer tokens than were sent ---------------------------------
STRICT = {"strict_budget": True, "max_budget_usd": 1.0, "pricing": Pricing.per_million(1, 1)}


@pytest.mark.parametrize("side", ["completion", "prompt"])
def test_a_server_billing_far_fewer_tokens_than_it_sends_ends_a_strict_run(tmp_path, side):
    """Its usage is what max_tokens and the budget are checked against: a reply of some 300 tokens billed as 5
    (or every prompt billed as 3) would pass any check. Failed, saying so, the turn paid and recorded."""
    replies = fixture("openai")["replies"]
    if side == "completion":
        replies[2]["choices"][0]["message"]["content"] = ANSWER + " The worker restarted." * 40
        replies[2]["usage"]["completion_tokens"] = 5
    else:
        for r in replies:
            r["usage"]["prompt_tokens"] = 3
    with ReplayServer(replies) as replay:
        state, _ = drive(tmp_path, replay.base_url, **STRICT)
    assert state.status == "failed" and "the provider's usage does not count what was sent" in state.error
    assert ("billed 5 completion tokens for" if side == "completion" else "billed 3 prompt tokens for") in state.error
    assert state.turns == (3 if side == "completion" else 1)


@pytest.mark.parametrize("server", SERVERS)
def test_each_servers_own_usage_passes_the_strict_check(tmp_path, server):
    with ReplayServer.of(server) as replay:
        state, _ = drive(tmp_path, replay.base_url, model=fixture(server)["model"], **STRICT)
    assert (state.status, state.output) == ("completed", ANSWER), state.error


def test_a_link_planted_where_run_copies_the_workspace_is_refused(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r.workspace").symlink_to(tmp_path / "nowhere", target_is_directory=True)  # dangling
    code, _, err = C.in_process("run", "plan", "--run-id", "r", "--state-dir", tmp_path / "runs")
    assert code == 2 and "r.workspace already exists" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "nowhere").exists()
