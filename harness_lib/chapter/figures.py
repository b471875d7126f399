"""The chapter's published figures (data/chapter_figures.csv) and the comparison with ours.

Token counts, turns, statuses and outcomes must match exactly; dollars and ratios match when ours,
printed at the chapter's precision, reads the same; times match within the tolerance the CSV states
(``3x``: within a factor of three; ``50ms``: within 50 ms); ``unreproducible`` figures need the
chapter's own machine or model and are shown as recorded, or, where this machine measured them with
another model (section 12 with the ``local`` extra), marked as such: a figure of a different model,
beside the chapter's, never a match.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "data"
EXACT, WITHIN, NOT_HERE, DIFFERS = "exact", "within tolerance", "not reproducible here", "DIFFERS"
OTHER_MODEL = "measured here, another model"


def chapter_figures() -> pd.DataFrame:
    return pd.read_csv(DATA / "chapter_figures.csv", dtype=str, keep_default_na=False)


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


def compare(measured: dict, section: str | None = None) -> pd.DataFrame:
    """figure | chapter | ours | match, for the figures of ``section`` (all of them when None) that
    were measured (the unreproducible ones are always listed)."""
    rows = []
    for f in chapter_figures().itertuples():
        if section and f.section != section:
            continue
        if f.id not in measured and f.kind != "unreproducible":
            continue
        ours = render(measured.get(f.id), f.value)
        rows.append({"section": f.section, "id": f.id, "figure": f.figure,
                     "chapter": f.value + (f" {f.unit}" if f.unit in ("ms",) else ""),
                     "ours": ours + (f" {f.unit}" if f.unit in ("ms",) and ours else ""),
                     "match": judge(f.kind, f.value, ours, f.tolerance)})
    return pd.DataFrame(rows)


def tally(table: pd.DataFrame) -> str:
    counts = table["match"].value_counts()
    total = len(table)
    other = f" ({counts[OTHER_MODEL]} measured here with another model)" if counts.get(OTHER_MODEL) else ""
    return (f"{counts.get(EXACT, 0)} of {total} chapter figures reproduced exactly, "
            f"{counts.get(WITHIN, 0)} within tolerance, "
            f"{counts.get(NOT_HERE, 0) + counts.get(OTHER_MODEL, 0)} not reproducible here{other}, "
            f"{counts.get(DIFFERS, 0)} differ")
