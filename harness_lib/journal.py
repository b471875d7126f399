"""The run's journal: a save appends what changed, one short line, instead of rewriting the whole run.

    <state_dir>/<run_id>.json      the snapshot: the whole run, as ``state.save`` always wrote it
    <state_dir>/<run_id>.journal   one line per save since: CRC32 of the JSON, a space, the JSON, a newline

        3a41c0de {"j":"9f2c41d07a3be815","n":1,"set":{"turns":4,...},"add":{"messages":[...],"per_turn":[...]}}

Each line names its snapshot by the digest of the snapshot's bytes (``j``), so the snapshot's format is
unchanged and a journal is never applied to a snapshot it does not extend. A line sets the plain fields
that changed (``set``) and appends to the lists that grew (``add``): the transcript, the per-turn record
and the tool log only ever grow between two saves (``Bound.delta`` checks what it cheaply can; anything
else is written whole). Loading is the snapshot, then its journal's lines in order. The lines of another
snapshot (a compaction cut short before the journal was emptied) are older than it, and skipped; a last
line without its newline (or zeros where it was) is a write a crash cut short, and dropped; any other
line that fails its checksum, or a gap in the numbering, is not what a crash leaves: the run is refused,
naming the file. A checksum is no signature: the state a journal makes is checked whole, as a snapshot is.

Saves are fsynced (``state.save``) after a paid reply, before a write begins, and whenever the run is
written whole; a read's result is appended without one (running a read again is harmless), and is on disk
with the next synced save. A SIGKILL loses nothing written; a power cut, at most what was not yet synced.

Compaction writes the snapshot (temporary file, fsync, rename: a reader sees the old one or the new one),
and only then lets the journal go: emptied at its next append, removed when the run stops. A kill between
the two steps leaves a snapshot newer than its journal, which the digest tells apart. It happens when a
process first saves a run (so every process begins from a snapshot of its own), when the run stops, and
when the journal has grown past the snapshot's size (and ``MIN_COMPACT``): the rewrites then cost a fixed
share of what was appended, however long the run, and a load reads at most about twice the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
import zlib
from pathlib import Path

from . import files

LISTS = ("messages", "per_turn", "tool_log", "approved", "started", "subruns")
MIN_COMPACT = 64 * 1024  # bytes of journal below which a compaction would cost more than it saves


class JournalError(ValueError):
    """A journal that is not what this harness and its crashes leave."""


def _frame(body: bytes) -> bytes:
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def _encode(value) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class Bound:
    """One run's journal in one folder, as this process last saved it: what ``state.save`` appends to.

    The state carries it, ``RunState.journal`` (never saved, never copied: a copy or a load of a run starts
    without one, so its first save writes the whole run). ``extends`` says whether it may still be appended
    to: its file the one asked for, its snapshot still the one this process wrote."""

    def __init__(self, state, path: Path, base: str, snapshot: Path, snapshot_bytes: int, scalars: dict):
        st = os.stat(snapshot)
        self.path, self.base, self.scalars = path, base, scalars
        self.snapshot_id = (st.st_ino, st.st_mtime_ns, st.st_size)
        self.limit = max(snapshot_bytes, MIN_COMPACT)  # bytes of journal after which the run is written whole
        self.fd: int | None = None
        self.seq, self.appended, self.unsynced = 0, 0, False
        self._remember(state)

    def extends(self, path: Path, snapshot: Path) -> bool:
        """Whether this is the journal at ``path``, of the snapshot on disk at ``snapshot``."""
        if self.path != path:
            return False
        try:
            st = os.stat(snapshot)
        except OSError:
            return False
        return (st.st_ino, st.st_mtime_ns, st.st_size) == self.snapshot_id

    def _remember(self, state):
        self.lists = {name: getattr(state, name) for name in LISTS}
        self.lens = {name: len(lst) for name, lst in self.lists.items()}
        self.lasts = {name: lst[-1] if lst else None for name, lst in self.lists.items()}
        self.values = {k: self._key(getattr(state, k)) for k in self.scalars}

    @staticmethod
    def _key(value):
        """What a plain field is compared by: its type and value (0 is not 0.0 in the file), or the encoding
        of a dict (which may be edited in place)."""
        return _encode(value) if isinstance(value, (dict, list)) else (type(value), value)

    def delta(self, state) -> bytes | None:
        """The line that brings the journal up to ``state``; None when only a rewrite can (a list that
        shrank or was replaced, an element replaced in place). b"" when nothing changed."""
        add = {}
        for name in LISTS:
            lst, n = getattr(state, name), self.lens[name]
            if lst is not self.lists[name] or len(lst) < n or (n and lst[n - 1] is not self.lasts[name]):
                return None
            if len(lst) > n:
                add[name] = lst[n:]
        changed = {}
        for k, key_in_file in self.scalars.items():
            value = getattr(state, k)
            if self._key(value) != self.values[k]:
                changed[key_in_file] = value
        if not add and not changed:
            return b""
        body = _encode({"j": self.base, "n": self.seq + 1, "set": changed, "add": add}).encode()
        return _frame(body)

    def append(self, state, line: bytes, sync: bool) -> None:
        fd = self.fd
        if line:
            if fd is None:  # the first line after a compaction: whatever the file held is older, so anew
                fd = self.fd = files.create_own(self.path, os.O_WRONLY | os.O_APPEND)
                self._closer = weakref.finalize(self, _close, fd)  # closed with this object, if not before
                _sync_dir(self.path.parent)
            written = os.write(fd, line)
            if written != len(line):  # only a full disk writes short to a regular file
                raise OSError(28, "No space left on device (short write)")
            self.seq += 1
            self.appended += len(line)
            self.unsynced = True
            self._remember(state)
        if sync and self.unsynced and fd is not None:
            os.fsync(fd)
            self.unsynced = False

    def close(self):
        """Let go of the file: this binding is done with (``state.save`` binds the next snapshot anew)."""
        if self.fd is not None:
            self._closer()
            self.fd = None


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def digest(snapshot: bytes) -> str:
    """What binds a journal to its snapshot: a line extends the snapshot whose bytes have this digest."""
    return hashlib.blake2b(snapshot, digest_size=8).hexdigest()


def _sync_dir(directory: Path):
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- reading ------------------------------------------------------------------------------------------
def replay(data: dict, path: Path, base: str, scalars) -> int:
    """Apply to ``data`` (a snapshot) the lines of its journal at ``path``; returns how many applied.
    Raises ``JournalError`` (with the line number) for a journal a crash cannot have left."""
    try:
        raw = files.read(path, files.MAX_STATE_BYTES, "a run's journal")  # never through a link, never too big
    except FileNotFoundError:
        return 0
    lines = raw.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line a crash cut short (never relied on)
    applied = 0
    for i, line in enumerate(lines, 1):
        entry = _parse(line, i)
        if entry.get("j") != base:
            if applied:
                raise JournalError(f"line {i} belongs to another snapshot, after lines of this one")
            continue  # older than the snapshot: a compaction was cut short before the journal was emptied
        if entry.get("n") != applied + 1:
            raise JournalError(f"line {i} is save {entry.get('n')!r}, expected {applied + 1}: a line is missing")
        sets, adds = entry.get("set"), entry.get("add")
        if not isinstance(sets, dict) or not isinstance(adds, dict):
            raise JournalError(f"line {i} is not a change to a run")
        for k, v in sets.items():
            if k not in scalars:
                raise JournalError(f"line {i} sets {k!r}, which is not a field it can set")
            data[k] = v
        for k, v in adds.items():
            if k not in LISTS or not isinstance(v, list) or not isinstance(data.get(k, []), list):
                raise JournalError(f"line {i} adds to {k!r}, which is not one of the run's lists")
            data.setdefault(k, []).extend(v)
        applied += 1
    return applied


def _parse(line: bytes, i: int) -> dict:
    crc, _, body = line.partition(b" ")
    try:
        ok = len(crc) == 8 and int(crc, 16) == zlib.crc32(body)
    except ValueError:
        ok = False
    if not ok:
        raise JournalError(f"line {i} fails its checksum (not what a crash leaves: only the last line can be cut "
                           f"short, and it has no newline)")
    try:
        entry = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        entry = None
    if not isinstance(entry, dict):
        raise JournalError(f"line {i} is not a JSON object")
    return entry
