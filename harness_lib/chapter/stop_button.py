"""The notebook's Stop button is the chapter's Stop.

JupyterLab's Stop (Kernel > Interrupt) sends the kernel SIGINT. On its own, ipykernel (7.x) turns that into a
bare ``cancel()`` of the cell's task, so a run ends with the reason "cancelled" instead of the chapter's
"user pressed Stop"; and it schedules that cancel with tornado's ``add_callback``, which, called from a
signal handler on the loop's own thread, uses ``call_soon`` and does not wake the loop: the cancel waits
for the loop's next wake-up, in 09's scan the tool's next 500 ms tick (50-400 ms measured). While a
coroutine runs under ``stoppable`` or ``whole``, SIGINT is ours instead: the handler hands
``task.cancel("user pressed Stop")`` to the loop with ``call_soon_threadsafe``, whose self-pipe wakes it at
once (2-7 ms from the interrupt to the run's end, measured in a kernel). The previous handler is put back
however the block ends.

Two ways to run a cell's coroutine:

* ``stoppable(coro)`` returns ``(result, press)``: the run records the interruption itself, and
  ``press`` says when Stop was pressed and how long the run took to end after it;
* ``whole(coro)`` returns the result, or, if Stop was pressed, raises ``Stopped``, shown as one line:
  an experiment made of several runs has no honest half result. Experiments decorated with
  ``@all_or_nothing`` do this by themselves, and ``check()`` between runs stops them at the next one.

Outside the main thread (where no signal handler can be installed) both simply await the coroutine.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass

from .language import _

STOP_REASON = "user pressed Stop"


class Stopped(Exception):
    """A cell ended by the toolbar's Stop; its partial result is discarded. Shown as one line."""

    def _render_traceback_(self):  # IPython shows this instead of a traceback
        return [f"Stopped: {self}"]


@dataclass
class Press:
    """One cell's Stop button: when it was pressed (``time.perf_counter``), and when the cell's run ended."""
    reason: str = STOP_REASON
    at: float | None = None
    ended: float | None = None

    @property
    def pressed(self) -> bool:
        return self.at is not None

    @property
    def to_end_ms(self) -> float | None:
        """Milliseconds from the interrupt to the end of the run (None when Stop was not pressed)."""
        if self.at is None or self.ended is None:
            return None
        return (self.ended - self.at) * 1000

    def check(self):
        if self.pressed:
            raise Stopped(_("{reason}; the cell's partial result was discarded. Run it again for a whole one.").format(
                reason=self.reason))


_current: ContextVar[Press | None] = ContextVar("harness_stop_button", default=None)


def check():
    """Raise ``Stopped`` if the Stop button of the cell this code runs under has been pressed."""
    press = _current.get()
    if press is not None:
        press.check()


async def stoppable(coro, reason: str = STOP_REASON) -> tuple[object, Press]:
    """Await ``coro`` as a task that a kernel interrupt cancels with ``reason``; returns (result, press)."""
    press = Press(reason)
    return await _run(coro, press), press


async def _run(coro, press: Press, forward: bool = False):
    if threading.current_thread() is not threading.main_thread():
        return await coro
    loop = asyncio.get_running_loop()
    token = _current.set(press)
    try:
        task = asyncio.ensure_future(coro)  # the task's context holds ``press``
    finally:
        _current.reset(token)
    task.add_done_callback(lambda _: setattr(press, "ended", time.perf_counter()))

    def on_interrupt(signum, frame):
        if press.at is None:
            press.at = time.perf_counter()
        loop.call_soon_threadsafe(_cancel, task, press.reason)
        if forward and callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)   # a run beside a cell (a slider's re-run): Stop reaches the cell too

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        return await task
    finally:
        if signal.getsignal(signal.SIGINT) is on_interrupt:  # not if a run started meanwhile, beside this one,
            signal.signal(signal.SIGINT, previous)           # has put its own: it puts back what it found
        if not task.done():  # the cell itself was cancelled from outside: take the run with it
            task.cancel()


def _cancel(task: asyncio.Task, reason: str):
    if not task.done():
        task.cancel(reason)


async def whole(coro, reason: str = STOP_REASON, forward: bool = False):
    """Await ``coro``; if Stop is pressed meanwhile, raise ``Stopped`` rather than return a half result.
    ``forward``: Stop also reaches the handler this one was installed over (a cell running beside ``coro``)."""
    if _current.get() is not None:  # already under a Stop button: that one decides
        return await coro
    press = Press(reason)
    try:
        result = await _run(coro, press, forward)
    except asyncio.CancelledError:
        if press.pressed:
            press.check()
        raise
    press.check()
    return result


def all_or_nothing(fn):
    """Decorate an async experiment: awaited from a cell, Stop ends it with ``Stopped``, not half a table."""
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        return await whole(fn(*args, **kwargs))
    return wrapper



def each(items):
    """Iterate over ``items`` in a cell whose loop awaits runs: ``for cap in each(CAPS): await run(...)``.

    The toolbar's Stop cancels the run in progress with the chapter's reason (it ends ``interrupted``,
    "user pressed Stop"), and the loop ends there with ``Stopped``, one line, instead of going on to the next
    item: a run catches its own cancellation and returns, so without this the sweep would carry on. An
    experiment awaited inside the loop installs its own Stop while it runs and puts this one back. The
    handler goes when the loop ends, however it ends (IPython's ``post_run_cell`` too, for a loop left by an
    exception). Outside a running event loop, or off the main thread, it is a plain iteration."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is None or threading.current_thread() is not threading.main_thread():
        yield from items
        return
    press = Press()
    loop = asyncio.get_running_loop()

    def on_interrupt(signum, frame):
        if press.at is None:
            press.at = time.perf_counter()
        loop.call_soon_threadsafe(_cancel, task, press.reason)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    shell = _ipython()

    def restore(*_):
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not on_interrupt:
            return  # already restored, or replaced by a later handler that will put back its own
        signal.signal(signal.SIGINT, previous)

    if shell is not None:
        def after_cell(result):
            restore()
            shell.events.unregister("post_run_cell", after_cell)
        shell.events.register("post_run_cell", after_cell)
    try:
        for item in items:
            press.check()
            yield item
        press.check()
    finally:
        restore()


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with jupyterlab
        return None
    return get_ipython()
