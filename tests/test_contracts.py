"""Every contract where the reader writes (issue 44): each key, status word and message field a check compares is
named in the exercise notebook, in every language, before the reader needs it.

A check module says which words its cases compare (``CONTRACT``); what its pieces must return (``KEYS``) is among
them. Each word must stand in the exercise notebook as code or as a string (`` `tool_runs` ``, ``"tool_runs"``,
``'tool_runs'``): a plain English word in the prose ("in", "all") would not tell a reader the key. The translated
exercises keep the inline code of the English (``tests/test_translations.py``), so the words are looked for there
too. And the cell that states them comes before the first cell the reader writes in."""

from __future__ import annotations

import importlib
import keyword
import re
from pathlib import Path

import nbformat
import pytest
from checked import stems_with_checks

ROOT = Path(__file__).resolve().parents[1] / "notebooks"
MODULES = {stem: ("harness_lib.chapter.s16_your_harness" if stem == "16-your-harness" else
                  f"harness_lib.chapter.checks.s{stem[:2]}_{stem[3:].replace('-', '_')}")
           for stem in stems_with_checks()}
HEADINGS = ("**What the check reads.**", "**What the capstone reads.**")


def contract(stem: str) -> tuple[str, ...]:
    return importlib.import_module(MODULES[stem]).CONTRACT


def text(path: Path) -> str:
    """The notebook as code: its code cells, and the inline code and quoted strings of its markdown."""
    cells = nbformat.read(path, as_version=4).cells
    spans = [span for c in cells if c.cell_type == "markdown" for span in re.findall(r"`[^`]+`|\"[^\"\n]*\"", c.source)]
    return "\n".join([c.source for c in cells if c.cell_type == "code"] + spans)


def named(word: str, where: str) -> bool:
    """``word`` as a token of code (``tool_runs``), not inside a longer name; a word Python itself uses (``in``) only
    as a string or alone in backticks, never as the keyword of a loop."""
    if keyword.iskeyword(word):
        return re.search(rf"[`'\"]{re.escape(word)}[`'\"]", where) is not None
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", where) is not None


@pytest.mark.parametrize("stem", sorted(MODULES))
def test_a_checks_contract_holds_what_its_pieces_must_return(stem):
    module = importlib.import_module(MODULES[stem])
    assert set(getattr(module, "KEYS", ())) <= set(contract(stem)), "a key the check reads is not in its CONTRACT"


@pytest.mark.parametrize("language", ["", "bg", "hu"], ids=["en", "bg", "hu"])
@pytest.mark.parametrize("stem", sorted(MODULES))
def test_every_word_a_check_compares_is_named_in_its_exercise(stem, language):
    path = ROOT / language / "exercises" / f"{stem}.ipynb"
    missing = [word for word in contract(stem) if not named(word, text(path))]
    assert not missing, f"{path.relative_to(ROOT.parent)} never names {missing}: say them where the reader writes"


@pytest.mark.parametrize("stem", sorted(MODULES))
def test_the_contract_comes_before_the_first_cell_the_reader_writes(stem):
    cells = nbformat.read(ROOT / "exercises" / f"{stem}.ipynb", as_version=4).cells
    first = next(i for i, cell in enumerate(cells) if "build" in cell.metadata.get("tags", []))
    said = [i for i, cell in enumerate(cells) if cell.cell_type == "markdown" and cell.source.startswith(HEADINGS)]
    assert said and said[0] < first
