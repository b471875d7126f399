"""One owner per run: an exclusive lock beside its state file.

    with RunLock(state_dir, run_id):      # or RunLockError, naming the process that holds it
        state = load(state_dir, run_id)   # load, decide, run, save: nobody else can do any of it now

The lock is the operating system's (``flock`` on ``<state_dir>/<run_id>.lock``), so the kernel releases it
when its process dies, however it dies: a state that says ``running`` while nobody holds its lock was left
by a process that crashed, and ``resume`` continues it (the dead holder's file stays behind, harmless:
the next owner locks it, and removes it when done). A second process never waits: it refuses at once,
and says which process (pid, command, start time) holds the run. The holder writes that into the lock file;
it is only ever information, never what decides who owns the run.

The lock is the file's, so it lasts as long as the file's name: a temp-folder cleaner that removes
``r.lock`` while a run holds it lets a second process lock a new ``r.lock`` and take the run (turns 15 to 30
of one run were paid twice that way). A holder therefore checks, at every step of its run (``lost``),
that the name still leads to its own locked file; when it does not, the run stops there, saved, before it
pays another turn, saying why. The step in flight when the file went may still overlap the new owner's
first: at most one turn paid twice, where before it was every turn of the overlap. ``release`` removes the
file only if it is still its own, never a new owner's.

``runs.py`` takes the lock for ``start``, ``resume``, ``approve`` and ``reject`` (the command line's ``run``,
``resume``, ``--approve`` and ``--reject``). ``save`` and ``load`` do not: a program that drives runs in-process
with ``loop.run`` (the notebooks, the test campaigns) owns its runs already.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from . import files
from .state import state_path


class RunLockError(RuntimeError):
    """The run is owned by another live process."""


def lock_path(directory: str | Path, run_id: str) -> Path:
    return state_path(directory, run_id).with_suffix(".lock")


class RunLock:
    def __init__(self, directory: str | Path, run_id: str):
        self.path, self.run_id = lock_path(directory, run_id), run_id
        self.fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = files.open_own(self.path, os.O_RDWR | os.O_CREAT, in_place=True)  # never through a link
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(_read(fd))
                os.close(fd)
                raise RunLockError(f"run {self.run_id} is in use by {holder}; wait for it to end or stop it "
                                   f"(kill -TERM <pid> stops it cleanly), then try again") from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the holder before us may have removed the file as we opened it: lock the one in place
                if os.lstat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self.fd = fd
        info = {"pid": os.getpid(), "command": " ".join(sys.argv)[:300], "since": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError:
            pass  # the holder's description is a courtesy; the lock is what matters (a full disk, say)
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def lost(self) -> str | None:
        """None while ``<run_id>.lock`` is still this holder's locked file; else why the run is no longer
        safely its own (the file removed, or another in its place: another process may own the run now)."""
        if self.fd is None:
            return None
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            what = "was removed"
        except OSError as e:
            what = f"cannot be checked ({e.strerror or e})"
        else:
            mine = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                return None
            what = "was replaced by another file"
        return (f"the run's lock file {self.path.name} {what} while this process held the run: another process "
                f"may own it now, so this one stopped before paying another turn")

    def release(self) -> None:
        """Remove the file if it is still this holder's, then let go: a process that opened it meanwhile
        finds it gone and retries. A file that replaced it is another owner's, and stays."""
        if self.fd is not None:
            try:
                if self.lost() is None:
                    self.path.unlink(missing_ok=True)
            except OSError:
                pass
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


def _read(fd: int) -> dict | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _describe(info: dict | None) -> str:
    if not info:
        return "another process (it has not said which yet)"
    from .terminal import visible
    return visible(f"process {info.get('pid')} ({info.get('command')!s:.120}), since {info.get('since')}")
