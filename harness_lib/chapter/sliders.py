"""A slider beside a notebook's parameter: scrub a value back and forth and watch the plot move (issue 19, item 8).

    async def limit_plot(limit):             # a value -> a Figure (or a Figure and a line of text)
        ...
    await slider(s14.PARAMETERS, "MY_LIMIT", MY_LIMIT, limit_plot)

The widgets are ipywidgets', the Jupyter convention; JupyterLab 4 draws them through jupyterlab_widgets, which
comes with ipywidgets: nothing to build, nothing fetched at run time. The slider's bounds are the parameter's
spec (``params.Whole`` or ``params.Number``, narrowed with ``low``/``high`` where the notebook has less to show),
so a value the spec refuses cannot be picked. It reports a value when the reader lets go
(``continuous_update=False``), and each new value

* cancels a re-run still in progress and waits for it to end before its own starts: never two at once;
* says ``running...`` on the line under the slider while it runs;
* replaces the plot in an ``Output`` when it is done, the line naming the value it was drawn for;
* ends, if the toolbar's Stop is pressed meanwhile, as a cell does (``stop_button.whole``: the chapter's
  "user pressed Stop" reaches the run): the line says it was stopped, the plot of the last value stays;
* ends, if the re-run raises, with the error in one line in the ``Output``, never a traceback, never silence;
* says, while a failed ``params.check`` holds the notebook's cells (``params.held``), that check's one line
  instead of running on values the notebook has just refused; the slider's own cell is held like any other.

The first plot is drawn in the cell itself (Run All draws it once, or shows ``first``, a figure the notebook has
already made, and moves on); an error there is the cell's, as in any other cell. The cell's text form is one
fixed line, so nbval compares the same text on every run. Beside the widget's view, the cell's output holds an HTML
form: the plot drawn last (at Run All's end, the one for the value the cell ran with) over that line. It is what a
page without the kernel shows (a notebook just opened, whose view ``notebooks.strip`` dropped, and the book, ``make
book``); nbval compares its line (tests/sanitize.cfg leaves the PNG's bytes out).

Stop and a running cell: the toolbar's Stop interrupts the kernel, and whichever handler is installed hears it. A
re-run installs its own while it runs (as a cell's experiment does) and puts the previous one back when it ends,
unless a cell started meanwhile has put its own over it. ipykernel (7.x) hands a slider's message to the kernel
even while a cell runs, so a slider moved during Run All re-runs beside the running cell: its handler is then
installed over the cell's, and passes Stop on to it, so one press ends both, the cell as a cell ends (and Run
All with it) and the re-run as above. A cell that starts during a re-run puts its handler over the re-run's: Stop
ends that cell, and the kernel puts the re-run's handler back when the cell ends. Only a re-run that outlives the
cell it started beside is out of Stop's reach (ipykernel puts back the handler it had before that cell); it ends
by itself, or when the slider moves again.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import html
import inspect
from decimal import Decimal

import ipywidgets as widgets

from . import params, plots
from .language import N_, _
from .stop_button import Stopped, whole

SUPERSEDED = "a newer value was picked"
# The labels the notebooks give their sliders (their code cells are the same in every language), translated on screen.
LABELS = (N_("cap"), N_("latency"))


class Slider(widgets.VBox):
    """The slider, the line under it, and the ``Output`` holding the plot (``slider`` makes one)."""

    def __init__(self, parameter: str, spec: params.Spec, control, plot, name: str, unit: str = "",
                 decimals: int = 0):
        self.line = widgets.Label()
        self.output = widgets.Output()
        super().__init__([control, self.line, self.output])
        self.parameter, self.spec, self.control, self.plot = parameter, spec, control, plot
        self.name, self.unit = name, unit
        self.decimals = decimals    # a float slider's values, rounded to its step (0.1 + 0.2 is not 0.3)
        self.shown = None           # the value whose plot the Output holds
        self.png: str | None = None  # that plot, base64 (the HTML form's)
        self._task: asyncio.Task | None = None
        self._loop = asyncio.get_running_loop()
        control.observe(self._moved, names="value")

    def __repr__(self):  # the cell's text/plain: what an untrusted notebook shows, and what nbval compares
        return _("a slider over {name}, from {low} to {high}: run the cell to move it").format(
            name=self.name, low=self.said(self.control.min), high=self.said(self.control.max))

    def _repr_mimebundle_(self, **kwargs):
        """The widget's view and text, and the HTML form: the plot the Output holds, over the text."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if self.png is not None:
            alt = _("the plot for {name} = {value}").format(name=self.name, value=self.said(self.shown))
            bundle["text/html"] = (f'<img src="data:image/png;base64,{self.png}" alt="{html.escape(alt)}">'
                                   f"<p>{html.escape(repr(self))}</p>")
        return bundle

    def said(self, value) -> str:
        return f"{value:g}{self.unit}" if isinstance(value, float) else f"{value}{self.unit}"

    def _moved(self, change) -> None:
        value = change["new"]
        self.move(round(value, self.decimals) if isinstance(value, float) else value)

    def move(self, value) -> asyncio.Task:
        """Re-run and replot for ``value`` (what letting go of the slider does): cancels a re-run in progress."""
        previous = self._task
        if previous is not None and not previous.done():
            previous.cancel(SUPERSEDED)
        self._task = self._loop.create_task(self._rerun(value, previous))
        return self._task

    async def settled(self) -> None:
        """Wait until the latest re-run has ended (and any started meanwhile)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def _rerun(self, value, previous: asyncio.Task | None) -> None:
        me, said = asyncio.current_task(), f"{self.name} = {self.said(value)}"
        try:
            if previous is not None:
                await asyncio.wait({previous})   # never two at once: the one cancelled above ends first
            self.line.value = _("{value}: running...").format(value=said)
            result = await whole(self._call(value), forward=True)
            if self._task is me:               # a result for a value the reader has already left is dropped
                self._show(value, result)
        except asyncio.CancelledError:
            if self._task is me:               # not a newer value's doing (a newer value says what comes next)
                raise
        except Stopped:
            if self._task is me:
                self.line.value = _("{value}: stopped (user pressed Stop); the plot is still the one for "
                                    "{name} = {shown}").format(value=said, name=self.name,
                                                               shown=self.said(self.shown))
        except Exception as e:  # noqa: BLE001 - the reader's function failed: one line, where the plot was
            if self._task is me:
                self.line.value = _("{value}: failed").format(value=said)
                self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": one_line(e) + "\n"},)

    async def _call(self, value):
        if params.held() is not None:   # the notebook's parameters were refused: its values are not to be run on
            raise params.ParameterError(params.held())
        value = dataclasses.replace(self.spec, several=False).check(self.parameter, value)
        result = self.plot(value)
        return await result if inspect.isawaitable(result) else result

    def _show(self, value, result) -> None:
        figure, text = result if isinstance(result, tuple) else (result, "")
        png = base64.b64encode(plots.png(figure)).decode("ascii")
        self.output.outputs = ({"output_type": "display_data", "metadata": {}, "data": {
            "image/png": png, "text/plain": _("the plot for {name} = {value}").format(name=self.name,
                                                                                      value=self.said(value))}},)
        self.shown, self.png = value, png
        self.line.value = f"{self.name} = {self.said(value)}" + (f": {text}" if text else "")


def one_line(e: BaseException) -> str:
    """An exception as the one line a reader sees (a ``ParameterError`` or ``Stopped`` as IPython shows it)."""
    shown = getattr(e, "_render_traceback_", None)
    text = shown()[0] if shown is not None else f"{type(e).__name__}: {e}"
    return text.splitlines()[0] if text.strip() else type(e).__name__


def bounds(spec: params.Spec, low=None, high=None, step=None) -> tuple:
    """The slider's (min, max, step) for ``spec``: its range, or the part of it between ``low`` and ``high``.
    A range open at its low end (``Number`` without ``closed``) starts one step above it."""
    if isinstance(spec, params.Whole):
        step = 1 if step is None else step
        lo, hi = spec.low, spec.high
    elif isinstance(spec, params.Number):
        if step is None:
            raise ValueError("a slider over a number needs its step")
        lo, hi = (spec.low if spec.closed else spec.low + step), spec.high
    else:
        raise TypeError(f"a slider needs a params.Whole or params.Number, not {type(spec).__name__}")
    lo, hi = (lo if low is None else low), (hi if high is None else high)
    single = dataclasses.replace(spec, several=False)
    for end in (lo, hi):
        single.check("the slider's bounds", end)   # narrower than the spec, never wider
    if lo > hi:
        raise ValueError(f"the slider's bounds are reversed: {lo} > {hi}")
    return lo, hi, step


async def slider(parameters: dict, name: str, value, plot, *, low=None, high=None, step=None, first=None,
                 label: str | None = None) -> Slider:
    """A slider over ``parameters[name]`` (called ``label`` on screen, if given) starting at ``value``, drawing
    ``plot(value)`` (a ``Figure``, or ``(Figure, text)``; async or not) once now, or showing ``first``, a result
    the notebook already has for ``value``, and again each time the reader lets go of it. A ``value`` beyond the
    slider's bounds starts at the nearest bound, drawn anew."""
    spec = parameters[name]
    lo, hi, step = bounds(spec, low, high, step)
    if not lo <= value <= hi:
        value, first = min(max(value, lo), hi), None
    shown = _(label) if label else name
    common = dict(min=lo, max=hi, step=step, value=value, description=shown, continuous_update=False,
                  style={"description_width": "initial"}, layout=widgets.Layout(width="520px"))
    decimals = max(0, -Decimal(str(step)).normalize().as_tuple().exponent)   # 0.25 -> 2, 10 -> 0
    if isinstance(spec, params.Whole):
        control = widgets.IntSlider(**common)
    else:
        control = widgets.FloatSlider(readout_format=f".{decimals}f", **common)
    view = Slider(name, spec, control, plot, shown, getattr(spec, "unit", ""), decimals)
    view._show(control.value, first if first is not None else await whole(view._call(control.value)))
    return view
