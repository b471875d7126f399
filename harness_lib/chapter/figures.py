"""The chapter's published figures (data/chapter_figures.csv) and the comparison with ours.

Each figure has a kind, and the kind says what "match" means:

* token counts, turns, statuses and outcomes must match exactly; dollars and ratios match when ours,
  printed at the chapter's precision, reads the same;
* ``time``: a time the design sets (a progress tick every 500 ms, a 3 s scan, Stop pressed at 1.2 s, a
  Stop that waits for nothing) matches within the tolerance the CSV states (``3x``: within a factor of
  three; ``50ms``: within 50 ms);
* ``machine``: a time of the chapter's machine and runtime (Node 22 there, CPython here: the plan run's
  wall time, the harness's overhead). Ours is measured here and shown beside it with that reason, never
  judged against it: "measured here, another machine", never "within tolerance";
* ``unreproducible``: figures of the chapter's own machine and model (section 12), shown as recorded, or,
  where this machine measured them with another model (the ``local`` extra), marked as such: a figure of a
  different model, beside the chapter's, never a match;
* ``registry``: figures of a package registry's history (section 14: versions published in a year, majors
  moved). They need the registry as it was on the chapter's date: "not reproducible offline", listed by
  name and counted, never left out.

A figure the chapter prints twice (section 15 repeats the runaway's and the plan run's) has a row of its
own in each section, the second saying ``repeats <id>`` in its tolerance column: it is compared as the
first is, and the tally says how many of the figures reproduced are such repeats.

A reader who changes a parameter measures values the chapter never printed: a measured key that is not a
figure id but a label (it contains a space, e.g. ``"runaway, cap 5: input tokens"``) is listed with "the
chapter has no figure for this value". A key that looks like an id and is not one is an error.
"""

from __future__ import annotations

import json
import re

import pandas as pd

from ..resources import data_path
from .language import N_, _, dollars, localized

DATA = data_path()  # the project's data folder: the chapter's figures, its trace, its local-model table
EXACT, WITHIN, NOT_HERE, DIFFERS = N_("exact"), N_("within tolerance"), N_("not reproducible here"), N_("DIFFERS")
NO_FIGURE = N_("the chapter has no figure for this value")
COLUMNS = ["figure", "chapter", "ours", "tolerance", "match"]
HEADERS = (N_("figure"), N_("chapter"), N_("ours"), N_("tolerance"), N_("match"))  # COLUMNS, as a table shows them
OTHER_MODEL = N_("measured here, another model")
OTHER_MACHINE = N_("measured here, another machine")
OFFLINE = N_("not reproducible offline")
ALWAYS_LISTED = ("unreproducible", "registry")  # listed for their section whether measured or not
REPEATS = "repeats "  # the tolerance column of a figure the chapter prints a second time: "repeats cap.in8"


_NUMERIC = re.compile(r"-?\d+(\.\d+)?( ms)?")   # a figure's value that is one number (not a list, nor a name)


def chapter_figures() -> pd.DataFrame:
    return pd.read_csv(data_path("chapter_figures.csv"), dtype=str, keep_default_na=False)


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def render(value, like: str = "") -> str:
    """Our value as text, at the chapter's precision where the chapter's value is a number."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) for v in value):
            return ", ".join(str(v) for v in value)
        return json.dumps(list(value), separators=(",", ":"))
    if isinstance(value, float):
        return f"{value:.{_decimals(like)}f}"
    return str(value)


def judge(kind: str, chapter: str, ours: str, tolerance: str) -> str:
    if kind == "unreproducible":
        return OTHER_MODEL if ours else NOT_HERE
    if kind == "registry":
        return OFFLINE
    if kind == "machine":
        return OTHER_MACHINE if ours else NOT_HERE
    if kind != "time":
        return EXACT if chapter == ours else DIFFERS
    try:
        a, b = float(chapter), float(ours)
    except ValueError:
        return DIFFERS
    if tolerance.endswith("x"):
        f = float(tolerance[:-1])
        ok = b > 0 and 1 / f <= b / a <= f
    else:
        ok = abs(a - b) <= float(tolerance.removesuffix("ms"))
    return WITHIN if ok else DIFFERS


def tolerance_text(kind: str, tolerance: str) -> str:
    """What "match" means for a figure, in words: the tolerance every comparison table shows."""
    if kind == "unreproducible":
        return _("needs the chapter's machine")
    if kind == "registry":
        return _("needs the npm registry as it was on 7 September 2026")
    if kind == "machine":
        return _("none: another machine and runtime (the chapter's Node 22, this machine's CPython)")
    if kind != "time":
        return _("exact (the chapter printed it first as {figure})").format(figure=tolerance.removeprefix(REPEATS)) \
            if tolerance.startswith(REPEATS) else _("exact")
    if tolerance.endswith("x"):
        return _("within {times}×").format(times=tolerance[:-1])
    return f"± {tolerance.removesuffix('ms')} ms"


def is_label(key: str) -> bool:
    return " " in key


def compare(measured: dict, section: str | None = None) -> pd.DataFrame:
    """figure | chapter | ours | tolerance | match, for the figures of ``section`` (all of them when
    None) that were measured (the unreproducible and the registry's are always listed, measured or not),
    then the measured values the chapter has no figure for (keys that are labels, not ids)."""
    figures = chapter_figures()
    unknown = [k for k in measured if not is_label(k) and k not in set(figures["id"])]
    if unknown:
        raise KeyError(f"not figure ids in data/chapter_figures.csv: {', '.join(unknown)}")
    rows = []
    for f in figures.itertuples():
        if section and f.section != section:
            continue
        if f.id not in measured and f.kind not in ALWAYS_LISTED:
            continue
        ours = render(measured.get(f.id), f.value)
        rows.append({"section": f.section, "id": f.id, "figure": f.figure,
                     "chapter": f.value + (f" {f.unit}" if f.unit in ("ms",) else ""),
                     "ours": ours + (f" {f.unit}" if f.unit in ("ms",) and ours else ""),
                     "tolerance": tolerance_text(f.kind, f.tolerance),
                     "match": judge(f.kind, f.value, ours, f.tolerance)})
    for key, value in measured.items():
        if is_label(key):
            rows.append({"section": section or "", "id": "", "figure": key, "chapter": "", "ours": render(value),
                         "tolerance": "", "match": NO_FIGURE})
    return pd.DataFrame(rows, columns=["section", "id", *COLUMNS])


# How the label of a value measured with no chapter figure is made (the data keeps the English; ``said`` shows it in
# the language spoken): a budget the chapter did not print, and a figure measured under other parameters (``relabel``).
TEMPLATES = (N_("budget {usd}, no cap: spent"), N_("{figure} ({note})"))
_DOLLARS = re.compile(r"\$(\d+\.\d+)")


def said(label: str) -> str:
    """A figure's label in the language spoken: its own translation (data/chapter_figures.csv is extracted), else
    that of the template it was made from, its parts said the same way (an amount the language's way)."""
    own = _(label)
    if own != label:
        return own
    for template in TEMPLATES:
        pattern = re.escape(template).replace(r"\{usd\}", r"(?P<usd>\$\d+\.\d+)")
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+)", pattern)
        match = re.fullmatch(pattern, label)
        if match is None:
            continue
        parts = {name: (dollars(float(value[1:]), len(value) - value.index(".") - 1) if _DOLLARS.fullmatch(value)
                        else said(value)) for name, value in match.groupdict().items()}
        return str(_(template).format(**parts))
    return label


def relabel(measured: dict, note: str) -> dict:
    """``measured`` with every figure id replaced by its figure's label plus ``note``: values measured
    under parameters the chapter did not use, so the chapter's figure does not apply to them."""
    labels = dict(zip(chapter_figures()["id"], chapter_figures()["figure"]))
    return {(f"{labels[k]} ({note})" if k in labels else k): v for k, v in measured.items()}


def repeats(ids) -> set[str]:
    """Which of ``ids`` are figures the chapter prints a second time (``repeats <id>`` in the CSV)."""
    figures = chapter_figures()
    return set(figures.id[figures.tolerance.str.startswith(REPEATS)]) & set(ids)


def tally(table: pd.DataFrame) -> str:
    """One line: how many of the table's chapter figures came back, by category. The categories this
    table has none of among "measured here, another machine" and "not reproducible offline" are left out;
    exact, within tolerance, not reproducible here and differ are always said."""
    counts = table["match"].value_counts() if "match" in table else pd.Series(dtype=int)
    total = len(table) - counts.get(NO_FIGURE, 0)
    other = (_(" ({n} measured here with another model)").format(n=counts[OTHER_MODEL])
             if counts.get(OTHER_MODEL) else "")
    again = len(repeats(table.id[table.match == EXACT])) if "id" in table and len(table) else 0
    line = (_("{n} of {total} chapter figures reproduced exactly").format(n=counts.get(EXACT, 0), total=total)
            + (_(" ({n} of them repeats of earlier figures)").format(n=again) if again else "") + ", "
            + _("{n} within tolerance").format(n=counts.get(WITHIN, 0)) + ", "
            + (_("{n} measured here on another machine").format(n=counts[OTHER_MACHINE]) + ", "
               if counts.get(OTHER_MACHINE) else "")
            + _("{n} not reproducible here").format(n=counts.get(NOT_HERE, 0) + counts.get(OTHER_MODEL, 0))
            + other + ", "
            + (_("{n} not reproducible offline").format(n=counts[OFFLINE]) + ", " if counts.get(OFFLINE) else "")
            + _("{n} differ").format(n=counts.get(DIFFERS, 0)))
    if counts.get(NO_FIGURE, 0):
        line += "; " + _("{n} more measured, with no chapter figure").format(n=counts.get(NO_FIGURE))
    return line


def beside_the_chapter(measured: dict, section: str):
    """A notebook's last table: prints the tally, returns the comparison (tolerance shown) for display."""
    from . import collected
    from .params import table as show_table

    comparison = compare(measured, section=section)
    collected.record(measured, section)  # for `make chapter`'s report; nothing in a reader's Jupyter
    print(tally(comparison))
    return show_table(shown(comparison))


def shown(comparison: pd.DataFrame) -> pd.DataFrame:
    """The comparison as a notebook shows it, in the language spoken: its headers, the chapter's labels of its
    figures (in the catalogue: data/chapter_figures.csv is extracted with the code) and the categories."""
    out = comparison[COLUMNS].reset_index(drop=True)
    out["figure"] = out["figure"].map(said)
    for column in ("chapter", "ours"):   # a number the language's way (0,038), compared as the chapter wrote it
        out[column] = out[column].map(lambda v: localized(v) if isinstance(v, str) and _NUMERIC.fullmatch(v) else v)
    out["match"] = out["match"].map(_)
    return out.rename(columns=dict(zip(COLUMNS, map(_, HEADERS))))
