"""The notebooks' sliders (harness_lib.chapter.sliders, issue 19 item 8): bounds from the parameter's spec, a
re-run cancelled by a newer value and never two at once, the toolbar's Stop during a re-run, an error in one line.

The fast tests drive the slider as the reader's browser does, by setting its value (the widget's comm is a dummy
outside a kernel) inside an event loop; the slow one moves it from a kernel client, as JupyterLab does, and
interrupts the kernel during the re-run, as the toolbar's Stop does."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time

import pytest
from matplotlib.figure import Figure

from harness_lib.chapter import params, plots
from harness_lib.chapter.params import Number, ParameterError, Whole
from harness_lib.chapter.sliders import bounds, slider
from harness_lib.chapter.stop_button import Stopped

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
    """SIGINT as an idle kernel takes it: nothing happens (ipykernel ignores it between cells). A slider that does
    not hear Stop itself leaves its re-run running, and the test fails on ``within``, not on a KeyboardInterrupt."""
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
    view, before, first, after, unheard = asyncio.run(main())
    assert view.line.value == "N = 4: stopped (user pressed Stop); the plot is still the one for N = 2"
    assert view.shown == 2 and shown(view) == first and view._task.done() and not view._task.cancelled()
    assert after is before and unheard == []


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
from harness_lib.loop import Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace
url = ScriptedProvider.shared().base_url
states = []

async def plot(value):
    states.append(await run(new_run(SYSTEM_PROMPT, TASK, "slow" if value > 1 else "plan"),
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

print(view.control.model_id, view.line.model_id)
"""


@pytest.mark.slow
def test_the_toolbars_stop_reaches_a_rerun_in_an_idle_kernel():
    """The slider moved from the kernel's client (a comm message, as JupyterLab sends one), the kernel
    interrupted while the re-run's slow scan runs and no cell is running (ipykernel ignores SIGINT then): the
    re-run ends, well before its scan would have, the line says it was stopped, no error reaches the reader,
    no task is left, and the kernel's own handling of SIGINT is back."""
    jupyter_client = pytest.importorskip("jupyter_client.manager")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3")
    try:
        texts = []
        reply = kc.execute_interactive(KERNEL_SETUP, timeout=60,
                                       output_hook=lambda m: texts.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        slider_id, line_id = "".join(texts).split()
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": slider_id, "data": {
            "method": "update", "state": {"value": 2}, "buffer_paths": []}}))
        lines, errors = [], []
        while not any(line.endswith("running...") for line in lines):
            msg = kc.get_iopub_msg(timeout=30)
            errors += [msg] if msg["msg_type"] in ("error", "stream") else []
            if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == line_id:
                lines.append(msg["content"]["data"]["state"].get("value", ""))
        time.sleep(0.8)  # the scan under way (its first tick at 0.5 s; 3 s in all)
        pressed = time.monotonic()
        km.interrupt_kernel()
        while not lines[-1].startswith("N = 2: stopped"):
            msg = kc.get_iopub_msg(timeout=30)
            errors += [msg] if msg["msg_type"] in ("error", "stream") else []
            if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == line_id:
                lines.append(msg["content"]["data"]["state"].get("value", ""))
        took = time.monotonic() - pressed
        assert lines == ["N = 2: running...", "N = 2: stopped (user pressed Stop); the plot is still the one for N = 1"]
        assert took < 3.0 - 0.8, took  # the scan had more than two seconds to go: Stop did not wait for them
        assert errors == []
        texts.clear()
        reply = kc.execute_interactive(
            "print(states[-1].status, states[-1].interruption['reason'], view._task.done(), at_rest, "
            "ours())",
            timeout=30, output_hook=lambda m: texts.append(m["content"].get("text", "")))
        # the run interrupted with the chapter's reason; the re-run's task done, and no other left; SIGINT ignored
        # as the re-run started (before its handler went in) and again once it ended
        assert "".join(texts).split() == ["interrupted", "user", "pressed", "Stop", "True", "[True,", "True]", "[]"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
