"""A test seam for the crash tests: die, by SIGKILL, right after a chosen event boundary.

    HARNESS_CRASH_AT="tool_start:2"   # right after this process's 2nd ``tool_start`` trace line
    HARNESS_CRASH_AT="save:3"         # right after its 3rd state save (the file renamed into place)

``Trace.emit`` calls ``reached(event_type)`` once its line is written, and ``state.save`` calls
``reached("save")`` once the file is in place; that is the whole seam. Without the variable (always,
outside ``tests/test_crash.py`` and ``python -m harness_lib.reliability``) it does nothing.
"""

from __future__ import annotations

import os
import signal

_seen: dict[str, int] = {}


def reached(kind: str) -> None:
    spec = os.environ.get("HARNESS_CRASH_AT")
    if not spec:
        return
    target, _, n = spec.rpartition(":")
    if target == kind:
        _seen[kind] = _seen.get(kind, 0) + 1
        if _seen[kind] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
