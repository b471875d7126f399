"""What the Bulgarian and Hungarian notebooks print and plot is in their language (issue 35).

The chapter layer's human-facing strings are messages of ``locale/chapter.pot`` (harness_lib.chapter.language);
each language's ``chapter.po`` translates every one of them, and a translated notebook, whose setup cell says
``speak("bg")``, is executed in that language. Here: the catalogues are complete and current, a translation
keeps every value and piece of code of its English, the committed translated notebooks show no message of the
catalogue in English (but those the keep-list of docs/translating.md leaves English), and a reader who types a bad
parameter into a Bulgarian notebook is told so in Bulgarian.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from harness_lib.chapter import language as lang
from harness_lib.chapter import translations as tr

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = sorted(tr.LANGUAGES)
PLACEHOLDER = re.compile(r"\{[^{}]*\}")
CODE = re.compile(r"`[^`]*`")


def _catalogue(language: str):
    return tr.read_catalogue(tr.catalogue_path(language, ROOT / "locale", tr.CHAPTER_DOMAIN), language)


def test_the_template_is_what_the_code_marks():
    """A message marked in the code and missing from locale/chapter.pot (or one left there after the code dropped
    it) means `make translations` was not run."""
    pot = tr.read_catalogue(ROOT / "locale" / f"{tr.CHAPTER_DOMAIN}.pot")
    marked = {m.id for m in tr.chapter_template() if m.id}
    kept = {m.id for m in pot if m.id}
    assert marked == kept, (f"run `make translations`: {len(marked - kept)} messages not extracted yet "
                            f"({sorted(marked - kept)[:3]}), {len(kept - marked)} no longer in the code")


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_message_is_translated_and_none_is_fuzzy(language):
    catalog = _catalogue(language)
    assert {m.id for m in catalog if m.id} == {m.id for m in tr.chapter_template() if m.id}, \
        "run `make translations`: the catalogue is behind the code"
    fuzzy = [m.id for m in catalog if m.id and m.fuzzy]
    empty = [m.id for m in catalog if m.id and not m.string]
    assert not fuzzy, f"{len(fuzzy)} fuzzy in locale/{language}/LC_MESSAGES/chapter.po, e.g. {fuzzy[0]!r}"
    assert not empty, f"{len(empty)} untranslated in locale/{language}/LC_MESSAGES/chapter.po, e.g. {empty[0]!r}"


def _forms(value) -> tuple[str, ...]:
    """A message's id or string as its forms: one, or a count's (``ngettext``: singular, plural)."""
    return (value,) if isinstance(value, str) else tuple(value)


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_translation_keeps_every_value_and_piece_of_code(language):
    """Every form keeps the English's fields and code; a count's form for one may leave its count out ("the first
    turn"), never a field the English plural lacks."""
    problems = []
    for m in _catalogue(language):
        if not m.id or not all(_forms(m.string)):
            continue
        english = _forms(m.id)[-1]   # the plural's English has every field (the singular may say "one")
        for n, form in enumerate(_forms(m.string)):
            plural_one = isinstance(m.id, tuple) and n == 0 and len(_forms(m.string)) > 1
            for piece in PLACEHOLDER.findall(english) + CODE.findall(english):
                if piece not in form and not (plural_one and piece.startswith("{")):
                    problems.append(f"{m.id!r}: {piece} missing from {form!r}")
            fields = {p.strip("{}").split(":")[0].split("!")[0]: 0 for p in PLACEHOLDER.findall(english)}
            try:
                english.format(**fields)
            except (KeyError, IndexError, ValueError):
                continue   # braces of code in a hint (`{'type': ...}`), never formatted: kept above, piece by piece
            try:
                form.format(**fields)
            except (KeyError, IndexError, ValueError) as e:
                problems.append(f"{m.id!r}: the translation is not a template of the same fields ({e!r})")
    assert not problems, "\n".join(problems[:10])


def test_speak_chooses_a_language_and_english_is_the_default():
    try:
        assert lang.spoken() == "en" and lang._("{passed} of {total} cases pass") == "{passed} of {total} cases pass"
        lang.speak("bg")
        assert lang._("{passed} of {total} cases pass") != "{passed} of {total} cases pass"
        text = lang.Text("{passed} of {total} cases pass", passed=3, total=4)
        assert text == "3 of 4 cases pass" and "3" in lang._(text) and "4" in lang._(text)
        assert lang._(text) != "3 of 4 cases pass"
        with pytest.raises(ValueError, match="speaks en, bg, hu, not 'de'"):
            lang.speak("de")
        assert lang.spoken() == "bg"   # a refused language changes nothing
    finally:
        lang.speak("en")
    assert lang._("{passed} of {total} cases pass") == "{passed} of {total} cases pass"


def _literal_parts(message: str) -> list[str]:
    """The pieces of a message between its placeholders long enough to be unmistakably it (a word such as
    "case" or "run" is also a name in the code and in the chapter's own lines)."""
    return [part.strip() for part in PLACEHOLDER.split(message) if len(part.strip()) >= 16 and " " in part.strip()]


def _shown(nb) -> str:
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            data = output.get("data", {})
            texts += [data.get("text/plain", ""), data.get("text/html", ""), data.get("text/markdown", "")]
            texts += output.get("traceback", []) + [output.get("evalue", "")]
    return "\n".join(t if isinstance(t, str) else "".join(t) for t in texts)


# Messages a translated notebook may still show in English, and why (docs/translating.md's keep-list).
KEEP = {
    # section 15's parts of a prompt: columns its functions read from one another's tables (the plot translates them)
    "tool schemas", "the task", "old assistant turns", "old tool results",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_message_of_the_catalogue_is_shown_in_english_in_a_translated_notebook(language):
    catalog = _catalogue(language)
    # a label (context "label") is translated where a table shows it; a line the notebook's own code prints with it
    # is that code's (tests/test_english_share.py measures those)
    english = [(form, m) for m in catalog if m.id and all(_forms(m.string)) and m.string != m.id
               and m.id not in KEEP and m.context != lang.LABEL for form in _forms(m.id)]
    problems = []
    for path in sorted((ROOT / "notebooks" / language).rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        shown = _shown(nb)
        # what the notebook's own code says (its labels, its f-strings, the library's source it shows) is its code,
        # the same in every language: a catalogue message that happens to contain it is not what printed it
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code") + "".join(
            _shown(nbformat.v4.new_notebook(cells=[c])) for c in nb.cells
            if c.cell_type == "code" and "show_source(" in c.source)
        for message, translated in english:
            parts = [p for p in _literal_parts(message)
                     if all(p not in form for form in _forms(translated.string)) and p.strip(",.;: ") not in code]
            hit = next((p for p in parts if p in shown), None)
            if hit:
                problems.append(f"{path.relative_to(ROOT)}: {hit!r} (of {message!r})")
    assert not problems, f"{len(problems)} English messages shown:\n" + "\n".join(problems[:15])


@pytest.mark.slow
def test_a_bad_parameter_in_a_bulgarian_notebook_is_said_in_bulgarian(tmp_path):
    path = ROOT / "notebooks" / "bg" / "03-budget.ipynb"
    nb = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("BUDGETS = 'a lot'", metadata={"tags": ["injected-parameters"]}))
    nb.cells = nb.cells[:at + 4]   # the parameters, the reader's value, the setup cell that checks it, one more
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors, "the bad value was taken"
    line = errors[0].traceback
    assert len(line) == 1 and line[0].startswith("ParameterError: BUDGETS приема "), line
    assert line[0].endswith("получи 'a lot'") and re.search("[а-я]{4}", line[0].split("приема", 1)[1]), line


def test_make_chapter_runs_the_languages_asked_for_besides_english():
    from harness_lib.chapter.report import ChapterError, chapter_languages

    assert chapter_languages("") == () and chapter_languages("en") == ()
    assert chapter_languages("bg") == ("bg",) and chapter_languages("hu, bg hu") == ("hu", "bg")
    with pytest.raises(ChapterError, match="LANGUAGES=bg de: the notebooks are in en, bg, hu; not de"):
        chapter_languages("bg de")


def test_a_field_and_a_count_of_the_same_english_are_two_messages():
    """"turns" names a field ("turns: expected 3, yours 4") and counts ("3 turns"): Bulgarian says them apart."""
    from harness_lib.chapter.checking import TURNS

    try:
        lang.speak("bg")
        assert TURNS.show(3) == "3 хода" and TURNS.show(1) == "1 ход"   # counted: the count's forms (ngettext)
        assert TURNS.tell({"turns": 3}, {"turns": 4}).startswith("ходове:")            # named
    finally:
        lang.speak("en")
    assert TURNS.tell({"turns": 3}, {"turns": 4}) == "turns: expected 3, yours 4"


def test_a_broken_catalogue_or_translation_is_one_line_or_the_english(tmp_path, monkeypatch):
    """A hand-edited chapter.po: unreadable, one line naming it; a translation that lost a value's field, its English
    (not a KeyError where it is shown); a language it does not know, one line."""
    po = tmp_path / "bg" / "LC_MESSAGES" / "chapter.po"
    po.parent.mkdir(parents=True)
    text = (ROOT / "locale" / "bg" / "LC_MESSAGES" / "chapter.po").read_text(encoding="utf-8")
    monkeypatch.setattr(lang, "locale_folder", lambda: tmp_path)
    try:
        po.write_text(text.replace('msgstr "минаващи случаи: {passed} от {total}"',
                                   'msgstr "минаващи случаи: {passed} от {all}"', 1), encoding="utf-8")
        assert "{all}" in po.read_text(encoding="utf-8")
        lang.speak("bg")
        assert lang._("{passed} of {total} cases pass").format(passed=1, total=2) == "1 of 2 cases pass"
        assert lang._("case") != "case"   # the rest of the catalogue is read as it is
        po.write_text(text.replace('msgstr "минаващи', 'msgstr минаващи', 1), encoding="utf-8")   # a quote lost
        with pytest.raises(lang.LanguageError) as info:
            lang.speak("bg")
        assert info.value._render_traceback_()[0].startswith(f"LanguageError: {po} cannot be read")
        po.unlink()
        with pytest.raises(lang.LanguageError, match="no catalogue for 'bg'"):
            lang.speak("bg")
    finally:
        lang.speak("en")


def test_a_table_shows_its_labels_in_the_language_and_keeps_them_english_in_its_data():
    """A row's or a column's label the code reads by name (a run, a case, a column of a section's table) stays
    English in the data and is shown in the language (``language.labelled``, context ``label``)."""
    import pandas as pd

    from harness_lib.chapter.params import table

    frame = pd.DataFrame({"status": ["completed"], "what the model read": ["x"]},
                         index=pd.Index(["the loop above"], name="run"))
    assert "the loop above" in table(frame)._repr_html_()
    try:
        lang.speak("bg")
        shown = table(frame)._repr_html_() + repr(table(frame))
        assert "цикълът по-горе" in shown and "какво прочете model" in shown and "the loop above" not in shown
        assert list(frame.index) == ["the loop above"] and "what the model read" in frame.columns   # the data
        assert lang.label("completed") == "completed"   # a value of the code, no label: as it is
    finally:
        lang.speak("en")
    assert lang.labelled(frame) is frame


def test_a_figure_measured_with_no_chapter_value_is_labelled_in_the_language():
    """A figure's label made from a template (a budget the chapter did not print, a figure under other parameters)
    is shown translated, its amount the language's way; the comparison's data keeps the English."""
    from harness_lib.chapter import figures

    measured = {"budget $0.005, no cap: spent": "0.006034",
                **figures.relabel({"resume.restored_turns": 2}, "never killed")}
    comparison = figures.compare(measured)
    assert "budget $0.005, no cap: spent" in set(comparison.figure)
    try:
        lang.speak("bg")
        shown = list(figures.shown(comparison).iloc[:, 0])
        assert "бюджет 0,005\u00a0$, без лимит: похарчено" in shown, shown
        assert any(s.endswith("(не е убивано)") for s in shown), shown
        assert figures.said("not a label of ours (x)") == "not a label of ours (x)"
        assert "budget $0.005, no cap: spent" in set(comparison.figure)   # the data
    finally:
        lang.speak("en")
    assert figures.said("budget $0.005, no cap: spent") == "budget $0.005, no cap: spent"
