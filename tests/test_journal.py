"""The run's journal (issue 13, item 3): a save appends one framed line; a load is the snapshot plus its
journal's valid lines; what a crash, a full disk or an editor leaves is either read exactly or refused."""

import asyncio
import copy
import errno
import json
import os
import pickle
import re
import shutil
import zlib
from pathlib import Path

import pytest

from harness_lib import journal
from harness_lib import loop as loop_module
from harness_lib import state as state_module
from harness_lib.lock import RunLock, RunLockError
from harness_lib.loop import Options, run
from harness_lib.state import DiskFullError, StateFileError, journal_path, load, make_reserve, new_run, save, state_path
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


def snap(directory):
    """The files of a state folder, as bytes (what a kill at this instant would leave)."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def restore(files, directory):
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


def runaway(provider, tmp_path, turns: int, monkeypatch, min_compact=None):
    """The runaway, ``turns`` turns, saved to tmp_path/runs; after every save, the folder's bytes and the
    state as it was saved."""
    if min_compact is not None:
        monkeypatch.setattr(journal, "MIN_COMPACT", min_compact)
    points, compactions = [], []
    real_save, real_compact = loop_module.save, state_module._compact

    def recording_save(state, directory, **kw):
        path = real_save(state, directory, **kw)
        points.append((snap(directory), json.loads(json.dumps(state.to_dict()))))
        return path

    def counting_compact(state, directory, path, final):
        compactions.append(state.turns)
        return real_compact(state, directory, path, final)

    monkeypatch.setattr(loop_module, "save", recording_save)
    monkeypatch.setattr(state_module, "_compact", counting_compact)
    d = tmp_path / "runs"
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="r"),
                            Workspace.copy_of(into=tmp_path / "ws").tools(),
                            Options(base_url=provider.base_url, state_dir=d, max_turns=turns)))
    return d, state, points, compactions


def test_every_save_loads_back_as_the_state_it_saved(provider, tmp_path, monkeypatch):
    d, state, points, compactions = runaway(provider, tmp_path, 12, monkeypatch)
    assert state.status == "max_turns_exceeded" and len(points) >= 24
    assert compactions == [0, 12]  # the first save and the stop: every other save was one appended line
    for files, saved in points:
        restore(files, d)
        assert load(d, "r").to_dict() == saved
    assert not journal_path(d, "r").exists()  # a stopped run is its snapshot alone


def test_compaction_mid_run_keeps_every_save_and_bounds_the_journal(provider, tmp_path, monkeypatch):
    d, state, points, compactions = runaway(provider, tmp_path, 30, monkeypatch, min_compact=0)
    assert len(compactions) >= 5, compactions  # the journal outgrew the snapshot several times
    for files, saved in points:
        assert len(files.get("r.journal", b"")) <= len(files["r.json"]) + 4096  # at most ~ the snapshot, + a line
        restore(files, d)
        assert load(d, "r").to_dict() == saved


def test_a_save_appends_a_line_that_does_not_grow_with_the_transcript(provider, tmp_path, monkeypatch):
    d, state, points, _ = runaway(provider, tmp_path, 40, monkeypatch)
    lines = [len(files["r.journal"]) for files, _ in points if "r.journal" in files]
    steps = [b - a for a, b in zip(lines, lines[1:]) if b > a]
    early, late = steps[:10], steps[-10:]
    assert max(late) < 1.5 * max(early), (early, late)  # turn 40 appends what turn 5 did, not the transcript
    assert len(points[-2][0]["r.json"]) == len(points[1][0]["r.json"])  # the snapshot was not rewritten


# -- hostile journals -----------------------------------------------------------------------------------
@pytest.fixture
def mid_run(provider, tmp_path, monkeypatch):
    """A run killed at turn 6: its snapshot, and a journal of a dozen lines."""
    d, _, points, _ = runaway(provider, tmp_path, 10, monkeypatch)
    monkeypatch.undo()  # the recording ends here
    files, saved = next((f, s) for f, s in points if s["turns"] == 6 and s["messages"][-1]["role"] == "tool")
    restore(files, d)
    assert load(d, "r").to_dict() == saved and files["r.journal"].count(b"\n") >= 10
    return d, saved


def test_a_torn_last_line_is_dropped(mid_run):
    d, saved = mid_run
    path = journal_path(d, "r")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])  # the last write cut short
    before = load(d, "r")
    assert before.messages == saved["messages"][:-1]  # the last save (a tool's result) is lost, nothing else
    path.write_bytes(b"".join(lines[:-1]) + b"\0" * 300)  # a power cut can leave zeros where the line was
    assert load(d, "r").to_dict() == before.to_dict()


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_damaged_line_that_a_crash_cannot_leave_is_refused(mid_run, where):
    d, _ = mid_run
    path = journal_path(d, "r")
    lines = path.read_bytes().splitlines(keepends=True)
    i = {"first": 0, "middle": len(lines) // 2, "last": len(lines) - 1}[where]
    lines[i] = lines[i].replace(b'"turns":', b'"turns": ', 1) if b'"turns":' in lines[i] else \
        lines[i][:20] + bytes([lines[i][20] ^ 1]) + lines[i][21:]
    path.write_bytes(b"".join(lines))
    before = snap(d)
    with pytest.raises(StateFileError) as e:
        load(d, "r")
    assert str(path) in str(e.value) and f"line {i + 1}" in str(e.value) and "checksum" in str(e.value)
    assert snap(d) == before  # nothing is rewritten


def frame(entry: dict) -> bytes:
    body = json.dumps(entry, separators=(",", ":")).encode()
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def test_a_missing_line_is_refused(mid_run):
    d, _ = mid_run
    path = journal_path(d, "r")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + lines[4:]))
    with pytest.raises(StateFileError, match="line 4 is save 5, expected 4: a line is missing"):
        load(d, "r")


def test_a_well_framed_line_that_edits_the_run_is_refused_by_the_whole_state_check(mid_run):
    """A checksum is no signature: an editor can frame a line. The state it makes is checked whole."""
    d, saved = mid_run
    path = journal_path(d, "r")
    last = json.loads(path.read_bytes().splitlines()[-1].split(b" ", 1)[1])
    path.write_bytes(path.read_bytes() + frame({"j": last["j"], "n": last["n"] + 1, "set": {"cost_usd": 0.0},
                                                "add": {}}))
    with pytest.raises(StateFileError) as e:
        load(d, "r")
    assert f"{state_path(d, 'r')} (with the " in str(e.value) and "cost_usd is not the sum of per_turn" in str(e.value)
    for entry, says in [({"set": {"messages": []}, "add": {}}, "sets 'messages'"),
                        ({"set": {}, "add": {"turns": [1]}}, "adds to 'turns'"),
                        ({"set": [], "add": {}}, "not a change to a run"),
                        ({"set": {}, "add": {"messages": {"role": "user"}}}, "adds to 'messages'"),
                        ({"set": {}, "add": {"notes": []}}, "adds to 'notes'")]:
        path.write_bytes(path.read_bytes().rsplit(b"\n", 2)[0] + b"\n" +
                         frame({"j": last["j"], "n": last["n"] + 1, **entry}))
        with pytest.raises(StateFileError, match=says):
            load(d, "r")


def test_a_journal_without_its_snapshot_is_refused(mid_run):
    d, _ = mid_run
    state_path(d, "r").unlink()
    with pytest.raises(StateFileError, match=r"r\.json: no such state file \(its journal r\.journal is there"):
        load(d, "r")


def test_another_snapshot_under_the_journal_is_not_extended_by_it(mid_run):
    """The journal's lines name their snapshot by digest: put another snapshot in place (an older one, an
    edited one) and none of the lines apply; an old line after the snapshot's own is refused."""
    d, saved = mid_run
    path = journal_path(d, "r")
    data = json.loads(state_path(d, "r").read_bytes())
    data["meta"] = {**data["meta"], "note": "edited"}
    state_path(d, "r").write_text(json.dumps(data))
    assert load(d, "r").turns == data["turns"] < saved["turns"]  # the snapshot alone
    restore_lines = path.read_bytes()
    own = frame({"j": journal.digest(state_path(d, "r").read_bytes()), "n": 1, "set": {"error": "x"}, "add": {}})
    path.write_bytes(own + restore_lines)
    with pytest.raises(StateFileError, match="line 2 belongs to another snapshot, after lines of this one"):
        load(d, "r")


# -- compaction, killed between its steps -------------------------------------------------------------
class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no except clause of the harness catches it)."""


class OsWith:
    """The os module with some functions replaced, for one module of the harness (os itself is untouched)."""

    def __init__(self, **replaced):
        self.replaced = replaced

    def __getattr__(self, name):
        return self.replaced.get(name, getattr(os, name))


def die(*args, **kwargs):
    raise Killed()


def compaction_killed(d, monkeypatch, step: str):
    """Load the mid-run state, change it, and save with a compaction that dies at ``step``."""
    state = load(d, "r")
    save(state, d)                                  # this process's first save: a compaction
    state.meta["step"] = step
    state.messages.append({"role": "user", "content": "more"})
    save(state, d, sync=False)                      # a line in the new journal
    after_line = state.to_dict()
    state.error = "changed"
    final = step == "before the journal is removed"
    if final:
        state.status = "interrupted"
        monkeypatch.setattr(state_module.Path, "unlink", die)
    elif step == "before the rename":
        monkeypatch.setattr(state_module, "os", OsWith(replace=die))
    else:
        monkeypatch.setattr(state_module, "os", OsWith(replace=lambda *a: (os.replace(*a), die())))
    with pytest.raises(Killed):
        state_module._compact(state, d, state_path(d, "r"), final=final)
    monkeypatch.undo()
    return after_line, state.to_dict()


@pytest.mark.parametrize("step", ["before the rename", "after the rename", "before the journal is removed"])
def test_a_compaction_killed_between_its_steps_loses_nothing(mid_run, monkeypatch, step):
    d, _ = mid_run
    after_line, whole = compaction_killed(d, monkeypatch, step)
    loaded = load(d, "r").to_dict()
    if step == "before the rename":
        assert loaded == after_line  # the old snapshot and its journal: the save in progress is lost, no other
    else:
        assert loaded == whole       # the new snapshot; the journal's lines, older than it, are not applied again
        assert journal_path(d, "r").exists()
    state = load(d, "r")
    state.messages.append({"role": "user", "content": "after"})
    save(state, d)
    save(state, d)  # no change: nothing appended
    assert load(d, "r").to_dict() == state.to_dict()


# -- disk full, two owners ------------------------------------------------------------------------------
def test_disk_full_during_an_append_saves_the_run_in_its_reserve(mid_run, monkeypatch):
    d, _ = mid_run
    state = load(d, "r")
    save(state, d)
    make_reserve(d, "r", 1 << 16)
    real_write = os.write

    def full(fd, data):
        real_write(fd, data[:len(data) // 2])  # half the line lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(journal, "os", OsWith(write=full))
    state.messages.append({"role": "user", "content": "the last change"})
    with pytest.raises(DiskFullError):
        save(state, d)
    monkeypatch.undo()
    assert load(d, "r").to_dict() == state.to_dict()  # whole, in the snapshot written into the reserve
    assert not journal_path(d, "r").exists()


def test_disk_full_during_an_append_without_a_reserve_keeps_the_last_save(mid_run, monkeypatch):
    d, saved = mid_run
    state = load(d, "r")
    save(state, d)
    real_write = os.write

    def full(fd, data):
        real_write(fd, data[:len(data) // 3])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(journal, "os", OsWith(write=full))
    state.messages.append({"role": "user", "content": "lost"})
    with pytest.raises(OSError) as e:
        save(state, d)
    assert e.value.errno == errno.ENOSPC and not isinstance(e.value, DiskFullError)
    assert load(d, "r").to_dict() == saved  # the torn line is dropped; the last save is whole


def test_two_owners_of_one_run(mid_run):
    """Across processes the lock refuses the second owner (one flock per open file, so a second open in
    this process stands for another process). In one process, without the lock, two state objects of one
    run saving in turn: each notices the other's snapshot, and the file is always the last saver's run."""
    d, _ = mid_run
    with RunLock(d, "r"):
        with pytest.raises(RunLockError, match="in use by process"):
            with RunLock(d, "r"):
                pass
    a, b = load(d, "r"), load(d, "r")
    save(a, d)
    a.messages.append({"role": "user", "content": "a1"})
    save(a, d)
    save(b, d)
    b.messages.append({"role": "user", "content": "b1"})
    save(b, d)
    assert load(d, "r").to_dict() == b.to_dict()
    a.messages.append({"role": "user", "content": "a2"})
    save(a, d)  # a's journal belongs to a snapshot that b replaced: a rewrites the run whole
    assert load(d, "r").to_dict() == a.to_dict()


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copy_of_a_bound_state_is_not_bound_to_its_journal(mid_run, how):
    """The binding is the state's own (RunState.journal): a copy starts without one, so its first save writes
    the run whole, and the original, its snapshot replaced, writes whole too; the file is the last saver's run.
    A copy that kept the binding would append to the same journal under the same line numbers."""
    d, _ = mid_run
    state = load(d, "r")
    save(state, d)
    state.messages.append({"role": "user", "content": "one"})
    save(state, d)
    assert state.journal is not None and state.journal.seq == 1
    twin = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": lambda s: pickle.loads(pickle.dumps(s))}[how](state)
    assert twin.journal is None and twin == state
    twin.messages = [*twin.messages, {"role": "user", "content": "two"}]
    save(twin, d)
    assert load(d, "r").to_dict() == twin.to_dict() and twin.journal.seq == 0
    state.messages.append({"role": "user", "content": "three"})
    save(state, d)
    assert load(d, "r").to_dict() == state.to_dict()


def test_a_list_edited_in_place_is_written_whole(mid_run):
    d, _ = mid_run
    state = load(d, "r")
    save(state, d)
    state.messages[-1] = {"role": "user", "content": "replaced"}  # not an append: the journal cannot say it
    save(state, d)
    assert load(d, "r").to_dict() == state.to_dict()
    state.per_turn = list(state.per_turn)  # another list object
    state.per_turn[-1] = dict(state.per_turn[-1], cost_usd=state.per_turn[-1]["cost_usd"])
    state.messages.pop()
    save(state, d)
    assert load(d, "r").to_dict() == state.to_dict()


def test_the_command_line_continues_a_run_from_its_journal(mid_run, provider):
    from harness_lib.cli import main
    d, saved = mid_run
    assert main(["resume", "r", "--state-dir", str(d), "--base-url", provider.base_url, "--max-turns", "8",
                 "--json"]) == 0
    state = load(d, "r")
    assert state.turns == 8 and state.messages[:len(saved["messages"])] == saved["messages"]


def test_a_field_that_changes_only_its_type_is_saved(tmp_path):
    state = new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="r")
    state.own_cost_usd = 0
    save(state, tmp_path)
    state.own_cost_usd = 0.0
    save(state, tmp_path)  # equal to 0, but not the same in the file
    assert type(load(tmp_path, "r").own_cost_usd) is float and journal_path(tmp_path, "r").exists()


# -- each rule at its edge, fast (found by make mutate: docs/mutation.md) ------------------------------------
def bound_run(d, lines=0):
    """A fresh run saved once (a compaction: bound to its journal), then ``lines`` messages, each its own save."""
    state = new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="r")
    save(state, d)
    for i in range(lines):
        state.messages.append({"role": "user", "content": f"line {i}"})
        save(state, d)
    return state


def entries(d):
    return [json.loads(line.split(b" ", 1)[1]) for line in journal_path(d, "r").read_bytes().splitlines()]


def test_a_line_sets_only_what_changed_and_a_save_without_a_change_appends_nothing(tmp_path):
    state = bound_run(tmp_path)
    save(state, tmp_path)
    assert not journal_path(tmp_path, "r").exists()  # nothing changed: not even an empty journal
    state.error = "x"
    save(state, tmp_path)
    state.messages.append({"role": "user", "content": "more"})
    save(state, tmp_path)
    before = journal_path(tmp_path, "r").read_bytes()
    save(state, tmp_path)
    save(state, tmp_path, sync=False)
    assert journal_path(tmp_path, "r").read_bytes() == before
    assert [(e["set"], e["add"]) for e in entries(tmp_path)] == [
        ({"error": "x"}, {}), ({}, {"messages": [{"role": "user", "content": "more"}]})]
    assert load(tmp_path, "r").to_dict() == state.to_dict()


def test_a_synced_save_fsyncs_the_journal_once_and_an_unsynced_one_not_at_all(tmp_path, monkeypatch):
    """sync=False (a read's result) leaves its line to the next synced save, which fsyncs it even when it
    changes nothing; a line already synced is not synced again."""
    state = bound_run(tmp_path)
    synced = []
    monkeypatch.setattr(journal, "os", OsWith(fsync=lambda fd: (synced.append(fd), os.fsync(fd))))
    state.messages.append({"role": "user", "content": "a read's result"})
    save(state, tmp_path, sync=False)
    fd = state.journal.fd
    assert fd is not None and fd not in synced
    save(state, tmp_path)
    assert synced.count(fd) == 1
    save(state, tmp_path)
    assert synced.count(fd) == 1
    state.messages.append({"role": "user", "content": "a paid reply"})
    save(state, tmp_path)
    assert synced.count(fd) == 2


def test_a_bound_run_saved_elsewhere_or_without_its_snapshot_is_written_whole(tmp_path):
    state = bound_run(tmp_path / "a", lines=1)
    state.messages.append({"role": "user", "content": "to b"})
    save(state, tmp_path / "b")  # another folder: its own snapshot there, the first folder's journal untouched
    assert load(tmp_path / "b", "r").to_dict() == state.to_dict()
    assert len(load(tmp_path / "a", "r").messages) == len(state.messages) - 1
    save(state, tmp_path / "a")
    state_path(tmp_path / "a", "r").unlink()  # the snapshot gone (an operator's mistake): the journal alone is no run
    state.messages.append({"role": "user", "content": "after"})
    save(state, tmp_path / "a")
    assert load(tmp_path / "a", "r").to_dict() == state.to_dict()


def test_the_journal_grows_to_exactly_its_snapshots_size_before_the_run_is_written_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(journal, "MIN_COMPACT", 0)
    state = bound_run(tmp_path)
    limit = state_path(tmp_path, "r").stat().st_size
    state.error = ""
    state.error = "x" * (limit - len(state.journal.delta(state)))  # a line of exactly the snapshot's size
    assert len(state.journal.delta(state)) == limit
    save(state, tmp_path)
    assert journal_path(tmp_path, "r").stat().st_size == limit and state.journal.seq == 1  # appended
    state.messages.append({"role": "user", "content": "one byte more"})
    save(state, tmp_path)
    assert state.journal.seq == 0 and state_path(tmp_path, "r").stat().st_size > limit  # rewritten whole
    assert load(tmp_path, "r").to_dict() == state.to_dict()


def test_a_value_json_cannot_hold_is_refused_before_it_reaches_the_journal(tmp_path):
    """NaN: the snapshot refuses it (allow_nan=False), so a journal line must too, or the run on disk would
    hold what no load accepts. The last save stays the run."""
    state = bound_run(tmp_path, lines=1)
    saved = state.to_dict()
    state.meta["score"] = float("nan")
    with pytest.raises(ValueError, match="not JSON compliant"):
        save(state, tmp_path)
    assert load(tmp_path, "r").to_dict() == saved


def replace_lines(d, *lines: bytes):
    journal_path(d, "r").write_bytes(b"".join(lines))


def test_a_checksum_that_is_not_hex_is_refused(tmp_path):
    bound_run(tmp_path, lines=1)
    line = journal_path(tmp_path, "r").read_bytes()
    replace_lines(tmp_path, b"zzzzzzzz" + line[8:])
    with pytest.raises(StateFileError, match="line 1 fails its checksum"):
        load(tmp_path, "r")


def test_a_damaged_line_among_an_older_snapshots_lines_is_refused(tmp_path):
    """Lines of another snapshot are skipped, but each is still read: a damaged one is not what a crash leaves."""
    bound_run(tmp_path, lines=3)
    first, middle, last = journal_path(tmp_path, "r").read_bytes().splitlines(keepends=True)
    state_path(tmp_path, "r").write_bytes(state_path(tmp_path, "r").read_bytes() + b" ")  # another snapshot
    assert load(tmp_path, "r").messages == new_run(SYSTEM_PROMPT, TASK, "x").messages  # none of the lines apply
    replace_lines(tmp_path, first, middle[:20] + bytes([middle[20] ^ 1]) + middle[21:], last)
    with pytest.raises(StateFileError, match="line 2 fails its checksum"):
        load(tmp_path, "r")


def test_a_snapshot_refused_without_a_journal_does_not_speak_of_one(tmp_path):
    state = bound_run(tmp_path)
    state.status = "completed"
    save(state, tmp_path)  # stopped: the snapshot alone
    data = json.loads(state_path(tmp_path, "r").read_bytes())
    state_path(tmp_path, "r").write_text(json.dumps({**data, "cost_usd": 1.0}))
    with pytest.raises(StateFileError) as e:
        load(tmp_path, "r")
    assert str(e.value).startswith(f"{state_path(tmp_path, 'r')}: cost_usd is not the sum of per_turn")


def test_a_line_adding_to_a_list_the_snapshot_lacks_starts_that_list(tmp_path):
    """A snapshot may lack a list (state.check reads a missing one as empty); a line adding to it starts it."""
    data = bound_run(tmp_path).to_dict()
    del data["subruns"]
    snapshot = json.dumps(data).encode()
    state_path(tmp_path, "r").write_bytes(snapshot)
    child = {"runId": "r.c1", "status": "completed", "turns": 1, "costUsd": 0.001}
    replace_lines(tmp_path, frame({"j": journal.digest(snapshot), "n": 1, "set": {}, "add": {"subruns": [child]}}))
    assert load(tmp_path, "r").subruns == [child]


def test_a_reserve_holds_exactly_its_bytes_written_as_zeros_where_they_cannot_be_allocated(tmp_path, monkeypatch):
    """The reserve is `size` bytes; a file system without fallocate gets them written, 64 KiB at a time, once
    each; any other failure is raised and leaves no reserve behind."""
    assert make_reserve(tmp_path, "r", 1000).stat().st_size == 1000
    size, writes, real_pwrite = 2 * (1 << 16) + 5, [], os.pwrite

    def pwrite(fd, data, offset):
        writes.append((offset, len(data)))
        if sum(n for _, n in writes) > size + 1:  # the two reserves below, each once
            raise AssertionError("the reserve was written more than once over")
        return real_pwrite(fd, data, offset)

    def cannot(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(os, "posix_fallocate", cannot)
    monkeypatch.setattr(os, "pwrite", pwrite)
    assert make_reserve(tmp_path, "big", size).read_bytes() == b"\0" * size
    assert writes == [(0, 1 << 16), (1 << 16, 1 << 16), (2 << 16, 5)]
    assert make_reserve(tmp_path, "one", 1).read_bytes() == b"\0"

    def broken(fd, offset, length):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "posix_fallocate", broken)
    with pytest.raises(OSError) as e:
        make_reserve(tmp_path, "lost", size)
    assert e.value.errno == errno.EIO and not state_module.reserve_path(tmp_path, "lost").exists()


def test_a_value_json_cannot_hold_is_refused_before_it_reaches_the_snapshot(tmp_path):
    """As for a journal line: a NaN never reaches the snapshot, which no load would accept; the last save stays
    the run (found by make mutate: state._write)."""
    state = bound_run(tmp_path, lines=1)
    saved = state.to_dict()
    state.meta["score"], state.status = float("nan"), "completed"  # a stopped run: written whole
    with pytest.raises(ValueError, match="not JSON compliant"):
        save(state, tmp_path)
    assert load(tmp_path, "r").to_dict() == saved


def test_the_snapshot_is_written_beside_itself_under_a_hidden_name_then_renamed(tmp_path, monkeypatch):
    """The temporary file is in the state's folder (one file system: the rename is atomic), and what a power
    cut leaves of it is hidden and named after its run, never ``*.json`` (found by make mutate: state._write)."""
    renamed, real_replace = [], os.replace

    def replace(src, dst):
        renamed.append((src, dst))
        return real_replace(src, dst)
    monkeypatch.setattr(state_module.os, "replace", replace)
    state = new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="r")
    save(state, tmp_path / "runs")
    [(src, dst)] = renamed
    assert Path(dst) == state_path(tmp_path / "runs", "r") and Path(src).parent == Path(dst).parent
    assert re.fullmatch(r"\.r\.\w+\.tmp", Path(src).name), src
    assert sorted(os.listdir(tmp_path / "runs")) == ["r.json"]


def test_a_save_makes_the_states_folder_and_the_folders_above_it(tmp_path):
    """(found by make mutate: state._compact)"""
    state = new_run(SYSTEM_PROMPT, TASK, "runaway", run_id="r")
    save(state, tmp_path / "new" / "runs")
    assert load(tmp_path / "new" / "runs", "r").to_dict() == state.to_dict()


def test_a_run_saved_stopped_then_continued_in_the_same_process_saves_again(tmp_path):
    """A stopped run is written whole and let go of its journal; the same object resumed (a cell run again)
    binds a new one at its next save (found by make mutate: state._unbind)."""
    state = bound_run(tmp_path, lines=1)
    state.status = "max_turns_exceeded"
    save(state, tmp_path)
    state.status = "running"
    for i in range(2):
        state.messages.append({"role": "user", "content": f"again {i}"})
        save(state, tmp_path)
    assert load(tmp_path, "r").to_dict() == state.to_dict()


def test_disk_full_as_a_stopped_run_is_written_whole_saves_it_in_its_reserve(tmp_path, monkeypatch):
    """The snapshot, not a journal line, meets the full disk: the run is written into its reserve, its journal
    removed, and the error says the disk is full (found by make mutate: state.save)."""
    state = bound_run(tmp_path, lines=1)
    make_reserve(tmp_path, "r", 1 << 16)
    real_fsync, failed = os.fsync, []

    def full(fd):
        if not failed:
            failed.append(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)
    monkeypatch.setattr(state_module.os, "fsync", full)
    state.status = "completed"
    with pytest.raises(DiskFullError, match="the run was saved using its reserve"):
        save(state, tmp_path)
    monkeypatch.undo()
    assert failed and load(tmp_path, "r").to_dict() == state.to_dict()
    assert sorted(os.listdir(tmp_path)) == ["r.json"]  # no journal, no reserve, no temporary file
