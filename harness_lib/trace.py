"""The trace: one JSON object per line, one line per event.

The vocabulary is the chapter's: ``turn``, ``tool_start``, ``tool_progress``, ``tool_result``,
``approval_required``, ``run_stopped`` (plus ``retry`` when the model call is retried). Every line
carries the run id, so a run that spans processes and days is one query; every turn line carries its
own tokens and the running cost; ``run_stopped`` carries the reason. Lines are appended and flushed
one at a time, so a crash can tear at most the last line, and ``read`` tolerates exactly that.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


class Trace:
    def __init__(self, path: str | Path | None = None, timestamps: bool = True):
        self.path = Path(path) if path else None
        self.timestamps = timestamps
        self.events: list[dict] = []  # this process's lines, for a notebook to look at

    def emit(self, run_id: str, type: str, **fields) -> dict:
        event = {"runId": run_id, "type": type, **fields}
        if self.timestamps:
            event["ts"] = round(time.time(), 3)
        self.events.append(event)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event


def read(path: str | Path) -> list[dict]:
    """Every complete line of a trace file. A torn last line (the process died mid-write) is skipped;
    a bad line anywhere else is an error, because that is not what a crash leaves."""
    lines = Path(path).read_text().splitlines()
    events = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON line: {line[:80]!r}") from None
    return events
