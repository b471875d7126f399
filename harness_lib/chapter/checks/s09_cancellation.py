"""The check of notebook 09's pieces, ``scan_archive_tool(seconds, files, steps)`` and the stoppable
``agent_loop(url, model, messages, tools, on_progress, on_tool_start)``: Stop, ``task.cancel("user pressed Stop")``,
must stop the tool where it waits, not only the loop, and end the run ``interrupted`` with the reason; the tool's
progress must reach whoever watches.

The cases: the reader's scan alone (its progress and result, at the chapter's size and another; Stop at its first
progress event), beside the workspace's ``scan_archive`` of the same size; the ``slow`` run in the reader's loop,
with the library's scan and with the reader's, Stop pressed at the scan's first, second (the chapter's Stop at
1.2 s falls between its second and third) and last progress events and as it starts; Stop as a tool starts in
``plan``, ``runaway`` and ``repeat`` (it lands in the next model call); the runs nobody stops. Expected is
``harness_lib.run`` with ``Options(on_progress=...)``, its tool starts heard through its trace, Stop pressed at the
same event (as tests/built/test_09_cancellation.py compares them).

Stop is pressed at an event of the run (the watcher's k-th progress or tool start), never after a delay, so both
sides stop at the same point however busy the machine. Where it lands inside the scan, the time from Stop to the
run's end is judged against what the scan had left: a tool that hears Stop ends the run well before its remaining
pauses could pass (milliseconds, against 200 ms or more); one that does not needs at least all of them, whatever the
load. And a run must not return leaving its tool running: no task it started may still be pending then.
"""

from __future__ import annotations

import asyncio
import time

from ..checking import (
    IN,
    OUT,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    Shape,
    returned,
    start,
    workspace,
)
from ..language import N_, Text, _, ngettext

REASON = "user pressed Stop"
TIMED = {"seconds": 0.6, "files": 1200, "steps": 6}   # pauses of 0.1 s: Stop at the 1st leaves 0.5 s of scan
QUICK = {"seconds": 0.06, "files": 1200, "steps": 6}  # where no Stop lands inside the scan
# how the scan took Stop (kept in English, compared, and shown through _)
STOPPED = N_("the scan stopped at once")
LEFT_RUNNING = N_("the scan was left running after the run ended")
NEVER_PRESSED = N_("Stop never pressed: its event never came")
ESCAPED = N_("Stop's CancelledError came out of `agent_loop`: catch `asyncio.CancelledError` around the whole loop "
             "and return the run, interrupted, with the reason Stop gave")


def _case(name: str, point: str, script: str | None = "slow", stop: tuple | None = None, scan: str = "yours",
          size: dict | None = None, reason: str | None = REASON) -> Case:
    timed = stop is not None and script in (None, "slow") and (stop[0] == "tool_start" or stop[1] < 6)
    return Case(name, point, {"script": script, "stop": stop, "scan": scan, "timed": timed, "reason": reason,
                              "size": size or (TIMED if timed else QUICK)})


CASES = (  # the first case that fails is the one explained: the tool alone, then the loop around the library's
    _case(N_("your scan alone"), N_("the scan reports its progress after each pause, and returns its result"), None),
    _case(N_("your scan alone, 1,000 files in 4 pauses"), N_("the scan's size is its arguments'"), None,
          size={"seconds": 0.04, "files": 1000, "steps": 4}),
    _case(N_("your scan alone, Stop at its 1st progress"), N_("Stop lands where the tool waits, as CancelledError: "
          "the scan ends at once"), None, ("progress", 1)),
    _case(N_("slow, the library's scan, Stop at progress 1"), N_("a cancellation anywhere in the run ends it "
          "interrupted, with the reason Stop gave"), stop=("progress", 1), scan="library"),
    _case(N_("slow, Stop at progress 1"), N_("Stop during scan_archive stops the tool, not just the loop"),
          stop=("progress", 1)),
    _case(N_("slow, Stop at progress 2"), N_("the chapter's Stop at 1.2 s: two progress events, no tool run, one "
          "turn"), stop=("progress", 2)),
    _case(N_("slow, Stop as the scan starts"), N_("Stop before the first pause: no progress at all"),
          stop=("tool_start", 1)),
    _case(N_("slow, Stop without a reason at progress 1"), N_("a cancellation that gives no reason is still a Stop: "
          "the run ends interrupted, its reason 'cancelled'"), stop=("progress", 1), reason=None),
    _case(N_("slow, Stop at the last progress"), N_("a Stop after the scan's last pause: its result is in, the next "
          "model call is not made"), stop=("progress", 6)),
    _case(N_("slow, no Stop"), N_("a scan nobody stops completes, every progress event passed on")),
    _case(N_("plan, Stop as the 1st tool starts"), N_("Stop during a tool that never waits lands at the next model "
          "call"), "plan", ("tool_start", 1), "library"),
    _case(N_("plan, Stop as the 2nd tool starts"), N_("Stop lands at the next await, whatever the loop is doing"),
          "plan", ("tool_start", 2), "library"),
    _case(N_("runaway, Stop as the 4th tool starts"), N_("Stop is the runaway's only way out here"), "runaway",
          ("tool_start", 4), "library"),
    _case(N_("repeat, Stop as the 2nd tool starts"), N_("Stop lands at the next await, whatever the loop is doing"),
          "repeat", ("tool_start", 2), "library"),
    _case(N_("plan, no Stop"), N_("a run nobody stops is 01's run"), "plan", scan="library"),
    _case(N_("direct, no Stop"), N_("a run nobody stops is 01's run"), "direct", scan="library"),
    _case(N_("repeat, no Stop"), N_("a run nobody stops is 01's run"), "repeat", scan="library"),
    _case(N_("answer, no Stop"), N_("a run nobody stops is 01's run"), "answer", scan="library"),
)


class _Watch:
    """Whoever watches a run: hears its progress and its tools' starts, and presses Stop (cancels the run's task
    with the chapter's reason) at the case's event. ``run`` runs a coroutine as that task and times its end."""

    def __init__(self, stop: tuple | None, reason: str | None = REASON):
        self.stop, self.reason, self.heard, self.started = stop, reason, [], []
        self.task = self.pressed = self.ended = None
        self.left: list = []
        self.at = 0   # the progress events heard when Stop was pressed

    def progress(self, label) -> None:
        self.heard.append(label)
        self._event("progress", len(self.heard))

    def tool_start(self, name) -> None:
        self.started.append(name)
        self._event("tool_start", len(self.started))

    def _event(self, kind: str, n: int) -> None:
        if self.stop == (kind, n) and self.task is not None and self.pressed is None:
            self.pressed, self.at = time.perf_counter(), len(self.heard)
            self.task.cancel(self.reason)

    async def run(self, coro) -> tuple[str, object]:
        """("returned", value), or ("stopped", None) when the task ended cancelled by this watcher's Stop."""
        before = asyncio.all_tasks()
        self.task = asyncio.ensure_future(coro)
        try:
            outcome = ("returned", await self.task)
        except asyncio.CancelledError:
            if self.pressed is None or getattr(asyncio.current_task(), "cancelling", lambda: 0)():
                raise   # not this watcher's Stop: the check's own deadline, or the toolbar's
            outcome = ("stopped", None)
        self.ended = time.perf_counter()
        self.left = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
        return outcome

    def verdict(self, size: dict) -> str:
        """How the scan took Stop, judged against the time it had left at that moment."""
        if self.left:
            return LEFT_RUNNING
        if self.pressed is None:
            return NEVER_PRESSED
        pause = size["seconds"] / size["steps"]
        left = pause * (size["steps"] - self.at)   # what the scan still had to do when Stop was pressed
        took = self.ended - self.pressed
        return STOPPED if took < left else Text(N_("the scan ran on {took:,.0f} ms after Stop (it had {left:,.0f} ms "
                                                   "left)"), took=took * 1000, left=left * 1000)


def _workspace_scan(ws, size: dict):
    return ws.scan_archive_tool(seconds=size["seconds"], files=size["files"], every=size["files"] // size["steps"])


async def _alone(tool, case: Case) -> dict:
    from ...tools import ToolContext

    watch = _Watch(case.args["stop"], case.args["reason"])
    kind, result = await watch.run(tool.run({"pattern": "timeout"},
                                            ToolContext(run_id="check", call_id="c1", progress=watch.progress)))
    got = {"result": "stopped" if kind == "stopped" else result, "heard": watch.heard}
    return {**got, "stop": watch.verdict(case.args["size"])} if case.args["timed"] else got


KEYS = ("status", "reason", "turns", "tool_runs", "in", "out", "progress")


async def yours(pieces: dict, case: Case, url: str) -> dict:
    from ...tools import Tool

    size = case.args["size"]
    scan = pieces["scan_archive_tool"](**size)
    if not isinstance(scan, Tool):
        raise Shape(Text(N_("`scan_archive_tool` returned {kind}: return the Tool it builds"),
                         kind=type(scan).__name__))
    if case.args["script"] is None:
        return await _alone(scan, case)
    ws, messages, watch = workspace(), start(), _Watch(case.args["stop"], case.args["reason"])
    tools = [scan if t.name == "scan_archive" and case.args["scan"] == "yours" else t
             for t in ws.tools(**_quick(size))]
    kind, got = await watch.run(pieces["agent_loop"](url, case.args["script"], messages, tools,
                                                     on_progress=watch.progress, on_tool_start=watch.tool_start))
    if kind == "stopped":
        raise Shape(Text(ESCAPED))
    answer = got.get("answer") if isinstance(got, dict) else getattr(got, "answer", None)
    out = {**returned(got, KEYS, "agent_loop"), "answer": answer, "heard": watch.heard, "started": watch.started,
           "messages": messages}
    return {**out, "stop": watch.verdict(size)} if case.args["timed"] else out


def _quick(size: dict) -> dict:
    return {"seconds": size["seconds"], "files": size["files"], "every": size["files"] // size["steps"]}


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...trace import Trace
    from ...workspace import SYSTEM_PROMPT, TASK

    ws, size = workspace(), case.args["size"]
    if case.args["script"] is None:
        got = await _alone(_workspace_scan(ws, size), case)
        return {**got, "stop": STOPPED} if case.args["timed"] else got
    watch = _Watch(case.args["stop"], case.args["reason"])
    trace = Trace(timestamps=False, on_event=lambda e: watch.tool_start(e["toolName"])
                  if e["type"] == "tool_start" else None)
    _outcome, state = await watch.run(run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]),
                                          ws.tools(**_quick(size)),
                                          Options(base_url=url, on_progress=watch.progress, trace=trace)))
    out = {"status": state.status, "reason": (state.interruption or {}).get("reason"), "turns": state.turns,
           "tool_runs": state.tool_runs, "in": state.prompt_tokens, "out": state.completion_tokens,
           "progress": len(watch.heard), "answer": state.output, "heard": watch.heard, "started": watch.started,
           "messages": state.messages}
    return {**out, "stop": STOPPED} if case.args["timed"] else out   # the library's scan hears Stop: by design


def _labels(h) -> str:
    # TRANSLATORS: how many progress events the watcher heard: "6 heard"
    return _("{n} heard").format(n=len(h)) if isinstance(h, list) else repr(h)


def _short(text, n: int = 40) -> str:
    return repr(text if not isinstance(text, str) or len(text) <= n else text[:n - 3] + "...")


def _heard_difference(e, y) -> str:
    if not isinstance(y, list):
        return _("the watcher heard {what}").format(what=repr(y))
    return ngettext("the watcher heard {yours_n} progress event, expected {expected_n}: expected [{expected}], "
                    "yours [{yours}]",
                    "the watcher heard {yours_n} progress event(s), expected {expected_n}: expected [{expected}], "
                    "yours [{yours}]", len(y)).format(yours_n=len(y), expected_n=len(e),
                                 expected=", ".join(e[:3]) + (", ..." if len(e) > 3 else ""),
                                 yours=", ".join(map(str, y[:3])) + (", ..." if len(y) > 3 else ""))


def _verdict(v) -> str:
    """How the scan took Stop, in the language spoken."""
    return _(v) if isinstance(v, str) else str(v)


RESULT = Field("result", show=lambda r: _("result {result}").format(result=_short(r)),
               describe=lambda e, y: _("the scan's result: expected {expected}, yours {yours}").format(
                   expected=_short(e, 60), yours=_short(y, 60)))
REASON_FIELD = Field("reason", show=lambda r: _("reason {reason}").format(reason=repr(r)) if r else _("no reason"),
                     label=N_("reason"))
# TRANSLATORS: how many progress events the reader's loop counted: "6 progress"
PROGRESS = Field("progress", show=lambda n: _("{n} progress").format(n=n),
                 label=N_("progress events your loop counted"))
HEARD = Field("heard", show=_labels, describe=_heard_difference)
# TRANSLATORS: how many tool starts the watcher heard: "1 started"
STARTED = Field("started", show=lambda s: _("{n} started").format(n=len(s)) if isinstance(s, list) else repr(s),
                label=N_("tool starts the watcher heard"))
ANSWER = Field("answer", show=lambda a: _("answered") if a else _("no answer"),
               describe=lambda e, y: _("the answer: expected {expected}, yours {yours}").format(
                   expected=_short(e, 60), yours=_short(y, 60)))
STOP = Field("stop", show=_verdict, describe=lambda e, y: _("expected {expected}, yours: {yours}").format(
    expected=_verdict(e), yours=_verdict(y)))


def _timed(c: Case) -> bool:
    return c.args["timed"]


def _alone_case(c: Case) -> bool:
    return c.args["script"] is None


def _stopped(c: Case) -> bool:
    return c.args["stop"] is not None


HINTS = (
    Hint(N_("your run did not end after Stop: once the cancellation is caught, return the run, interrupted; waiting "
            "or looping on after it leaves Stop pressed for nothing"), lambda c, e, y: y.get("hung") is not None
         and _stopped(c)),
    Hint(N_("Stop's CancelledError must end the run, not escape it: put the whole loop under `try:` and, in `except "
            "asyncio.CancelledError as stop:`, return the run as `interrupted` with `stop.args[0]`, the reason"),
         lambda c, e, y: _(ESCAPED) in str(y.get("raised"))),
    Hint(N_("your scan did not stop where Stop landed: every pause must be an `await asyncio.sleep(...)` "
            "(`time.sleep` blocks the loop, so nothing is heard until it ends), and the CancelledError must go through "
            "it (an `except` that swallows it keeps the scan going)"),
         lambda c, e, y: (_timed(c) and y.get("stop", STOPPED) not in (STOPPED, e.get("stop"))
                          and y.get("stop") != LEFT_RUNNING and c.args["scan"] == "yours")
         or (_alone_case(c) and _stopped(c) and len(y["heard"]) > len(e["heard"]))),
    Hint(N_("Stop ended your loop but not the tool: the scan went on after the run returned. Await the tool in the "
            "run's own task (no `ensure_future`, no `shield`), so that the one cancellation reaches the tool too"),
         lambda c, e, y: y.get("stop") == LEFT_RUNNING),
    Hint(N_("report progress after each pause with `ctx.progress(...)`: `scanned {step * files // steps} of {files} "
            "files`, the numbers of the scan as it was built"),
         lambda c, e, y: _alone_case(c) and y["heard"] != e["heard"]),
    Hint(N_("the progress never reached whoever watches: the context's `progress` callback must pass each label on, "
            "`on_progress(label)`"), lambda c, e, y: e["heard"] and not y["heard"]),
    Hint(N_("count each progress event in `tally['progress']` as it passes"),
         lambda c, e, y: y["heard"] == e["heard"] and y["progress"] != e["progress"]),
    Hint(N_("tell the watcher when a tool starts, `on_tool_start(name)`, before it runs: the chapter's times are "
            "counted from there"), lambda c, e, y: y["started"] != e["started"]),
    Hint(N_("Stop reached the tool but your loop went on: catch the cancellation around the whole loop, never around "
            "one tool call, so that Stop ends the run"), lambda c, e, y: _stopped(c) and e["status"] == "interrupted"
         and y["status"] != "interrupted"),
    Hint(N_("keep the reason Stop gave, the CancelledError's `args[0]`: 'user pressed Stop' and a budget stop look "
            "alike from outside and need different answers"), lambda c, e, y: y["reason"] != e["reason"]
         and c.args["reason"] is not None),
    Hint(N_("a cancellation without a reason (`task.cancel()`) has no `args`: say 'cancelled' then, as the library "
            "does"), lambda c, e, y: y["reason"] != e["reason"]),
    Hint(N_("a completed run returns the model's last words as its `answer`"),
         lambda c, e, y: e["status"] == "completed" and y["answer"] != e["answer"]),
    Hint(N_("a run stopped by a cancellation is `interrupted`, the chapter's word for it"),
         lambda c, e, y: y["status"] != e["status"] and e["status"] == "interrupted"),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'reason', 'turns', 'tool_runs', 'in', 'out', 'progress', 'answer', 'completed', 'interrupted',
            'cancelled')
CHECK = Check("09-cancellation", ("agent_loop", "scan_archive_tool"), CASES,
              (RESULT, STATUS, REASON_FIELD, TURNS, TOOL_RUNS, IN, OUT, PROGRESS, HEARD, STARTED, STOP, ANSWER,
               TRANSCRIPT),
              yours, expected, HINTS)


async def check(agent_loop, scan_archive_tool, url: str | None = None):
    """Run your ``agent_loop`` and ``scan_archive_tool`` on every case of section 9 beside ``harness_lib``: a table,
    ``N of M cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, agent_loop=agent_loop, scan_archive_tool=scan_archive_tool)
