"""The notebooks' figures: matplotlib only, one fixed style, no pyplot state.

Each section's own plots live in its module (``s02_turn_cap.cost_vs_cap_plot``...) and draw with the style
and helpers here; ``bars`` serves any table. A plot takes the DataFrames an experiment returns and gives back
a ``Figure``; none computes a number the experiments did not (a fitted curve is drawn from coefficients it is
handed). ``show``
displays a figure in a notebook as a PNG and nothing else, so a notebook's text outputs stay free of
``<Figure size ...>`` lines and its PNGs carry no date.
"""

from __future__ import annotations

import base64
import io
import re
from contextlib import contextmanager

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from . import language
from .language import N_, _, dollars

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.prop_cycle": matplotlib.cycler(color=["#2f6db5", "#d9822b", "#3a9a5b", "#c23b3b", "#7d5ba6", "#6b6b6b"]),
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "figure.dpi": 100,
    "svg.hashsalt": "harness-lib",
    "text.parse_math": False,   # labels are full of dollars: "$0.010" must not start a formula
}
BLUE, ORANGE, GREEN, RED, PURPLE, GREY = STYLE["axes.prop_cycle"].by_key()["color"]
ROLE_COLORS = {"tool schemas": "#c9c9c9", "system": GREY, "user": GREEN, "assistant": BLUE, "tool": ORANGE}
DPI = 110


@contextmanager
def style():
    with matplotlib.rc_context(STYLE):
        yield


def _figure(width: float = 7.0, height: float = 3.4, ncols: int = 1):
    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


class _Localized(matplotlib.ticker.Formatter):
    """A tick formatter's labels with the numbers written the way of the language spoken (``language.localized``):
    ``3,000`` becomes ``3 000`` in Bulgarian, ``0.5`` becomes ``0,5``."""

    def __init__(self, inner: matplotlib.ticker.Formatter):
        self.inner = inner

    def set_axis(self, axis):
        self.inner.set_axis(axis)

    def set_locs(self, locs):
        self.inner.set_locs(locs)

    def __call__(self, x, pos=None):
        return language.localized(self.inner(x, pos))

    def format_ticks(self, values):
        return [language.localized(t) for t in self.inner.format_ticks(values)]

    def get_offset(self):
        return language.localized(self.inner.get_offset())

    def format_data(self, value):
        return language.localized(self.inner.format_data(value))

    def format_data_short(self, value):
        return language.localized(self.inner.format_data_short(value))


def localize_ticks(fig: Figure) -> Figure:
    """Every axis of ``fig`` labelled with numbers the way of the language spoken (English: as it is)."""
    if language.spoken() == "en":
        return fig
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                inner = get()
                if not isinstance(inner, (_Localized, matplotlib.ticker.NullFormatter)):
                    put(_Localized(inner))
    return fig


def dollar_ticks(places: int = 2) -> matplotlib.ticker.Formatter:
    """Ticks in dollars with ``places`` decimals, the way of the language spoken: ``$0.20``, ``0,20 $``."""
    return matplotlib.ticker.FuncFormatter(lambda y, _pos: dollars(y, places))


def number_ticks() -> matplotlib.ticker.Formatter:
    """Whole numbers grouped, as ``{x:,.0f}`` writes them in English (``3,000``); ``localize_ticks`` writes them the
    language's way."""
    return matplotlib.ticker.StrMethodFormatter("{x:,.0f}")


def bar_label(fmt: str, value) -> str:
    """``fmt.format(value)`` with the number the language's way: ``"${:.6f}"`` is dollars (``$0.002470``, ``0,002470
    $``), ``"{:,}"`` a grouped number."""
    money = re.fullmatch(r"\$\{:\.(\d+)f\}", fmt)
    if money and language.spoken() != "en":
        return dollars(value, int(money.group(1)))
    return language._said(fmt).format(value)


def png(fig: Figure, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, without the ``Software`` stamp (so equal figures give equal bytes), its ticks'
    numbers written the way of the language spoken."""
    localize_ticks(fig)
    buf = io.BytesIO()
    with style():
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def show(fig: Figure, dpi: int = DPI) -> None:
    """Display ``fig`` in a notebook as a PNG and nothing else (no text/plain twin)."""
    from IPython.display import display

    display({"image/png": base64.b64encode(png(fig, dpi)).decode("ascii")}, raw=True)


def _label_bars(ax, bars, labels, inside: bool = False):
    for bar, text in zip(bars, labels):
        x = bar.get_x() + bar.get_width() / 2
        y = bar.get_height() / 2 if inside else bar.get_height()
        ax.annotate(text, (x, y), xytext=(0, 0 if inside else 3), textcoords="offset points",
                    ha="center", va="center" if inside else "bottom", fontsize=8.5)


# -- labelled bars, for any table (05, 06, 12, 13) ---------------------------------------------------
# The titles and the legend the notebooks hand ``bars`` (their code cells are the same in every language): marked
# here for the catalogue, translated where they are drawn.
NOTEBOOK_WORDS = (N_("turns"), N_("tool runs"), N_("cost (USD)"), N_("wall time per task (ms, recorded)"),
                  N_("answered the question"))


def bars(table: pd.DataFrame, columns: list[str], titles: list[str] | None = None, formats: list[str] | None = None,
         highlight: pd.Series | None = None, highlight_label: str = "", width: float | None = None) -> Figure:
    """One panel per column, one bar per row of ``table`` (its index labels the bars). Rows where
    ``highlight`` is true are drawn in green, with ``highlight_label`` in the legend."""
    fig, axes = _figure(width or 3.3 * len(columns) + 1.0, 3.4, ncols=len(columns))
    titles = titles or columns
    formats = formats or ["{:,}"] * len(columns)
    labels = [str(language.label(i)) for i in table.index]
    with style():
        for ax, column, title, fmt in zip(axes, columns, titles, formats):
            colors = [GREEN if highlight is not None and bool(highlight.iloc[i]) else BLUE for i in range(len(table))]
            drawn = ax.bar(range(len(table)), table[column], color=colors, width=0.6)
            _label_bars(ax, drawn, [bar_label(fmt, v) for v in table[column]])
            ax.set_xticks(range(len(table)), labels, rotation=20 if max(map(len, labels)) > 12 else 0, ha="right"
                          if max(map(len, labels)) > 12 else "center")
            ax.set_title(_(title))
            ax.set_ylim(0, max(table[column].max(), 1e-12) * 1.2)
            if pd.api.types.is_integer_dtype(table[column]):  # counts: no half-ticks
                ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            if table[column].max() >= 1000:
                ax.yaxis.set_major_formatter(number_ticks())
        if table.attrs.get("recorded"):  # data not measured here says so on the figure itself
            fig.suptitle(_("Recorded data: {what}").format(what=_(table.attrs["recorded"])), x=0.01, ha="left",
                         fontsize=9,
                         color=GREY, style="italic")
        if highlight is not None and highlight.any() and highlight_label:
            from matplotlib.patches import Patch
            axes[-1].legend(handles=[Patch(color=GREEN, label=_(highlight_label))], loc="upper left")
    return fig


