"""The mistakes a learner plausibly makes in each exercise, written out, one module a section notebook
(``m02_turn_cap.py``: ``MISTAKES``, for ``02-turn-cap``). Each is the reference's source (the section notebook's
build cells) with a few pieces replaced, each ``old`` by its ``new``, and the words its check's hint must contain.
``tests/test_checks.py`` applies each to the reference, runs the notebook's check cell on it, and requires a failing
case and that hint; each ``old`` must appear exactly once in the build cells, so a mistake cannot go stale silently
when a notebook changes."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    what: str                          # the mistake, as a learner would make it
    edits: tuple[tuple[str, str], ...]  # (old, new), applied in order
    hint: str                          # words the check's last line must contain


def mistake(what: str, *edits: tuple[str, str], hint: str) -> Mistake:
    return Mistake(what, edits, hint)


def every() -> dict[str, tuple[Mistake, ...]]:
    """{notebook stem: its mistakes}, from every module of this package (``m02_turn_cap`` -> ``02-turn-cap``)."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("m") and info.name[1:3].isdigit():
            stem = info.name[1:].replace("_", "-", 1).replace("_", "-")
            found[stem] = importlib.import_module(f"{__name__}.{info.name}").MISTAKES
    return dict(sorted(found.items()))
