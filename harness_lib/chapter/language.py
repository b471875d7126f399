"""The language the chapter layer speaks: what the notebooks print and plot, in English, Bulgarian or Hungarian.

A translated notebook's setup cell says ``speak("bg")`` (the translations' build puts it there); the English
notebooks say nothing and stay English. Every human-facing string of the chapter layer is a message of the gettext
catalogue ``locale/LANG/LC_MESSAGES/chapter.po`` (its template ``locale/chapter.pot``, extracted from the code
with Babel by ``make translations``):

* ``_("...")`` translates now, for text made where it is shown (a table's header, a plot's title, an error);
* ``N_("...")`` only marks a message, for text made before a language is chosen (a module's constants: a case's
  point, a hint); where such text is shown it goes through ``_()``;
* ``Text(N_("... {n} ..."), n=...)`` is a message with values, made early and translated where it is shown,
  by ``_()`` as well.

A message with values is a ``str.format`` template (``"{n:,} of {m} cases pass"``); a translation keeps its
fields. What stays English, and why, is in docs/translating.md: names in the code, status values, tool and
scenario names, and the lines the chapter itself prints (its run lines and traces).

The catalogue is read with Babel and compiled in memory (no ``.mo`` file to keep in step); a language without a
catalogue, or a message without a translation, is English.
"""

from __future__ import annotations

import gettext
import io
import re
from pathlib import Path

DOMAIN = "chapter"
LANGUAGES = ("en", "bg", "hu")
_translations: gettext.NullTranslations = gettext.NullTranslations()
_language = "en"


def locale_folder() -> Path:
    """``locale/`` beside the package in a source tree (a checkout, an editable install), or the installed
    package's own copy (pyproject.toml maps it there when a wheel is built)."""
    package = Path(__file__).resolve().parent.parent
    source = package.parent / "locale"
    return source if source.is_dir() else package / "locale"


def catalogue_path(language: str) -> Path:
    return locale_folder() / language / "LC_MESSAGES" / f"{DOMAIN}.po"


class LanguageError(ValueError):
    """A language the chapter layer cannot speak: one line in a notebook, no traceback."""

    def _render_traceback_(self):
        return [f"LanguageError: {self}"]


_FIELD = re.compile(r"\{[^{}]*\}")
# A line of a catalogue that is not a comment: a keyword and a quoted string, or a quoted string that continues one.
PO_LINE = re.compile(r'(#~ ?)?((msgctxt|msgid|msgid_plural|msgstr(\[\d+\])?) )?"(\\.|[^"\\])*"')


def broken_line(text: str) -> tuple[int, str] | None:
    """The first line of a catalogue's ``text`` that is neither a comment nor a quoted string (Babel's reader lets an
    unquoted msgstr through, and a later write would keep the damage): (its number, the line), or None."""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not (line.startswith("#") and not line.startswith("#~")) and not PO_LINE.fullmatch(line):
            return number, line
    return None


def _load(language: str) -> gettext.NullTranslations:
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import PoFileError, read_po

    path = catalogue_path(language)
    if not path.is_file():
        raise LanguageError(f"no catalogue for {language!r} at {path}: restore it (git checkout -- locale)")
    try:
        text = path.read_text(encoding="utf-8")
        broken = broken_line(text)
        if broken:
            raise ValueError(f"line {broken[0]} is not a catalogue line: {broken[1][:50]!r}")
        catalog = read_po(io.StringIO(text), locale=language, domain=DOMAIN, abort_invalid=True)
    except (OSError, PoFileError, ValueError, UnicodeDecodeError) as e:
        raise LanguageError(f"{path} cannot be read ({e}): restore it (git checkout -- locale) or mend it by "
                            "hand") from None
    for message in catalog:   # a fuzzy translation is for English that changed: the English is right, not it;
        # and one that lost a value's field, or gained one, would fail where it is shown: the English instead
        if message.fuzzy or (isinstance(message.string, str)
                             and sorted(_FIELD.findall(message.string)) != sorted(_FIELD.findall(message.id))):
            message.string = "" if isinstance(message.string, str) else ("",) * len(message.string)
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


def speak(language: str) -> str:
    """Choose the language of what the chapter layer prints and plots, for this kernel: ``"en"``, ``"bg"`` or
    ``"hu"``. Returns it."""
    global _translations, _language
    if language not in LANGUAGES:
        raise LanguageError(f"the chapter layer speaks {', '.join(LANGUAGES)}, not {language!r}")
    _translations = gettext.NullTranslations() if language == "en" else _load(language)
    _language = language
    return language


def spoken() -> str:
    """The language chosen (``"en"`` until ``speak`` is called)."""
    return _language


class Text(str):
    """A message with values, made before the language is known: reads as its English (so it can be a key, and
    compared), and ``_()`` gives it in the language spoken when it is shown."""

    def __new__(cls, template: str, **values):
        made = super().__new__(cls, template.format(**values))
        made.template, made.values = template, values
        return made

    def __reduce__(self):
        return (_rebuild, (self.template, self.values))


def _rebuild(template: str, values: dict) -> Text:
    return Text(template, **values)


def _(message: str) -> str:
    """``message`` in the language spoken: a ``Text`` with its values filled in again, a plain string as it is
    when the catalogue has no translation for it."""
    if isinstance(message, Text):
        values = {k: _(v) if isinstance(v, Text) else v for k, v in message.values.items()}
        return _translations.gettext(message.template).format(**values)
    return _translations.gettext(message) if message else message


def N_(message: str) -> str:
    """Marks ``message`` for the catalogue and returns it unchanged: it is translated where it is shown."""
    return message


def C_(context: str, message: str) -> str:
    """Marks ``message`` for the catalogue under ``context`` (the same English meaning two things: "turns" counted,
    "3 turns", and "turns" naming a field) and returns it unchanged; ``in_context`` translates it."""
    return message


def in_context(context: str, message: str) -> str:
    """``message`` in the language spoken, as the catalogue translates it under ``context`` (else as ``_``)."""
    translated = _translations.pgettext(context, message)
    return translated if translated != message else _(message)
