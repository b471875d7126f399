"""Did Stop wait for the scan? Judged by the scan's own ticks, not by a wall-clock window.

The chapter's slow tool (``Workspace.scan_archive_tool``) reports progress every ``TICK_S`` seconds of its
scan. A Stop that reaches into the tool ends the run between two ticks; a Stop the tool only hears when it
next wakes (ipykernel's own SIGINT handler, a tool that blocks its event loop) ends it at the next tick at
the earliest. Comparing the run's end with the scan's own next tick fails whenever Stop waits, wherever in
the interval it was pressed, and whatever the load on the machine."""

TICK_S = 3.0 / (1200 // 200)  # scan_archive_tool's defaults: 1200 files in 3 s, a tick every 200 files


def ended_before_the_next_tick(ticks: list[float], pressed: float, ended: float) -> str | None:
    """``ticks``: ``time.perf_counter()`` at each progress report of the scan; ``pressed``/``ended``: the Stop
    button's ``Press.at`` and ``Press.ended``. Returns what went wrong, or None when the run ended after the
    press, before the tick due after the last one reported, and with no tick in between."""
    before = [t for t in ticks if t <= pressed]
    if not before:
        return f"no tick before the press: the scan was not under way ({len(ticks)} ticks)"
    if ended < pressed:
        return "the run ended before Stop was pressed"
    if any(pressed < t for t in ticks):
        return f"the scan ticked {sum(pressed < t for t in ticks)} time(s) after Stop was pressed"
    due = before[-1] + TICK_S
    if ended >= due:
        return f"the run ended {(ended - due) * 1000:.0f} ms after the scan's next tick: it waited for the tool"
    return None
