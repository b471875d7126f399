"""The language the chapter layer speaks: what the notebooks print and plot, in English, Bulgarian or Hungarian.

A translated notebook's setup cell says ``speak("bg")`` (the translations' build puts it there); the English
notebooks say nothing and stay English. Every human-facing string of the chapter layer is a message of the gettext
catalogue ``locale/LANG/LC_MESSAGES/chapter.po`` (its template ``locale/chapter.pot``, extracted from the code
with Babel by ``make translations``):

* ``_("...")`` translates now, for text made where it is shown (a table's header, a plot's title, an error);
* ``N_("...")`` only marks a message, for text made before a language is chosen (a module's constants: a case's
  point, a hint); where such text is shown it goes through ``_()``;
* ``Text(N_("... {n} ..."), n=...)`` is a message with values, made early and translated where it is shown,
  by ``_()`` as well;
* ``ngettext("{n} turn", "{n} turns", n)`` is a message whose words follow a count: the catalogue gives each
  language its forms (Bulgarian "1 ход", "2 хода"), chosen by ``n`` (``npgettext`` the same under a context;
  ``NP_`` marks such a pair for ``plural``).

A message with values is a ``str.format`` template (``"{n:,} of {m} cases pass"``); a translation keeps its
fields. What stays English, and why, is in docs/translating.md: names in the code, status values, tool and
scenario names, and the lines the chapter itself prints (its run lines and traces).

Numbers are written the reader's way (``number``, ``dollars``; a template's numeric fields, ``{n:,}``,
``{usd:.6f}``, through ``_()``): the digits are Python's, as the English prints them, and the symbols the
language's, from Babel's locale data (CLDR): Bulgarian 3 431 and 0,5; Hungarian 3431, 337 299 and 0,5 (four
digits stay whole, as the Hungarian glossary writes them); a dollar amount as the locale writes a currency, the
sign after the amount: 0,002470 $. English is untouched: 3,431 and $0.002470, the chapter's figures.

The catalogue is read with Babel and compiled in memory (no ``.mo`` file to keep in step); a language without a
catalogue, or a message without a translation, is English.
"""

from __future__ import annotations

import functools
import gettext
import io
import numbers
import re
import string
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
        # and one that lost a value's field, or gained one, would fail where it is shown: the English instead (a
        # count's form may leave its count out, "the first turn", but never brings a field its English lacks)
        if message.fuzzy or (isinstance(message.string, str)
                             and sorted(_FIELD.findall(message.string)) != sorted(_FIELD.findall(message.id))) or (
                not isinstance(message.string, str) and any(
                    not set(_FIELD.findall(form)) <= set(_FIELD.findall(" ".join(message.id)))
                    for form in message.string)):
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
    _symbols.cache_clear()
    _tables()
    return language


def _tables() -> None:
    """In a notebook's kernel, every DataFrame it shows written with the decimal sign of the language spoken (pandas'
    own text and HTML, ``decimal=``) and its labels in that language (``labelled``); English: pandas' own."""
    try:
        from IPython import get_ipython
    except ImportError:   # outside IPython nothing is displayed
        return
    shell = get_ipython()
    if shell is None:
        return
    import pandas as pd

    formatters = shell.display_formatter.formatters
    for mime, show in (("text/plain", _frame_text), ("text/html", _frame_html)):
        if _language == "en":
            formatters[mime].pop(pd.DataFrame, None)
        else:
            formatters[mime].for_type(pd.DataFrame, show)


def _frame_text(frame, printer, cycle) -> None:
    from pandas.io.formats.format import get_dataframe_repr_params

    frame = labelled(frame)
    printer.text(repr(frame) if frame._info_repr() else
                 frame.to_string(decimal=decimal_sign(), **get_dataframe_repr_params()))


def _frame_html(frame) -> str | None:
    """pandas' ``DataFrame._repr_html_``, with the language's decimal sign and labels (``labelled``)."""
    from pandas import get_option
    from pandas.io.formats import format as fmt

    frame = labelled(frame)
    if frame._info_repr() or not get_option("display.notebook_repr_html"):
        return frame._repr_html_()
    formatter = fmt.DataFrameFormatter(
        frame, na_rep="NaN", float_format=get_option("display.float_format"), index_names=True, header=True,
        index=True, bold_rows=True, escape=True, max_rows=get_option("display.max_rows"),
        min_rows=get_option("display.min_rows"), max_cols=get_option("display.max_columns"),
        show_dimensions=get_option("display.show_dimensions"), decimal=decimal_sign())
    return fmt.DataFrameRenderer(formatter).to_html(notebook=True)


def spoken() -> str:
    """The language chosen (``"en"`` until ``speak`` is called)."""
    return _language


class Text(str):
    """A message with values, made before the language is known: reads as its English (so it can be a key, and
    compared), and ``_()`` gives it in the language spoken when it is shown. ``template`` may be a pair made by
    ``NP_`` (singular, plural): the form is chosen by the value named ``count``."""

    def __new__(cls, template, count: str | None = None, **values):
        english = template if isinstance(template, str) else template[values[count] != 1]
        made = super().__new__(cls, english.format(**values))
        made.template, made.values, made.count = template, values, count
        return made

    def __reduce__(self):
        return (_rebuild, (self.template, self.values, self.count))


def _rebuild(template, values: dict, count: str | None = None) -> Text:
    return Text(template, count, **values)


def _(message: str) -> str:
    """``message`` in the language spoken: a ``Text`` with its values filled in again, a plain string as it is
    when the catalogue has no translation for it. In a language other than English what it gives writes the
    numbers of its ``format`` the language's way (``Said``)."""
    if isinstance(message, Text):
        values = {k: _(v) if isinstance(v, Text) else v for k, v in message.values.items()}
        if isinstance(message.template, str):
            template = _translations.gettext(message.template)
        else:
            template = _translations.ngettext(*message.template, _count_of(values[message.count]))
        return _said(template).format(**values)
    return _said(_translations.gettext(message)) if message else message


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
    return _said(translated) if translated != message else _(message)


# -- a table's labels -----------------------------------------------------------------------------------------
LABEL = "label"   # the context of a row's or a column's label (``C_("label", ...)``): translated only where shown


def label(text):
    """A row's or a column's label as a table shows it in the language spoken: its translation under the context
    ``label`` (where the code names it, ``C_("label", "baseline (one read)")``), else as it is. The data keeps the
    English: the notebooks and the sections' functions read a table by its labels."""
    if _language == "en" or not isinstance(text, str):
        return text
    return _said(_translations.pgettext(LABEL, text))


def labelled(frame):
    """A copy of the DataFrame ``frame`` with its row and column labels, and their names, as ``label`` shows them
    (English: ``frame`` itself)."""
    if _language == "en":
        return frame
    out = frame.rename(index=label, columns=label)
    out.index = out.index.set_names([label(n) for n in out.index.names])
    out.columns = out.columns.set_names([label(n) for n in out.columns.names])
    return out


# -- counts: a message whose words follow a number ----------------------------------------------------------
def ngettext(singular: str, plural: str, n) -> str:
    """The template for the count ``n`` in the language spoken: English ``singular`` for 1, ``plural`` otherwise;
    a translated language by its catalogue's plural forms (Bulgarian "{n} ход" for 1, "{n} хода" for 2 or more).
    Fill it with ``.format`` (numbers the language's way, as ``_``)."""
    return _said(_translations.ngettext(singular, plural, _count_of(n)))


def npgettext(context: str, singular: str, plural: str, n) -> str:
    """``ngettext`` under ``context``."""
    return _said(_translations.npgettext(context, singular, plural, _count_of(n)))


def NP_(singular: str, plural: str) -> tuple[str, str]:
    """Marks a pair of messages, one a count, for the catalogue (a module's constant: ``plural(n, NP_(...))``, or a
    ``Text`` made early); returns it unchanged."""
    return (singular, plural)


def _count_of(n) -> int:
    """A count as the plural rules read it: a whole number (a float's integral part; anything else is "many")."""
    try:
        return abs(int(n))
    except (TypeError, ValueError, OverflowError):
        return 2


# -- numbers in the reader's language ----------------------------------------------------------------------
# Hungarian leaves a four-digit number whole (3431) and groups from five digits (33 957), as the Hungarian glossary
# and the Hungarian style books write it; Bulgarian groups from four (3 431), as Babel's Bulgarian patterns do.
GROUPED_FROM = {"hu": 5}
_NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?")
_SPEC = re.compile(r"(?P<align>(?:.?[<>=^])?)(?P<sign>[-+ ]?)(?P<z>z?)(?P<alt>#?)(?P<zero>0?)(?P<width>\d*)"
                   r"(?P<rest>[,_]?(?:\.\d+)?[eEfFgG%d]?)")


@functools.lru_cache(maxsize=None)
def _symbols() -> tuple[str, str, str, str]:
    """(group, decimal, before, after) in the language spoken, from Babel's locale data: the thousands separator, the
    decimal sign, and what stands before and after an amount of dollars (the locale's currency pattern, ``$`` for
    its sign)."""
    from babel import Locale
    from babel.numbers import get_decimal_symbol, get_group_symbol

    locale = Locale.parse(_language)
    pattern = locale.currency_formats["standard"]
    return (get_group_symbol(locale), get_decimal_symbol(locale), pattern.prefix[0].replace("¤", "$"),
            pattern.suffix[0].replace("¤", "$"))


def localized(text: str) -> str:
    """``text``, a number as Python writes it in English (``3,431``, ``0.002470``, ``-1,202.5``, ``12.5%``), with
    the symbols of the language spoken: the same digits, the same grouping or none, the language's signs."""
    if _language == "en":
        return text
    group, decimal, _before, _after = _symbols()

    def one(match: re.Match) -> str:
        whole, fraction = match.group(1), match.group(2)
        digits = whole.replace(",", "")
        if "," in whole and len(digits) >= GROUPED_FROM.get(_language, 4):
            whole = whole.replace(",", group)
        else:
            whole = digits
        return whole + (decimal + fraction if fraction is not None else "")

    return _NUMBER.sub(one, text)


def decimal_sign() -> str:
    """The decimal sign of the language spoken: ``.`` in English, ``,`` in Bulgarian and Hungarian."""
    return "." if _language == "en" else _symbols()[1]


def is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(value, places: int | None = None, grouped: bool = True) -> str:
    """A number as the language spoken writes it: ``3,431`` in English, ``3 431`` in Bulgarian, ``3431`` in
    Hungarian; with ``places`` decimals (``0.5`` / ``0,5``). Anything that is not a number, as ``repr``."""
    if not is_number(value):
        return repr(value)
    spec = ("," if grouped else "") + (f".{places}f" if places is not None else "")
    return localized(format(value, spec))


def dollars(value, places: int = 6) -> str:
    """An amount of dollars as the language spoken writes it: ``$0.002470`` in English, ``0,002470 $`` in Bulgarian
    and Hungarian (Babel's currency pattern, with the chapter's ``$`` for its sign). Not a number: ``repr``."""
    if not is_number(value):
        return repr(value)
    if _language == "en":
        return f"${value:.{places}f}"
    _group, _decimal, before, after = _symbols()
    amount = number(abs(value), places)
    return ("-" if value < 0 else "") + before + amount + after


class _Formatter(string.Formatter):
    """``str.format`` with a number's field written the language's way (``localized``): ``{n:,}`` 3 431,
    ``{usd:.6f}`` 0,002470, ``{x:>9,}`` the same width."""

    def format_field(self, value, spec: str) -> str:
        if not is_number(value):
            return format(value, spec)
        if isinstance(value, numbers.Integral) and not isinstance(value, int):
            value = int(value)   # numpy's integers, as Python's
        parts = _SPEC.fullmatch(spec)
        if parts is None or parts["zero"]:
            return localized(format(value, spec))
        text = localized(format(value, parts["sign"] + parts["z"] + parts["alt"] + parts["rest"]))
        if not parts["width"]:
            return text
        align = parts["align"] or ">"
        return format(text, align[:-1] + align[-1].replace("=", ">") + parts["width"])


_FORMATTER = _Formatter()


class Said(str):
    """A message in a language other than English: its ``format`` writes numbers the language's way."""

    def format(self, *args, **kwargs) -> str:
        return _FORMATTER.vformat(str(self), args, kwargs)

    def format_map(self, mapping) -> str:
        return _FORMATTER.vformat(str(self), (), mapping)


def _said(text: str) -> str:
    """``text`` as a ``Said`` when the language spoken is not English (English: the string as it is)."""
    return text if _language == "en" or not isinstance(text, str) else Said(text)
