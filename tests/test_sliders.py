"""The notebooks' sliders (harness_lib.chapter.sliders, issue 19 item 8): bounds from the parameter's spec, a
re-run cancelled by a newer value and never two at once, the toolbar's Stop during a re-run, an error in one line.

The fast tests drive the slider as the reader's browser does, by setting its value (the widget's comm is a dummy
outside a kernel) inside an event loop; the slow one moves it from a kernel client, as JupyterLab does, and
interrupts the kernel during the re-run, as the toolbar's Stop does."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from harness_lib.chapter import params, plots
from harness_lib.chapter.params import Number, ParameterError, Whole
from harness_lib.chapter.sliders import bounds, slider
from harness_lib.chapter.stop_button import Stopped, whole

SPEC = {"N": Whole(1, 5)}


def figure(value) -> Figure:
    fig = Figure(figsize=(2, 1))
    fig.subplots().set_title(f"value {value}")
    return fig


def shown(view) -> bytes:
    """The PNG the slider's Output holds."""
    (out,) = view.output.outputs
    return base64.b64decode(out["data"]["image/png"])


def within(coro, seconds=20):
    return asyncio.wait_for(coro, seconds)  # a hang guard: a re-run nobody can end fails instead of hanging


def kernel_at_rest() -> list:
    """SIGINT as an idle kernel takes it: nothing happens (ipykernel ignores it between cells), recorded. A slider
    that does not hear Stop itself leaves its re-run running, and the test fails on ``within``, not on a
    KeyboardInterrupt. (A re-run passes Stop on to the handler it was installed over, in a kernel at rest
    ``SIG_IGN``: what reaches this one is what ipykernel would have ignored.)"""
    heard = []
    signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    return heard


# -- bounds ---------------------------------------------------------------------------------------------
def test_the_bounds_are_the_specs():
    assert bounds(Whole(1, 50)) == (1, 50, 1)
    assert bounds(Whole(1, 200, several=True), high=100) == (1, 100, 1)    # narrowed to what the notebook has
    assert bounds(Number(0, 10, unit=" s"), step=0.1) == (0.1, 10, 0.1)    # open at 0: one step above it
    assert bounds(Number(0, 300, closed=True, several=True), step=5) == (0, 300, 5)


@pytest.mark.parametrize("spec,kwargs,error", [
    (Whole(1, 50), dict(high=51), ParameterError),         # wider than the spec
    (Whole(1, 50), dict(low=0), ParameterError),
    (Number(0, 10), dict(low=0, step=0.1), ParameterError),  # 0 is refused by an open range
    (Whole(1, 50), dict(low=9, high=3), ValueError),
    (Number(0, 10), dict(), ValueError),                   # a number's step must be given
    (params.OneOf(("a", "b")), dict(), TypeError),
])
def test_bounds_the_spec_refuses_are_refused(spec, kwargs, error):
    with pytest.raises(error):
        bounds(spec, **kwargs)


def test_the_slider_cannot_pick_a_value_the_spec_refuses():
    async def main():
        drawn = []
        view = await slider(SPEC, "N", 3, lambda v: drawn.append(v) or figure(v))
        assert (view.control.min, view.control.max, view.control.value) == (1, 5, 3)
        assert view.control.continuous_update is False
        view.control.value = 9           # as far right as it goes
        await within(view.settled())
        view.control.value = -4
        await within(view.settled())
        return drawn, view
    drawn, view = asyncio.run(main())
    assert drawn == [3, 5, 1] and view.shown == 1 and view.line.value == "N = 1"


def test_a_value_beyond_a_narrowed_range_starts_at_its_end_and_is_drawn_anew():
    async def main():
        drawn = []
        view = await slider({"CAPS": Whole(1, 200, several=True)}, "CAPS", 150, lambda v: drawn.append(v) or figure(v),
                            high=100, first=figure("not this one"), label="cap")
        return drawn, view
    drawn, view = asyncio.run(main())
    assert drawn == [100] and view.shown == 100 and view.line.value == "cap = 100"
    assert repr(view) == "a slider over cap, from 1 to 100: run the cell to move it"


def test_a_float_slider_rounds_to_its_step_and_says_its_unit():
    async def main():
        view = await slider({"STOP_AT": Number(0, 10, unit=" s")}, "STOP_AT", 1.2, figure, step=0.1)
        view.control.value = 0.1 + 0.2   # 0.30000000000000004 from a browser's arithmetic
        await within(view.settled())
        return view
    view = asyncio.run(main())
    assert view.shown == 0.3 and view.line.value == "STOP_AT = 0.3 s"
    assert view.control.readout_format == ".1f"
    assert repr(view) == "a slider over STOP_AT, from 0.1 s to 10 s: run the cell to move it"


# -- a newer value, never two at once ---------------------------------------------------------------------
@pytest.mark.parametrize("how", ["raises", "returns"])
def test_a_newer_value_cancels_the_rerun_in_progress_and_never_runs_beside_it(how):
    """A re-run cancelled by a newer value ends before the newer one starts, and whatever it returns is dropped:
    a harness run catches its own cancellation and returns (``returns``), a plain coroutine raises it."""
    async def main():
        events, running, most = [], 0, 0
        started = asyncio.Event()

        async def plot(value):
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                events.append(f"start {value}")
                if value == 2:
                    started.set()
                    try:
                        await asyncio.Event().wait()   # until cancelled
                    except asyncio.CancelledError:
                        await asyncio.sleep(0.05)      # a run saving its state as it ends: the next must wait
                        events.append("2 cancelled")
                        if how == "raises":
                            raise
                        return figure("a stale plot")
                return figure(value)
            finally:
                running -= 1

        view = await slider(SPEC, "N", 1, plot)
        first, lines = shown(view), []
        view.line.observe(lambda change: lines.append(change["new"]), names="value")
        view.control.value = 2
        await within(started.wait())
        assert view.line.value == "N = 2: running..."
        view.control.value = 3
        await within(view.settled())
        return events, most, view, first, lines
    events, most, view, first, lines = asyncio.run(main())
    assert events == ["start 1", "start 2", "2 cancelled", "start 3"] and most == 1
    assert lines == ["N = 2: running...", "N = 3: running...", "N = 3"]  # 2's plot, however it ended, never shown
    assert view.shown == 3 and view.line.value == "N = 3" and shown(view) != first
    assert shown(view) == plots.png(figure(3))


def test_values_picked_in_a_row_draw_only_the_last():
    async def main():
        drawn = []

        async def plot(value):
            drawn.append(value)
            await asyncio.sleep(0.01)
            return figure(value), f"drawn for {value}"
        view = await slider(SPEC, "N", 1, plot)
        for value in (2, 3, 4, 5, 4):
            view.control.value = value
        await within(view.settled())
        return drawn, view
    drawn, view = asyncio.run(main())
    # each value started after the one before it ended; none of 2, 3, 5 got past its first await
    assert drawn[0] == 1 and drawn[-1] == 4 and view.shown == 4 and view.line.value == "N = 4: drawn for 4"


def test_moved_rapidly_many_times_it_ends_on_the_last_values_plot_never_two_runs_at_once():
    """Sixty values in a burst, as a reader dragging and letting go again and again: some re-runs get under way
    before the next value, most do not; at no moment do two run, and the plot and line end on the last value."""
    async def main():
        running, most, drawn = 0, 0, []

        async def plot(value):
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                await asyncio.sleep(0.002)
                drawn.append(value)
                return figure(value)
            finally:
                running -= 1
        view = await slider({"N": Whole(1, 50)}, "N", 25, plot)
        rng = random.Random(19)
        for i in range(60):
            view.control.value = rng.randint(1, 50)
            if i % 7 == 0:
                await asyncio.sleep(0.003)   # let one get under way, or even finish
        last = view.control.value
        await within(view.settled())
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return view, last, most, drawn, left
    view, last, most, drawn, left = asyncio.run(main())
    assert most == 1 and left == []
    assert drawn[-1] == last and view.shown == last and view.line.value == f"N = {last}"
    assert shown(view) == plots.png(figure(last))
    assert len(drawn) < 30   # most values were superseded before their re-run got far


# -- Stop ------------------------------------------------------------------------------------------------
def test_stop_during_a_rerun_ends_it_and_says_so():
    """SIGINT (the toolbar's Stop) during a re-run: the re-run ends at once, the line says it was stopped, the
    last plot stays, no task is left running, and the SIGINT handler from before is back."""
    async def main():
        started = asyncio.Event()

        async def plot(value):
            if value == 4:
                started.set()
                await asyncio.Event().wait()   # a run that only Stop can end
            return figure(value)
        unheard = kernel_at_rest()
        view = await slider(SPEC, "N", 2, plot)
        before, first = signal.getsignal(signal.SIGINT), shown(view)
        view.control.value = 4
        await within(started.wait())
        os.kill(os.getpid(), signal.SIGINT)
        await within(view.settled())
        return view, before, first, signal.getsignal(signal.SIGINT), unheard
    view, before, first, after, heard = asyncio.run(main())
    assert view.line.value == "N = 4: stopped (user pressed Stop); the plot is still the one for N = 2"
    assert view.shown == 2 and shown(view) == first and view._task.done() and not view._task.cancelled()
    assert after is before and heard == [signal.SIGINT]   # passed on to the kernel at rest: ignored there


def test_stop_during_a_harness_run_ends_the_run_interrupted(url):
    """The same with a real run of the slow scan: the run ends ``interrupted`` with the chapter's reason, well
    before its scan would have, and the slider says it was stopped."""
    from harness_lib.loop import Options, run
    from harness_lib.state import new_run
    from harness_lib.trace import Trace
    from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

    async def main():
        states, tool_started = [], asyncio.Event()

        async def plot(value):
            trace = Trace(timestamps=False, on_event=lambda e: e["type"] == "tool_start" and tool_started.set())
            states.append(await run(new_run(SYSTEM_PROMPT, TASK, "slow" if value > 1 else "plan"),
                                    Workspace.copy_of().tools(), Options(base_url=url, trace=trace)))
            return figure(value)
        kernel_at_rest()
        view = await slider(SPEC, "N", 1, plot)
        view.control.value = 2
        await within(tool_started.wait())
        pressed = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)
        await within(view.settled())
        return view, states, time.perf_counter() - pressed
    view, states, took = asyncio.run(main())
    assert states[-1].status == "interrupted" and states[-1].interruption["reason"] == "user pressed Stop"
    assert view.line.value.startswith("N = 2: stopped (user pressed Stop)") and view.shown == 1
    assert took < 3.0 / 2  # the scan had three seconds to go; a Stop that waited for it would take them


def test_stop_during_a_rerun_beside_a_running_cell_ends_both():
    """A slider moved while a cell runs (Run All): its re-run runs beside the cell, under the cell's Stop. One
    press ends both, the re-run as a re-run (the line says so) and the cell as a cell (``Stopped``), and the
    handler from before the cell is back. Without passing Stop on, the cell would run on to its end."""
    async def main():
        started = asyncio.Event()

        async def plot(value):
            if value == 4:
                started.set()
                await asyncio.Event().wait()
            return figure(value)
        unheard = kernel_at_rest()
        before = signal.getsignal(signal.SIGINT)
        view = await slider(SPEC, "N", 2, plot)
        cell = asyncio.ensure_future(whole(asyncio.Event().wait()))   # a cell's experiment, Stop its only end
        await asyncio.sleep(0)
        view.control.value = 4
        await within(started.wait())
        os.kill(os.getpid(), signal.SIGINT)
        await within(view.settled())
        with pytest.raises(Stopped):
            await within(cell, 5)
        return view, unheard, before, signal.getsignal(signal.SIGINT)
    view, unheard, before, after = asyncio.run(main())
    assert view.line.value.startswith("N = 4: stopped (user pressed Stop)") and view.shown == 2
    assert unheard == [] and after is before


def test_a_cell_started_during_a_rerun_keeps_its_stop_when_the_rerun_ends():
    """The other order: a re-run under way, then a cell starts and puts its Stop over the re-run's. The re-run
    ends first; it must not put back the handler it found (the idle kernel's), which would take the cell's Stop
    away. Once the cell has ended too, a Stop reaches only what was there before both."""
    async def main():
        started, release = asyncio.Event(), asyncio.Event()

        async def plot(value):
            if value == 4:
                started.set()
                await release.wait()
            return figure(value)
        unheard = kernel_at_rest()
        view = await slider(SPEC, "N", 2, plot)
        view.control.value = 4
        await within(started.wait())
        cell = asyncio.ensure_future(whole(asyncio.Event().wait()))
        await asyncio.sleep(0)
        release.set()
        await within(view.settled())
        drawn = view.line.value
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(Stopped):
            await within(cell, 5)
        heard_during = list(unheard)
        os.kill(os.getpid(), signal.SIGINT)   # both ended: the handler left is the ended re-run's, passing it on
        await asyncio.sleep(0.05)
        return drawn, heard_during, unheard
    drawn, heard_during, unheard = asyncio.run(main())
    assert drawn == "N = 4" and heard_during == [] and unheard == [signal.SIGINT]


def test_stop_during_the_first_plot_is_the_cells_stop():
    async def main():
        async def plot(value):
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
            await asyncio.Event().wait()
        kernel_at_rest()
        await within(slider(SPEC, "N", 2, plot))
    with pytest.raises(Stopped):
        asyncio.run(main())


# -- errors ----------------------------------------------------------------------------------------------
def test_an_error_in_a_rerun_is_one_line_in_the_output():
    async def main():
        def plot(value):
            if value == 3:
                raise ValueError("no plot for 3\nand a second line nobody needs")
            return figure(value)
        view = await slider(SPEC, "N", 2, plot)
        view.control.value = 3
        await within(view.settled())
        failed = (view.line.value, view.output.outputs)
        view.move(7)  # past the spec, as a value set by hand could be: the parameter's own line
        await within(view.settled())
        refused = (view.line.value, view.output.outputs)
        view.control.value = 4
        await within(view.settled())
        return failed, refused, view
    failed, refused, view = asyncio.run(main())
    assert failed == ("N = 3: failed", ({"output_type": "stream", "name": "stdout",
                                         "text": "ValueError: no plot for 3\n"},))
    assert refused == ("N = 7: failed", ({"output_type": "stream", "name": "stdout",
                                          "text": "ParameterError: N accepts a whole number from 1 to 5; got 7\n"},))
    assert view.shown == 4 and view.line.value == "N = 4"  # and it goes on working


def test_while_a_failed_check_holds_the_notebook_a_move_says_its_line():
    """The reader refused a value in the parameters cell (the setup cell's check failed): the notebook's other
    cells say that line until a check passes (params.held), and so does a slider moved meanwhile, rather than
    re-running on the values the check refused. Once a check passes, the slider draws again."""
    async def main():
        drawn = []
        view = await slider(SPEC, "N", 2, lambda v: drawn.append(v) or figure(v))
        try:
            with pytest.raises(ParameterError):
                params.check(SPEC, N="five")
            view.control.value = 3
            await within(view.settled())
            held = (view.line.value, view.output.outputs)
        finally:
            params.check(SPEC, N=2)
        view.control.value = 4
        await within(view.settled())
        return drawn, held, view
    drawn, held, view = asyncio.run(main())
    assert drawn == [2, 4] and view.shown == 4 and view.line.value == "N = 4"
    assert held == ("N = 3: failed", ({"output_type": "stream", "name": "stdout",
                                       "text": "ParameterError: N accepts a whole number from 1 to 5; got 'five'\n"},))


def test_an_error_in_the_first_plot_is_the_cells_error():
    def plot(value):
        raise ValueError("broken")
    with pytest.raises(ValueError, match="broken"):
        asyncio.run(slider(SPEC, "N", 2, plot))


# -- in a kernel, as JupyterLab drives it ----------------------------------------------------------------
KERNEL_SETUP = """
import asyncio
import signal
from matplotlib.figure import Figure
from harness_lib.chapter.params import Whole
from harness_lib.chapter.sliders import slider
from harness_lib.chapter.stop_button import each
from harness_lib.loop import Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace
url = ScriptedProvider.shared().base_url
states = []

async def plot(value):
    states.append(await run(new_run(SYSTEM_PROMPT, TASK, "slow" if value == 2 else "plan"),
                            Workspace.copy_of().tools(), Options(base_url=url)))
    fig = Figure(figsize=(2, 1))
    fig.subplots().set_title(f"value {value}")
    return fig

view = await slider({"N": Whole(1, 5)}, "N", 1, plot)
at_rest = []   # the SIGINT handler in force as the line changes, between cells
view.line.observe(lambda change: at_rest.append(signal.getsignal(signal.SIGINT) is signal.SIG_IGN), names="value")


def ours():
    # tasks running code other than the kernel's own (each cell runs in two tasks of ipykernel and IPython)
    return [t for t in asyncio.all_tasks() if not any(f"/{kernel}/" in t.get_coro().cr_code.co_filename
                                                      for kernel in ("ipykernel", "IPython"))]



cell_states = []

async def cell_run(name):   # a cell's sweep of one run (stop_button.each, as the notebooks' sweeps are written)
    for _ in each([name]):
        cell_states.append(await run(new_run(SYSTEM_PROMPT, TASK, name), Workspace.copy_of().tools(),
                                     Options(base_url=url)))
    return cell_states[-1]

print(view.control.model_id, view.line.model_id)
"""


class Kernel:
    """A kernel with the slider of KERNEL_SETUP, driven as JupyterLab drives it: cells sent to run, the slider
    moved by a comm message, Stop as an interrupt; every iopub message kept."""

    def __init__(self, km, kc):
        self.km, self.kc, self.lines, self.errors, self.texts, self.replies = km, kc, [], [], {}, {}
        texts = []
        reply = kc.execute_interactive(KERNEL_SETUP, timeout=60,
                                       output_hook=lambda m: texts.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        self.slider_id, self.line_id = "".join(texts).split()

    def move(self, value):
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", {"comm_id": self.slider_id, "data": {
            "method": "update", "state": {"value": value}, "buffer_paths": []}}))

    def execute(self, code) -> str:
        msg_id = self.kc.execute(code)
        self.texts[msg_id] = []
        return msg_id

    def until(self, done, timeout=30):
        """Read iopub (and the cells' replies) until ``done()``."""
        deadline = time.monotonic() + timeout
        while not done():
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            parent, kind = msg["parent_header"].get("msg_id"), msg["msg_type"]
            if kind == "comm_msg" and msg["content"]["comm_id"] == self.line_id:
                self.lines.append(msg["content"]["data"]["state"].get("value", ""))
            elif parent in self.texts and kind == "stream":
                self.texts[parent].append(msg["content"]["text"])
            elif parent in self.texts and kind == "error":
                self.texts[parent].append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            elif kind in ("error", "stream"):
                self.errors.append(msg)   # anything else said to the reader: the slider's, an error
            elif kind == "status" and msg["content"]["execution_state"] == "idle" and parent in self.texts:
                self.replies[parent] = True


@pytest.fixture
def kernel():
    jupyter_client = pytest.importorskip("jupyter_client.manager")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3")
    try:
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_the_toolbars_stop_reaches_a_rerun_in_an_idle_kernel(kernel):
    """The slider moved from the kernel's client (a comm message, as JupyterLab sends one), the kernel
    interrupted while the re-run's slow scan runs and no cell is running (ipykernel ignores SIGINT then): the
    re-run ends, well before its scan would have, the line says it was stopped, no error reaches the reader,
    no task is left, and the kernel's own handling of SIGINT is back."""
    kernel.move(2)
    kernel.until(lambda: kernel.lines[-1:] == ["N = 2: running..."])
    time.sleep(0.8)  # the scan under way (its first tick at 0.5 s; 3 s in all)
    pressed = time.monotonic()
    kernel.km.interrupt_kernel()
    kernel.until(lambda: kernel.lines[-1].startswith("N = 2: stopped"))
    took = time.monotonic() - pressed
    assert kernel.lines == ["N = 2: running...",
                            "N = 2: stopped (user pressed Stop); the plot is still the one for N = 1"]
    assert took < 3.0 - 0.8, took  # the scan had more than two seconds to go: Stop did not wait for them
    assert kernel.errors == []
    check = kernel.execute("print(states[-1].status, states[-1].interruption['reason'], view._task.done(), at_rest, "
                           "ours())")
    kernel.until(lambda: check in kernel.replies)
    # the run interrupted with the chapter's reason; the re-run's task done, and no other left; SIGINT ignored
    # as the re-run started (before its handler went in) and again once it ended
    assert "".join(kernel.texts[check]).split() == ["interrupted", "user", "pressed", "Stop", "True", "[True,",
                                                     "True]", "[]"]


@pytest.mark.slow
def test_a_slider_moved_during_run_all_reruns_beside_the_cell_and_one_stop_ends_both(kernel):
    """Run All's cells, each slow, and the slider moved meanwhile: ipykernel hands the slider's message over while
    the cell runs, and the re-run runs beside it. First a quick value: its plot is drawn while the cell's scan
    still runs, and the cell completes. Then a slow value and the toolbar's Stop during both scans: the re-run
    says it was stopped, the cell ends with Stopped in one line (and so Run All's queue with it), both runs end
    interrupted with the chapter's reason, well before their scans would have, no task is left, and the idle
    kernel ignores SIGINT again. Fails if the re-run does not pass Stop on to the cell (the cell's scan runs to
    its end)."""
    cell = kernel.execute('print("cell started", flush=True)\ncell_state = await cell_run("slow")\n'
                          'print(cell_state.status)')
    kernel.until(lambda: kernel.texts[cell])
    kernel.move(3)   # "plan": three quick turns
    kernel.until(lambda: kernel.lines[-1:] == ["N = 3"])
    assert "".join(kernel.texts[cell]).split() == ["cell", "started"]   # drawn while the cell's scan runs
    kernel.until(lambda: cell in kernel.replies)
    assert "".join(kernel.texts[cell]).split() == ["cell", "started", "completed"]

    cell = kernel.execute('print("cell started", flush=True)\ncell_state = await cell_run("slow")')
    kernel.until(lambda: kernel.texts[cell])
    kernel.move(2)   # "slow": a scan of its own, beside the cell's
    kernel.until(lambda: kernel.lines[-1:] == ["N = 2: running..."])
    time.sleep(0.8)  # both scans under way (their first ticks at 0.5 s; 3 s in all)
    pressed = time.monotonic()
    kernel.km.interrupt_kernel()
    kernel.until(lambda: cell in kernel.replies and kernel.lines[-1].startswith("N = 2: stopped"))
    took = time.monotonic() - pressed
    assert kernel.lines[-1] == "N = 2: stopped (user pressed Stop); the plot is still the one for N = 3"
    said = "".join(kernel.texts[cell]).splitlines()
    assert len(said) == 2 and said[0] == "cell started" and said[1].startswith("Stopped: user pressed Stop"), said
    assert took < 3.0 - 0.8, took
    assert kernel.errors == []
    check = kernel.execute("rest = []\nasyncio.get_running_loop().call_later(0.3, lambda: rest.append("
                           "signal.getsignal(signal.SIGINT) is signal.SIG_IGN))")   # once the cell has ended
    kernel.until(lambda: check in kernel.replies)
    time.sleep(0.6)
    check = kernel.execute("print(states[-1].status, states[-1].interruption['reason'], "
                           "cell_states[-1].status, cell_states[-1].interruption['reason'], view._task.done(), rest, "
                           "ours())")
    kernel.until(lambda: check in kernel.replies)
    assert "".join(kernel.texts[check]).split() == ["interrupted", "user", "pressed", "Stop"] * 2 + [
        "True", "[True]", "[]"]


# -- the notebooks' sliders -------------------------------------------------------------------------------
MOVE = """
import gc
from harness_lib.chapter.sliders import Slider
(view,) = [o for o in gc.get_objects() if isinstance(o, Slider)]
before = view.output.outputs[0]["data"]["image/png"]
view.control.value = {value!r}
await view.settled()
print(view.line.value)
print("redrawn" if view.output.outputs[0]["data"]["image/png"] != before else "the same plot")
"""


@pytest.mark.slow
@pytest.mark.parametrize("name,value,said", [
    ("02-turn-cap", 37, "cap = 37: "),                 # the long run's sums: no run
    ("09-cancellation", 0.4, "STOP_AT = 0.4 s: interrupted 4"),   # before the first progress event
    ("11-latency", 150.0, "latency = 150 ms: 3 turns, wall "),
    ("14-libraries", 2, "MY_LIMIT = 2: stopped after 2 turns"),
])
def test_each_notebooks_slider_redraws_for_a_value_the_reader_picks(name, value, said):
    """Each notebook run whole, as Run All runs it, then its slider moved: the line names the new value and what
    it measured, and the plot is a new one."""
    import nbformat
    from nbclient import NotebookClient

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(MOVE.format(value=value)))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    line, drawn = "".join(o.get("text", "") for o in nb.cells[-1].outputs).splitlines()
    assert line.startswith(said) and drawn == "redrawn", (line, drawn)


def test_the_notebooks_keep_the_sliders_text_and_plot_not_its_view():
    """A committed slider cell holds the slider's text form and its HTML form (the plot it drew for the value the
    cell ran with, over that text), never the widget's view: a view points to a model in the kernel that ran it, and
    JupyterLab shows "Error displaying widget: model not found" for it in a notebook just opened, where the plot and
    the text saying to run the cell show instead (harness_lib.chapter.notebooks.strip drops the view). The book
    (make book) shows the same plot."""
    import nbformat

    from harness_lib.chapter.notebooks import WIDGET_VIEW, strip

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    found = {}
    for path in sorted(folder.glob("[0-9][0-9]-*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and "await slider(" in cell.source:
                found[path.stem] = [sorted(o.get("data", {})) for o in cell.outputs]
                text = "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
                assert text.startswith("a slider over ") and text.endswith(": run the cell to move it"), text
                page = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
                png = re.fullmatch(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="the plot for [^"]+">'
                                   r"<p>(.*)</p>", page)
                assert png and base64.b64decode(png.group(1)).startswith(b"\x89PNG") and png.group(2) == text, page
    assert found == {name: [["text/html", "text/plain"]] for name in ("02-turn-cap", "09-cancellation",
                                                                      "11-latency", "14-libraries")}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "execute_result", data={WIDGET_VIEW: {"model_id": "x"}, "text/plain": "a slider"}, execution_count=1)])])
    assert strip(nb).cells[0].outputs[0]["data"] == {"text/plain": "a slider"}


def test_the_sliders_html_form_is_the_plot_it_shows_over_its_text():
    """What a page without the kernel shows of a slider: the plot its Output holds (the first, then the one for the
    value let go at), its value said in the image's text, and the slider's line under it."""
    async def main():
        view = await slider(SPEC, "N", 3, figure)
        first = view._repr_mimebundle_()
        view.control.value = 4
        await within(view.settled())
        return view, first, view._repr_mimebundle_()
    view, first, moved = asyncio.run(main())
    for bundle, value in ((first, 3), (moved, 4)):
        png = re.fullmatch(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]+)"><p>(.*)</p>',
                           bundle["text/html"])
        assert png, bundle["text/html"]
        assert png.group(2) == f"the plot for N = {value}" and png.group(3) == repr(view) == bundle["text/plain"]
        assert base64.b64decode(png.group(1)) == plots.png(figure(value))
    assert "application/vnd.jupyter.widget-view+json" in moved   # JupyterLab, with the kernel, shows the widget
