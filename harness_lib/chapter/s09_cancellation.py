"""Notebook 09, cancellation and progress: the slow scan timed with and without Stop, and the
toolbar's own Stop on a run saved to disk.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from matplotlib.figure import Figure

from ..loop import Options, run
from ..state import RunState, load, new_run
from ..workspace import SYSTEM_PROMPT, Workspace
from . import params
from .common import Measured, StopAfter, whole_run
from .figures import relabel
from .language import _, ngettext, number
from .plots import BLUE, ORANGE, RED, _figure, style
from .stop_button import all_or_nothing, check, stoppable

PARAMETERS = {"STOP_AT": params.Number(0, 10, unit=" s")}  # from 3 s on, the scan ends before Stop is pressed

SCAN_TASK = "Scan the archive for timeouts."


class Cancellation(NamedTuple):
    """09: three timed scans: no Stop, Stop, Stop with a tool deaf to it."""
    table: pd.DataFrame     # one row per scan: status, when it ended, Stop to end
    timelines: dict         # scan label -> its progress events (t_ms, label)
    measured: Measured


def scans(stop_at: float) -> list[tuple[str, float | None, bool]]:
    """The chapter's three scans: (name, Stop after this many seconds of the tool or None, the tool hears Stop)."""
    return [("no cancellation", None, True), (f"Stop at {stop_at:g} s", stop_at, True),
            (f"Stop at {stop_at:g} s, tool deaf to Stop", stop_at, False)]


def scan_row(name: str, state: RunState, stop: StopAfter) -> dict:
    """One scan as a row of the table: how it ended, and when, counted from the tool's start."""
    pressed = stop.pressed is not None
    return {"run": name, "status": state.status, "reason": (state.interruption or {}).get("reason", ""),
            "stopped_after_ms": round(stop.ms(stop.ended)), "progress_events": len(stop.timeline),
            "stop_to_end_ms": round((stop.ended - stop.pressed) * 1000) if pressed else None,
            "stop": (_("pressed") if pressed else _("never pressed: the run ended first")) if stop.seconds else "",
            "timeline": stop.timeline}


def scan_table(rows: list[dict], stop_at: float) -> Cancellation:
    """The three scans' rows (``scan_row``) as the table, the progress timelines and the chapter's figures:
    the notebook's cell and ``cancellation`` both end here, so they cannot disagree."""
    timelines = {r["run"]: pd.DataFrame(r["timeline"], columns=["t_ms", "label"]) for r in rows}
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "timeline"} for r in rows]).set_index("run")
    plain, stopped = table.iloc[0], table.iloc[1]
    first = timelines[table.index[0]]
    measured = {"cancel.progress1": int(first.t_ms.iloc[0]), "cancel.progress2": int(first.t_ms.iloc[1])} \
        if len(first) >= 2 else {}
    measured.update({"cancel.full": int(plain.stopped_after_ms), "cancel.full_status": plain.status})
    at_stop = {"cancel.stop": int(stopped.stopped_after_ms), "cancel.stop_status": stopped.status,
               "cancel.reason": stopped.reason}
    if stopped.stop_to_end_ms is not None and not pd.isna(stopped.stop_to_end_ms):
        at_stop["cancel.click_to_stop"] = int(stopped.stop_to_end_ms)
    measured.update(at_stop if stop_at == 1.2 else relabel(at_stop, f"STOP_AT={stop_at:g}"))
    return Cancellation(table, timelines, measured)


@all_or_nothing
async def cancellation(base_url: str, stop_at: float = 1.2, progress=None) -> Cancellation:
    """Three timed scans: no Stop; Stop ``stop_at`` s after the tool starts; the same with a tool deaf to
    Stop. ``progress(line)`` hears one line as each run ends (a notebook passes ``print``). A Stop later
    than the scan's end is never pressed: the run completes first, and the table says so."""
    stop_at = PARAMETERS["STOP_AT"].check("STOP_AT", stop_at)
    rows = []
    runs = scans(stop_at)
    for n, (name, seconds, hears) in enumerate(runs, 1):
        stop = StopAfter(seconds)  # the clock starts when the tool starts: the chapter's times are the scan's
        tools = Workspace.copy_of().tools(hears_stop=hears)
        state = await stop.run(run(new_run(SYSTEM_PROMPT, SCAN_TASK, "slow"), tools,
                                   Options(base_url=base_url, on_progress=stop.progress, trace=stop.trace())))
        check()  # the reader's own Stop ended this run: end the whole experiment
        rows.append(scan_row(name, state, stop))
        if progress:
            progress(_("run {n} of {total}, {name}: {status} after {ms:,.0f} ms").format(
                n=n, total=len(runs), name=name, status=state.status, ms=stop.ms(stop.ended)))
    return scan_table(rows, stop_at)


def cancel_story(table: pd.DataFrame) -> str:
    """09's conclusion, in words computed from its table (Markdown)."""
    plain, hears, deaf = table.iloc[0], table.iloc[1], table.iloc[2]
    if pd.isna(hears.stop_to_end_ms):
        return _("Stop was never pressed: at the time asked for, the scan had already ended, {ms:,.0f} ms after it "
                 "started. Try a `STOP_AT` below that.").format(ms=plain.stopped_after_ms)
    return _("With cancellation reaching into the tool, the run ended {stop_ms:,.0f} ms after Stop (status "
             "`{status}`, reason \"{reason}\"). With a tool deaf to it, the run is marked `{deaf_status}` too, but "
             "only {deaf_ms:,.0f} ms after Stop, when the tool had finished its whole scan ({scan_ms:,.0f} ms)."
             ).format(stop_ms=hears.stop_to_end_ms, status=hears.status, reason=hears.reason, deaf_status=deaf.status,
        deaf_ms=deaf.stop_to_end_ms, scan_ms=deaf.stopped_after_ms)


SCAN_SESSION: ScanSession | None = None


def scan_session() -> ScanSession:
    """The kernel's ScanSession (its temporary folder goes when the kernel does)."""
    global SCAN_SESSION
    if SCAN_SESSION is None:
        SCAN_SESSION = ScanSession()
    return SCAN_SESSION


class ScanSession:
    """09's Stop-button run: one scan saved to a state folder that lives as long as the kernel, so the
    next cell can load it from disk and resume it."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-stop-")
        self.state_dir = Path(self._tmp.name) / "runs"
        self.workspace = Workspace.copy_of()
        self.run_id = None

    async def press_stop_during_scan(self, base_url: str, progress=print):
        """Run the slow scan; the toolbar's Stop (a kernel interrupt) ends it as the chapter's Stop does.
        Returns (state, press): ``press.to_end_ms`` is the time from the interrupt to the run's end."""
        state = new_run(SYSTEM_PROMPT, SCAN_TASK, "slow")
        self.run_id = state.run_id
        t0 = time.perf_counter()
        state, press = await stoppable(run(state, self.workspace.tools(), Options(
            base_url=base_url, state_dir=self.state_dir,
            on_progress=lambda label: progress(f"progress: {label}  (t+{(time.perf_counter() - t0) * 1000:,.0f} ms)"))))
        return state, press

    def load(self) -> RunState:
        return load(self.state_dir, self.run_id)

    def describe(self, state: RunState, press) -> str:
        if press.pressed:
            return (f"status={state.status}  reason={(state.interruption or {}).get('reason')!r}  "
                    + _("ended {ms:,.1f} ms after you pressed Stop").format(ms=press.to_end_ms))
        return f"status={state.status}: " + _("you did not press Stop this time. Run the cell again and press the "
                                              "toolbar's Stop (or Kernel > Interrupt) while it scans.")

    async def resume(self, base_url: str, progress=print) -> RunState:
        """Continue the saved run from disk, as another process would."""
        return await whole_run(run(self.load(), self.workspace.tools(), Options(
            base_url=base_url, state_dir=self.state_dir, on_progress=lambda label: progress(f"progress: {label}"))))


def cancel_timeline_plot(timelines: dict[str, pd.DataFrame], ended_ms: dict[str, float],
                         stop_at_s: float | None) -> Figure:
    """One lane per run: its progress events as dots, a bar to the moment the run ended, and the
    moment Stop was pressed."""
    fig, (ax,) = _figure(7.5, 2.9)
    names = list(timelines)
    with style():
        for lane, name in enumerate(names):
            y = len(names) - 1 - lane
            ax.barh(y, ended_ms[name], height=0.35, color=BLUE if "deaf" not in name else RED, alpha=0.25)
            events = timelines[name]
            if len(events):
                ax.scatter(events["t_ms"], [y] * len(events), color=BLUE if "deaf" not in name else RED, zorder=3, s=22)
            ax.annotate(f"{number(ended_ms[name], 0)} ms", (ended_ms[name], y), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8.5)
        if stop_at_s is not None:
            ax.axvline(stop_at_s * 1000, color=ORANGE, linestyle="--", linewidth=1.2)
            ax.annotate(_("Stop pressed ({seconds} s)").format(seconds=stop_at_s),
                        (stop_at_s * 1000, len(names) - 0.55), xytext=(4, 0),
                        textcoords="offset points", color=ORANGE, fontsize=8.5, va="bottom")
        ax.set_ylim(-0.5, len(names) - 0.2)
        ax.set_yticks(range(len(names)), list(reversed(names)))
        ax.set_xlabel(_("ms since scan_archive started (dots: progress events)"))
        ax.set_title(_("Progress while the tool runs, and how soon Stop takes effect"))
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, max(*ended_ms.values(), (stop_at_s or 0) * 1000) * 1.15)
    return fig


def stop_plot(scans: Cancellation, seconds: float, row: dict | None = None) -> tuple[Figure, str]:
    """The notebook's slider: the unstopped scan's lane from ``scans`` above one scan stopped ``seconds`` after
    the tool started (``row``, a ``scan_row``; by default the table's own "Stop at" scan), and that scan in words."""
    if row is None:
        name = scans.table.index[1]
        row = {**scans.table.loc[name].to_dict(), "run": name, "timeline": scans.timelines[name]}
    plain, name = scans.table.index[0], row["run"]
    timelines = {plain: scans.timelines[plain], name: pd.DataFrame(row["timeline"], columns=["t_ms", "label"])}
    ended = {plain: scans.table.loc[plain, "stopped_after_ms"], name: row["stopped_after_ms"]}
    fig = cancel_timeline_plot(timelines, ended, seconds)
    said = ngettext("{status} {ms:,.0f} ms after the tool started, {events} progress event",
                    "{status} {ms:,.0f} ms after the tool started, {events} progress events",
                    row["progress_events"]).format(
        status=row["status"], ms=row["stopped_after_ms"], events=row["progress_events"])
    if row["stop_to_end_ms"] is None or pd.isna(row["stop_to_end_ms"]):
        return fig, _("{said}: the scan ended before Stop").format(said=said)
    return fig, _("{said}, {ms:,.0f} ms after Stop").format(said=said, ms=row["stop_to_end_ms"])
