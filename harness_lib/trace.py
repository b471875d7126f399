"""The trace: one JSON object per line, one line per event.

The vocabulary is the chapter's: ``turn``, ``tool_start``, ``tool_progress``, ``tool_result``,
``approval_required``, ``run_stopped`` (plus ``retry`` when the model call is retried). Every line
carries the run id, so a run that spans processes and days is one query; every turn line carries its
own tokens and the running cost; ``run_stopped`` carries the reason. Lines are appended one at a time,
each in one write to the file (kept open: opening it for every line cost more than the line), so a crash
can tear at most the last line, and ``read`` tolerates exactly that. A process
that finds the file ending in a torn line (its predecessor died mid-write) cuts the fragment off before
its first append, so a torn line is only ever the last one, however many crashes a run survives.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from pathlib import Path
from typing import Callable

from . import files, seam


class HookError(RuntimeError):
    """The reader's ``on_event`` raised: the run ends failed, saying so (``loop.run``)."""


class Trace:
    """``on_event``: the hook for a reader's own view of a run (a line per step on a screen, a clock
    started at ``tool_start``): called with each event once it is recorded, in the order they happen. A hook
    that raises is not called again: ``emit`` raises ``HookError``, and the run ends failed, naming it."""

    def __init__(self, path: str | Path | None = None, timestamps: bool = True,
                 on_event: Callable[[dict], None] | None = None):
        self.path = Path(path) if path else None
        self.timestamps = timestamps
        self.on_event = on_event
        self.events: list[dict] = []  # this process's lines, for a notebook to look at
        self._hook_failed = False
        # opened at the first line; closed by close() (the loop's, when a run ends) or when the Trace is collected
        self._fd: int | None = None

    def emit(self, run_id: str, type: str, **fields) -> dict:
        event = {"runId": run_id, "type": type, **fields}
        if self.timestamps:
            event["ts"] = round(time.time(), 3)
        self.events.append(event)
        if self.path is not None:
            self._append(self.path, (json.dumps(event, separators=(",", ":")) + "\n").encode())
            seam.reached(type)  # the crash seam: a no-op unless a test plugs into it (seam.py)
        if self.on_event is not None and not self._hook_failed:
            try:
                self.on_event(event)
            except Exception as e:  # noqa: BLE001 - a reader's code: said, never left to strand the run
                self._hook_failed = True
                raise HookError(f"the trace's on_event hook raised {e.__class__.__name__}: {e} (at a {type} event)") \
                    from None
        return event

    def _append(self, path: Path, line: bytes) -> None:
        fd = self._fd
        if fd is None:
            cut_torn_tail(path)
            fd = self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
            self._closer = weakref.finalize(self, os.close, fd)
        view = memoryview(line)
        while view:  # a regular file takes it in one write, unless the disk is full (which raises)
            view = view[os.write(fd, view):]

    def close(self):
        """Let go of the file (a later line opens it again)."""
        if self._fd is not None:
            self._closer()
            self._fd = None


def cut_torn_tail(path: str | Path) -> int:
    """Remove an unterminated last line (what a write cut short leaves); returns the bytes removed."""
    try:
        with open(path, "r+b") as f:  # the operator's own file (--trace): followed where it points, read whole
            return files.cut_torn_tail(f.fileno(), limit=os.fstat(f.fileno()).st_size)
    except FileNotFoundError:
        return 0


def read(path: str | Path) -> list[dict]:
    """Every complete line of a trace file. A torn last line (the process died mid-write) is skipped;
    a bad line anywhere else is an error, because that is not what a crash leaves."""
    lines = Path(path).read_text(errors="replace").splitlines()
    events = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError("not an object")
            events.append(event)
        except ValueError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON line: {line[:80]!r}") from None
    return events
