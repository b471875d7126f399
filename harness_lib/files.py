"""The files a run keeps (its snapshot, journal, ledger, lock, reserve, a workspace's journal of writes),
opened as the harness's own and as nothing else.

A state folder may be shared, synced, cleaned or tampered with. Whoever can write in it can plant a link
where the harness writes (``r.lock -> victim`` put the lock's JSON over the victim; ``.r.reserve ->
notes.txt`` padded the notes with a MiB of NUL bytes) or reads (``r.json -> /dev/zero``), or leave a file
larger than any run (a 3 GiB sparse journal, taken for a torn tail after 25 s and 3.1 GB of memory). So:

* a file is opened with ``O_NOFOLLOW``: a symbolic link in its place is refused, naming it, and never
  followed; and it must be a regular file (a FIFO or a device is refused; ``O_NONBLOCK`` so that opening
  one cannot hang);
* a file written in place (the lock, the ledger, the journal of writes) must have one link: a hard link
  would write into its other name's file too;
* a file made anew (the reserve, a run's journal after a compaction) is created with ``O_EXCL``, after
  whatever regular file of that name an earlier process left is removed (a link there is refused);
* a file is read only when its size is within a limit, checked before reading (``read``): a bigger one is
  refused in one line, never read whole into memory.

The refusals are ``OSError`` (``ELOOP``, ``EFBIG``...) naming the file, so each place that already says
"cannot use <file>" in one line says this too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_STATE_BYTES = 64 * 2 ** 20  # a snapshot or a run's journal: a run that big could not be sent to any model
MAX_RECORD_BYTES = 16 * 2 ** 20  # a ledger, a journal of writes: a few short lines a process


def _refuse(code: int, path: Path | str, why: str) -> OSError:
    return OSError(code, f"{Path(path).name} {why}", str(path))


def open_own(path: Path | str, flags: int, *, in_place: bool = False, mode: int = 0o600) -> int:
    """A descriptor for the harness's own file at ``path``, never through a link, only a regular file;
    ``in_place``: one it writes into, which must have no other name."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(errno.ELOOP, path, "is a symbolic link; the harness never follows one to its own "
                                             "files: remove it") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(errno.EINVAL, path, "is not a regular file; the harness keeps only regular files there")
        if in_place and st.st_nlink > 1:
            raise _refuse(errno.EMLINK, path, f"has {st.st_nlink} hard links; the harness writes only into a file "
                                              f"of its own: remove the other names (or copy it without links)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_own(path: Path | str, flags: int = os.O_WRONLY, mode: int = 0o600) -> int:
    """A new file at ``path`` (``O_EXCL``): a regular file an earlier process left there is removed first;
    a link, or anything else, is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(errno.ELOOP, path, "is a symbolic link; the harness never follows one to its own files: "
                                             "remove it")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(errno.EINVAL, path, "is not a regular file; the harness keeps only regular files there")
        os.unlink(path)  # an earlier process's (a crash leaves one): this one starts anew, under the same name
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def read(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of the harness's own file at ``path`` (``FileNotFoundError`` when there is none), if it
    holds at most ``limit`` bytes: a bigger one is refused before a byte is read."""
    fd = open_own(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size <= limit:
            parts, got = [], 0
            while got <= limit and (piece := os.read(fd, min(1 << 20, limit + 1 - got))):
                parts.append(piece)
                got += len(piece)
            if got <= limit:
                return b"".join(parts)
            size = max(size, got)  # it grew while being read
    finally:
        os.close(fd)
    raise _refuse(errno.EFBIG, path, f"holds {size:,} bytes, more than the {limit // 2 ** 20} MiB {what} may "
                                     f"hold (README, 'A saved run'); refused without reading it")


def cut_torn_tail(fd: int, limit: int = MAX_RECORD_BYTES) -> int:
    """On a file of lines open for writing: remove an unterminated last line (what a write cut short
    leaves); returns the bytes removed. Reads at most ``limit`` bytes back from the end."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    start = max(0, size - limit)
    keep = start + os.pread(fd, size - start, start).rfind(b"\n") + 1  # start: no newline in reach
    os.ftruncate(fd, keep)
    return size - keep
