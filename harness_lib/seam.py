"""The crash seam: the core's one hook, where a test may stop a process between two steps of a run.

The core calls ``reached(kind)`` at each boundary a crash can fall on: ``Trace.emit`` with the event's type
once its line is written, ``state.save`` with ``"save"`` once the run is on disk. It does nothing unless a
test asks, in one of two ways:

* in the test's own process, ``plug(hook)``: the hook is called with each kind, in order (to record the
  boundaries, or to raise at one); ``plug`` returns the function that takes it out again;
* in a process the test starts (the crash campaign, ``tests/reliability_campaign.py``, drives
  ``python -m harness_lib run`` children), the environment variable ``HARNESS_CRASH_AT``, ``"tool_start:2"``
  say: the process then SIGKILLs itself right after its 2nd ``tool_start`` line.

It belongs to the core, so the core imports no test module; it imports only the standard library.
"""

from __future__ import annotations

import os
import signal
from typing import Callable

ENV = "HARNESS_CRASH_AT"
Hook = Callable[[str], None]

_hooks: list[Hook] = []
_seen: dict[str, int] = {}  # boundaries of each kind this process has reached, for HARNESS_CRASH_AT


def plug(hook: Hook) -> Callable[[], None]:
    """Call ``hook(kind)`` at every boundary from now on; returns the function that unplugs it."""
    _hooks.append(hook)
    return lambda: _hooks.remove(hook) if hook in _hooks else None


def reached(kind: str) -> None:
    """A boundary of ``kind``: the plugged hooks hear it; then, with ``HARNESS_CRASH_AT="kind:n"`` set, the
    process is SIGKILLed if this is its ``n``-th. Without either, nothing."""
    for hook in list(_hooks):
        hook(kind)
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, n = spec.rpartition(":")
    if not n.isdigit():
        raise ValueError(f"{ENV}={spec!r}: expected KIND:N, such as tool_start:2 or save:3")
    if target == kind:
        _seen[kind] = _seen.get(kind, 0) + 1
        if _seen[kind] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
