"""Counts and numbers in the reader's language (issue 46, items 5 and 6).

A message whose words follow a count has a form per plural of its language (``ngettext``: Bulgarian "1 ход",
"2 хода"); the numbers the chapter layer writes in a translated notebook are the language's (Babel's locale data:
"3 431" and "0,002470 $" in Bulgarian where English writes "3,431" and "$0.002470"), with the English digits; a
Hungarian template puts no article or suffix against a value; English is what it was.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from babel.numbers import format_decimal

from harness_lib.chapter import language as lang
from harness_lib.chapter import translations as tr

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = sorted(tr.LANGUAGES)
NB = "\u00a0"
FIELD = re.compile(r"\{[^{}]*\}")


@pytest.fixture
def speaking():
    """``speaking("bg")`` for the test; English again after it."""
    yield lang.speak
    lang.speak("en")


def _catalogue(language: str):
    return tr.read_catalogue(tr.catalogue_path(language, ROOT / "locale", tr.CHAPTER_DOMAIN), language)


def _forms(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


# -- counts --------------------------------------------------------------------------------------------------
def test_a_count_takes_the_form_its_number_asks_for(speaking):
    from harness_lib.chapter.checking import TOOL_RUNS, TURN_COUNT, TURNS, plural

    assert [TURNS.show(n) for n in (0, 1, 2, 21)] == ["0 turns", "1 turn", "2 turns", "21 turns"]
    speaking("bg")
    assert [TURNS.show(n) for n in (0, 1, 2, 21)] == ["0 хода", "1 ход", "2 хода", "21 хода"]
    assert TOOL_RUNS.show(1) == "1 изпълнение на инструмент" and TOOL_RUNS.show(2) == "2 изпълнения на инструменти"
    assert plural(3431, TURN_COUNT) == f"3{NB}431 хода"
    assert lang.ngettext("forecast from the first turn", "forecast from the first {k} turns", 1).format(k=1) \
        == "прогноза от първия ход"
    speaking("hu")
    assert [TURNS.show(n) for n in (1, 2)] == ["1 turn", "2 turn"]   # Hungarian: the noun stays singular


def test_a_count_made_early_is_said_in_the_form_of_its_value(speaking):
    name = lang.Text(lang.NP_("{script}, moved to yours after {n} turn", "{script}, moved to yours after {n} turns"),
                     "n", script="plan", n=1)
    assert name == "plan, moved to yours after 1 turn"
    speaking("bg")
    assert lang._(name) == "plan, преместен към вашия след 1 ход"
    assert lang._(lang.Text(name.template, "n", script="plan", n=2)) == "plan, преместен към вашия след 2 хода"


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_count_message_has_its_forms(language):
    """Both catalogues declare two plurals (``n != 1``), and every count message of the template has both forms
    translated: none left empty for the number that would ask for it."""
    catalog = _catalogue(language)
    assert catalog.num_plurals == 2 and catalog.plural_expr.replace(" ", "") == "(n!=1)"
    counts = [m for m in tr.chapter_template() if isinstance(m.id, tuple)]
    assert len(counts) >= 25
    for message in counts:
        translated = catalog.get(message.id, context=message.context)
        assert translated is not None and isinstance(translated.string, tuple), message.id
        assert len(translated.string) == 2 and all(translated.string), (language, message.id, translated.string)


def test_bulgarian_says_no_count_of_one_in_the_plural():
    """The review's "1 хода" and "1 от 8 случая минават": no Bulgarian message that is not a count message puts a
    count's field before a counted form (хода, случая, реда, съобщения...)."""
    counted = re.compile(r"\{(n|turns|events|extra|passed|yours|expected|k)\b[^{}]*\} (от \{[^{}]*\} )?"
                         r"(хода|случая|реда|съобщения|сметки|заявки|събития|изпълнения)")
    bad = [m.string for m in _catalogue("bg") if m.id and isinstance(m.string, str) and counted.search(m.string)]
    assert not bad, bad[:5]


def test_a_hungarian_template_puts_no_article_or_suffix_against_a_value():
    """"a 50 turnös", "a 5. turn" and "2.58-szerese" (the review): "a" or "az" right before a field reads wrong for
    half the values, and a suffix against a number has to agree with how it is said. "a(z) {turn}." instead."""
    bad = []
    for m in _catalogue("hu"):
        for form in _forms(m.string) if m.id else ():
            text = re.sub(r"`[^`]*`", "", form)
            if re.search(r"(?<![\w(])(a|az|A|Az) \{", text) or re.search(r"\}-?[a-záéíóöőúüű]", text):
                bad.append(form)
    assert not bad, bad[:5]


# -- numbers -------------------------------------------------------------------------------------------------
def test_english_numbers_are_the_chapters(speaking):
    from harness_lib.chapter.checking import COST, IN

    assert (lang.number(3431), lang.number(0.5, 1), lang.dollars(0.00247), lang.dollars(0.038, 3)) == \
        ("3,431", "0.5", "$0.002470", "$0.038")
    assert (IN.show(3431), COST.show(0.00247)) == ("in 3,431", "$0.002470")
    assert type(lang._("{n:,} of {m}")) is str   # English: Python's own str.format, nothing in between


def test_a_bulgarian_check_table_shows_the_bulgarian_number(speaking):
    """The issue's example: "input 3,431" and "$0.002470" beside prose that writes 3 431 and 0,002470."""
    from harness_lib.chapter.checking import COST, IN, TURNS, Case, Ran, Row

    row = Row(Case("runaway, cap 8", "point"), {"in": 3431, "cost_usd": 0.00907, "turns": 8},
              Ran(fields={"in": 3430, "cost_usd": 0.00907, "turns": 8}), ["in"])
    english = row.sides((IN, COST, TURNS))
    assert english == ("input tokens: in 3,431", "input tokens: in 3,430")
    speaking("bg")
    expected, yours = row.sides((IN, COST, TURNS))
    assert expected.endswith(f"3{NB}431") and yours.endswith(f"3{NB}430") and "," not in expected
    assert COST.show(0.00247) == f"0,002470{NB}$"
    assert IN.tell({"in": 3431}, {"in": 1202}).endswith(f"3{NB}431, вашето 1{NB}202")
    speaking("hu")
    assert IN.show(3431) == "input 3431" and IN.show(337299) == f"input 337{NB}299"   # four digits stay whole


@pytest.mark.parametrize("language", ["bg", "hu"])
def test_the_language_s_numbers_are_babel_s(speaking, language):
    """The digits are Python's (the English ones), the signs and grouping Babel's locale data (CLDR), but for
    Hungarian's four-digit numbers, whole (its glossary)."""
    speaking(language)
    for n in (0, 7, 42, 999, 12345, 337299, 1234567, -88649):
        assert lang.number(n) == format_decimal(n, locale=language), n
    for x in ("0.002470", "0.5", "12.25", "88649.125", "1202.5"):
        places = len(x.split(".")[1])
        want = format_decimal(Decimal(x), format="#,##0." + "0" * places, locale=language)
        if language == "hu" and 1000 <= abs(float(x)) < 10000:
            want = want.replace(NB, "")
        assert lang.number(float(x), places) == want, x
    assert lang.number(3431) == (f"3{NB}431" if language == "bg" else "3431")


def test_a_template_writes_its_numbers_the_language_s_way_and_keeps_its_widths(speaking):
    template = "cap {cap:>3}: input tokens {tokens:>9,}   cost ${usd:.6f}"
    english = template.format(cap=8, tokens=3431, usd=0.00907)
    speaking("bg")
    said = lang._(template).format(cap=8, tokens=3431, usd=0.00907)
    assert said == f"лимит   8: input tokens     3{NB}431   цена 0,009070{NB}$"
    assert f"{'3' + NB + '431':>9}" in said and f"{'3,431':>9}" in english   # the same width as in English
    assert lang._("{ms:,.0f} ms").format(ms=1202.4) == f"1{NB}202 ms"
    assert lang._("{x!r} {s} {p:.1%}").format(x=0.5, s="1.5", p=0.125) == "0.5 1.5 12,5%"   # repr and text as they are


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_translation_writes_a_number_the_english_way(language):
    """A dollar sign before its amount, a decimal point, or an English thousands comma in a translation's own words
    (code, the chapter's printed lines and Python's float arithmetic aside)."""
    bad = []
    for m in _catalogue(language):
        for form in _forms(m.string) if m.id else ():
            text = re.sub(r"`[^`]*`|\([^()]*0\.0006839999999999999[^()]*\)", "", form)
            if (re.search(r"\$\{|\$\d", text) or re.search(r"(?<![\w.])\d+\.\d+(?![\w.])", text)
                    or re.search(r"(?<![\w.,])[1-9]\d{0,2},\d{3}(?![\w,])", text)):
                bad.append(form)
    assert not bad, bad[:5]


def test_a_bulgarian_table_and_plot_write_decimal_commas(speaking):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from harness_lib.chapter.params import table
    from harness_lib.chapter.plots import _figure, dollar_ticks, localize_ticks

    df = pd.DataFrame({"turns": [8, 100], "cost_usd": [0.00907, 0.702198]}, index=pd.Index([8, 100], name="cap"))
    english_html, english_text = table(df)._repr_html_(), repr(table(df))
    assert "0.009070" in english_html and "0.009070" in english_text
    speaking("bg")
    assert "0,009070" in table(df)._repr_html_() and "0,009070" in repr(table(df))
    fig, (ax,) = _figure()
    ax.plot([0, 1], [0.0, 0.5])
    ax.yaxis.set_major_formatter(dollar_ticks(2))
    localize_ticks(fig)
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    xs = [t.get_text() for t in ax.get_xticklabels()]
    ys = [t.get_text() for t in ax.get_yticklabels()]
    assert "0,4" in xs and f"0,40{NB}$" in ys and not any("." in t for t in xs + ys), (xs, ys)


def test_the_comparison_with_the_chapter_shows_its_figures_the_language_s_way(speaking):
    from harness_lib.chapter.figures import compare, shown

    measured = {"cap.cost20": 0.038038, "cap.in8": 3431}
    table = compare(measured, section="02-turn-cap")
    speaking("bg")
    out = shown(table)
    chapter, ours = out.columns[1], out.columns[2]
    assert "0,038" in set(out[chapter]) and "0,038" in set(out[ours]) and "3431" in set(out[ours])
    assert set(table["chapter"]) >= {"0.038", "3431"}   # compared as the chapter wrote them


def test_a_dataframe_a_translated_notebook_shows_is_pandas_own_with_the_decimal_comma(speaking):
    """What the notebook's own code shows (a DataFrame as the last line of a cell): pandas' text and HTML, but for the
    decimal sign."""

    class Printer:
        def text(self, text):
            self.said = text

    df = pd.DataFrame({"turns": [8, 100], "cost_usd": [0.00907, 0.702198]}, index=pd.Index([8, 100], name="cap"))
    english_html, english_text = df._repr_html_(), repr(df)
    speaking("bg")
    printer = Printer()
    lang._frame_text(df, printer, False)
    html = lang._frame_html(df)
    assert "0,009070" in html and "0,009070" in printer.said
    assert html.replace(",", ".") == english_html.replace(",", ".") and printer.said.replace(",", ".") == english_text
