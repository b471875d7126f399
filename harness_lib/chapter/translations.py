"""The notebooks in their readers' languages: gettext catalogues kept with Babel, notebooks built from them.

    python -m harness_lib.chapter.translations            # extract, then build (`make translations`)
    python -m harness_lib.chapter.translations extract    # English notebooks -> locale/notebooks.pot, *.po updated
    python -m harness_lib.chapter.translations build      # English notebooks + *.po -> notebooks/bg/, notebooks/hu/

The English notebooks are the source. Each markdown cell is one message of ``locale/notebooks.pot``, its
context the notebook and the cell id (``01-loop.ipynb#01-03``); ``locale/LANG/LC_MESSAGES/notebooks.po`` holds
a language's translations; each comment of a code cell, and each sentence a code cell prints, is one
more (docs/translating.md). ``extract`` updates every ``.po`` from the notebooks: a cell whose English changed
keeps its old translation marked fuzzy, with the English it translated (``#| msgid``), and a cell whose text
is unchanged keeps its translation wherever it moved. ``build`` writes ``notebooks/LANG/NN-name.ipynb`` for
every notebook whose cells are all translated: the English notebook as executed (code cells and outputs
copied, nothing re-run), each markdown cell replaced by its translation, and a link to the language's
glossary (``notebooks/LANG/glossary.md``, written by hand) under the first cell's title. A notebook with a
cell left to translate is not written; ``build`` names its cells. docs/translating.md is the workflow.
"""

from __future__ import annotations

import argparse
import copy
import csv
import difflib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import PoFileError, read_po, unescape, write_po

from ..resources import data_path
from .language import broken_line
from .nbformat_fast import nbformat

# Relative, as in harness_lib.chapter.notebooks: the notebooks and catalogues are the project's, not the package's.
NOTEBOOKS = Path("notebooks")
LOCALE = Path("locale")
DOMAIN = "notebooks"
PROJECT = "harness-lib"
BUGS = "the project's issues (docs/translating.md)"
LANGUAGES = {"bg": "Bulgarian", "hu": "Hungarian"}
GLOSSARY = "glossary.md"
GLOSSARY_CONTEXT = "glossary link"
GLOSSARY_LINK = ("*Glossary: the chapter's terms in this language, the English ones and the names in the code: "
                 f"[{GLOSSARY}]({GLOSSARY})*")
FIRST_CELL_NOTE = ("The notebook's first cell. Keep its title line ('# NN · ...'); say in words which part of the "
                   "chapter it follows (the Bulgarian and Hungarian texts have no headings) and keep the listing or "
                   "printed block it starts at as code. The build puts the glossary link under the title.")
SIMILAR = 0.6  # difflib's ratio above which a vanished cell's English is taken for the earlier text of a new one
HEADER = ("# The companion's notebooks in {language}: one message per markdown cell of the English notebooks\n"
          "# (msgctxt: notebook#cell id). Updated by `make translations`; see docs/translating.md.")


class TranslationError(Exception):
    """A catalogue or notebook the tool cannot use: one line that names the file and what to do."""


@dataclass(frozen=True)
class Stale:
    """A markdown cell whose translation cannot be used: missing, fuzzy, or for English that changed."""

    notebook: str
    cell: str
    why: str

    def __str__(self) -> str:
        return f"{self.notebook} cell {self.cell}: {self.why}"


# -- the catalogues ---------------------------------------------------------------------------------------
def english_notebooks(root: Path = NOTEBOOKS) -> list[Path]:
    paths = sorted(root.glob("*.ipynb"))
    if not paths:
        raise TranslationError(f"no notebooks in {root.resolve()}: run this from the project's folder")
    return paths


def context(path: Path, cell) -> str:
    return f"{path.name}#{cell.id}"


def catalogue_path(language: str, locale: Path = LOCALE, domain: str = DOMAIN) -> Path:
    return locale / language / "LC_MESSAGES" / f"{domain}.po"


def _message(msgid: str, string: str = "", context: str | None = None, **kwargs) -> Message:
    message = Message(msgid, string, context=context, **kwargs)
    message.flags.discard("python-format")  # markdown, not a %-format: "75 % increase" is not a conversion
    return message


def _version() -> str:
    try:
        return metadata.version(PROJECT)
    except metadata.PackageNotFoundError:
        return "unknown"


def template(paths: list[Path]) -> Catalog:
    """One message per non-empty markdown cell of the English notebooks, in notebook and cell order."""
    pot = Catalog(project=PROJECT, version=_version(), msgid_bugs_address=BUGS, fuzzy=False,
                  header_comment=HEADER.format(language="all languages"))
    pot[GLOSSARY_LINK] = _message(GLOSSARY_LINK, context=GLOSSARY_CONTEXT, auto_comments=[
        f"Put under the title of every translated notebook; keep the link to {GLOSSARY}."])
    for path in paths:
        nb = _read_notebook(path)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown" and cell.source.strip():
                notes = [FIRST_CELL_NOTE] if index == 0 else []
                pot[cell.source] = _message(cell.source, context=context(path, cell), auto_comments=notes)
            elif cell.cell_type == "code":
                for k, comment in enumerate(comments(cell.source)):
                    if translatable(comment):
                        pot[comment.text] = _message(comment.text, auto_comments=[COMMENT_NOTE],
                                                     context=f"{context(path, cell)} comment {k + 1}")
                for k, sentence in enumerate(s for s in printed(cell.source) if shown(s)):
                    pot[sentence.text] = _message(sentence.text, auto_comments=[PRINT_NOTE],
                                                  context=f"{context(path, cell)} print {k + 1}")
    return pot


# -- the comments of the code cells -----------------------------------------------------------------------
BUILT = "build"   # the tag of a cell whose code the reader writes (an exercise clears its solution)
COMMENT_NOTE = ("A comment in a code cell: translate its words, keep `names` and code as they are. Lines break "
                "where the English breaks (a line of the translation is a line of the comment).")
# A comment that is an instruction to a tool, not words to the reader: kept as it is (nbval reads its own).
DIRECTIVE = re.compile(r"\s*(NBVAL_[A-Z_]+|noqa\b.*|type: ignore\b.*|pragma\b.*)")


def translatable(comment: Comment) -> bool:
    """Whether ``comment`` is words to translate (not a tool's directive, ``# NBVAL_IGNORE_OUTPUT``)."""
    return not DIRECTIVE.fullmatch(comment.text)


@dataclass(frozen=True)
class Comment:
    """A comment of a cell's code: the lines ``first`` to ``last`` (0-based) from column ``column``, its ``text``
    without the ``#`` and one space (a block of whole-line comments is one, its lines joined by newlines)."""
    first: int
    last: int
    column: int
    text: str
    trailing: bool
    mark: str = "# "   # how it begins: "# ", or "#" for one such as "### BEGIN SOLUTION"


def is_built(cell) -> bool:
    return cell.cell_type == "code" and BUILT in cell.metadata.get("tags", [])


def comments(source: str) -> list[Comment]:
    """The comments of ``source``, in order: each trailing comment alone, each run of whole-line comments at the
    same column as one. Code that does not tokenize (a cell half written) has none."""
    import tokenize

    lines = source.splitlines()
    found: list[Comment] = []
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    for token in tokens:
        row, column = token.start[0] - 1, token.start[1]
        mark = "# " if token.string.startswith("# ") else "#"
        text = token.string[len(mark):]
        trailing = bool(lines[row][:column].strip())
        last = found[-1] if found else None
        if (not trailing and last is not None and not last.trailing and last.last == row - 1
                and last.column == column and last.mark == mark and text.strip()):
            found[-1] = Comment(last.first, row, column, last.text + "\n" + text, False, mark)
        elif text.strip():
            found.append(Comment(row, row, column, text, trailing, mark))
    return found


def with_comments(source: str, translated: list[str]) -> str:
    """``source`` with its comments (``comments``) replaced by ``translated``, one text each, the code untouched."""
    lines = source.splitlines(keepends=True)
    for comment, text in reversed(list(zip(comments(source), translated))):
        first = lines[comment.first]
        ending = "\n" if lines[comment.last].endswith("\n") else ""
        if comment.trailing:
            lines[comment.first] = first[:comment.column] + comment.mark + text.replace("\n", " ") + ending
        else:
            indent = first[:comment.column]
            block = "\n".join(f"{indent}{comment.mark}{line}".rstrip() for line in text.split("\n")) + ending
            lines[comment.first:comment.last + 1] = [block]
    return "".join(lines)


# -- the sentences a code cell prints ------------------------------------------------------------------------
PRINT_NOTE = ("A sentence a code cell prints (the pieces Python joins are one message): translate its words; keep "
              "every {...} exactly, the code inside and the format after its colon, in the order your language "
              "needs, and escapes such as \\n. Keep `name=` labels and units as they are.")
# Lines the chapter itself prints, which a notebook prints again to set beside the chapter's: they stay English in
# every language, as the chapter's Bulgarian and Hungarian texts print them too (the glossaries point to them).
CHAPTER_PRINTS = ("read a file the process may not open", "files deleted so far:", "-> total turns=", "after turn",
                  "restored from disk:", "resumed and finished:", "stopped after")
_WORDS = re.compile(r"[^\W\d_]{2,}[,.:;!?)]*")


@dataclass(frozen=True)
class Printed:
    """The string literals one ``print(...)`` call is given side by side (Python joins them: one sentence).
    ``spans``: each literal's ((row, column), (row, column)) in the source, rows 1-based as ``tokenize`` gives them;
    ``prefix`` (``f`` or none) and ``quote``: how the first is written; ``text``: what is between their quotes,
    joined, as the source writes it (escapes and ``{...}`` fields included). ``plain``: every piece is a one-line
    string or f-string, the kind a translation can be put back into."""
    spans: tuple
    prefix: str
    quote: str
    text: str
    plain: bool


def printed(source: str) -> list[Printed]:
    """The sentences ``source`` prints: each positional argument of a ``print(...)`` call that is a string literal,
    or several side by side, or a branch of ``... if ... else ...`` that is (not a method's ``.print``, not part of
    another expression, a keyword's value or a starred argument). Code that does not parse (a cell half written,
    IPython's ``%`` and ``!`` lines) has none."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    rows = _rows(source)

    def at(row: int, byte: int) -> tuple:   # ast counts a column in UTF-8 bytes, tokenize in characters
        return row, len(rows[row - 1].encode("utf-8")[:byte].decode("utf-8", "replace"))

    def said(node) -> list:   # a literal, or each branch of `"..." if ready else "..."`
        if isinstance(node, ast.IfExp):
            return said(node.body) + said(node.orelse)
        return [node] if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                                               and isinstance(node.value, str)) else []

    spans = sorted((at(arg.lineno, arg.col_offset), at(arg.end_lineno, arg.end_col_offset))
                   for call in ast.walk(tree)
                   if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"
                   for argument in call.args for arg in said(argument))
    pieces = _pieces(source)
    found = []
    for first, last in spans:
        run = [(a, b) for a, b in pieces if first <= a and b <= last]
        parts = [_literal(_between(rows, a, b)) if a[0] == b[0] else None for a, b in run]  # one line each
        plain = bool(parts) and all(p is not None for p in parts)
        if plain:
            quotes = {p[1] for p in parts}
            braces = any("{" in body or "}" in body for prefix, _q, body in parts if prefix != "f")
            plain = len(quotes) == 1 and not (len({p[0] for p in parts}) > 1 and braces)
        prefix = "f" if plain and any(p[0] == "f" for p in parts) else (parts[0][0] if plain else "")
        found.append(Printed(tuple(run), prefix, parts[0][1] if plain else "",
                             "".join(p[2] for p in parts) if plain else _between(rows, first, last), plain))
    return found


def _pieces(source: str) -> list[tuple]:
    """Each string literal of ``source`` as its ((row, column), (row, column)) span, ``tokenize``'s rows: one token
    on Python 3.11, an f-string's FSTRING_START to its FSTRING_END from 3.12."""
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    start, end = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)
    found, depth, opened = [], 0, None
    for token in tokens:
        if start is not None and token.type == start:
            depth += 1
            opened = token.start if depth == 1 else opened
        elif end is not None and token.type == end:
            depth -= 1
            if depth == 0:
                found.append((opened, token.end))
        elif token.type == tokenize.STRING and depth == 0:
            found.append((token.start, token.end))
    return found


def _rows(source: str) -> list[str]:
    """``source``'s lines as ``tokenize`` and ``ast`` count them (at ``\\n`` only: not ``str.splitlines``, which also
    breaks at a form feed or U+2028), each with its line break."""
    return re.findall(r"[^\n]*\n|[^\n]+", source)


def _between(rows: list[str], first: tuple, last: tuple) -> str:
    """The source from ``first`` to ``last`` (``tokenize``'s rows and columns), ``rows`` its ``_rows``."""
    if first[0] == last[0]:
        return rows[first[0] - 1][first[1]:last[1]]
    return rows[first[0] - 1][first[1]:] + "".join(rows[first[0]:last[0] - 1]) + rows[last[0] - 1][:last[1]]


def _literal(token: str) -> tuple[str, str, str] | None:
    """(prefix, quote, body) of a one-line ``"..."``/``'...'`` string or f-string as written; None for any other
    (raw, bytes, triple-quoted)."""
    prefix = token[:len(token) - len(token.lstrip("fFrRbBuU"))]
    rest = token[len(prefix):]
    if (prefix.lower() not in ("", "f") or rest[:3] in ('"""', "\'\'\'") or len(rest) < 2 or rest[0] != rest[-1]
            or "\n" in rest):
        return None
    return prefix.lower(), rest[0], rest[1:-1]


def fields(text: str) -> list[str]:
    """The ``{...}`` fields of an f-string's body, as written (``{{`` is a brace, not a field; a quoted string in a
    field, ``{'}'.join(xs)}``, is the field's)."""
    out, i, depth, start = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if depth == 0 and text.startswith(("{{", "}}"), i):
            i += 2
            continue
        if depth and ch in "'\"":
            close = text.find(ch, i + 1)
            i = close + 1 if close > 0 else len(text)
            continue
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
        i += 1
    return out


def shown(sentence: Printed) -> bool:
    """Whether a printed sentence is words to translate: three words or more outside its fields, not a run line of
    ``name=value`` pairs and numbers, nor a line the chapter prints (``CHAPTER_PRINTS``)."""
    text = sentence.text
    for field in fields(text) if sentence.prefix == "f" else []:
        text = text.replace(field, " ", 1)
    words = text.replace("\\n", " ").split()
    prose = [w for w in words if _WORDS.fullmatch(w)]
    return (sentence.plain and len(prose) >= 3 and len(prose) * 2 >= len(words)
            and not any(line in text for line in CHAPTER_PRINTS))


def with_printed(source: str, sentence: Printed, text: str) -> str:
    """``source`` with the sentence's literals holding ``text`` instead: as many pieces as before, cut at spaces in
    proportion to the English pieces' lengths, each written with the sentence's prefix and quote."""
    lines = _rows(source)
    for (start, end), literal in reversed(list(zip(sentence.spans, literals(sentence, text)))):
        row = start[0] - 1
        lines[row] = lines[row][:start[1]] + literal + lines[row][end[1]:]
    return "".join(lines)


def literals(sentence: Printed, text: str) -> list[str]:
    """``text`` as the sentence's literals: as many as the English has, cut at spaces in proportion to their
    lengths, each with the sentence's prefix and quote."""
    lengths = [end[1] - start[1] for start, end in sentence.spans]
    formatted = sentence.prefix == "f"
    return [sentence.prefix + sentence.quote + _quoted(piece, sentence.quote, formatted) + sentence.quote
            for piece in _cut(text, lengths, formatted)]


def _cut(text: str, lengths: list[int], formatted: bool) -> list[str]:
    if len(lengths) == 1:
        return [text]
    inside = set()
    if formatted:
        at = 0
        for field in fields(text):
            at = text.index(field, at)
            inside.update(range(at, at + len(field)))
            at += len(field)
    spaces = [i + 1 for i, ch in enumerate(text) if ch == " " and i not in inside and 0 < i + 1 < len(text)]
    cuts, total, so_far = [], sum(lengths), 0
    for length in lengths[:-1]:
        so_far += length
        want = len(text) * so_far / total
        later = [i for i in spaces if not cuts or i > cuts[-1]]
        cuts.append(min(later, key=lambda i: abs(i - want)) if later else (cuts[-1] if cuts else 0))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _quoted(piece: str, quote: str, formatted: bool) -> str:
    """A piece's text with its quote character escaped outside its fields (a translation may use it)."""
    protected = fields(piece) if formatted else []
    out, at = [], 0
    for field in protected:
        index = piece.index(field, at)
        out.append(re.sub(r"(?<!\\)" + re.escape(quote), "\\\\" + quote, piece[at:index]) + field)
        at = index + len(field)
    out.append(re.sub(r"(?<!\\)" + re.escape(quote), "\\\\" + quote, piece[at:]))
    return "".join(out)


def expressions(literals_source: str) -> tuple | None:
    """The fields of the literals side by side in ``literals_source`` as Python parses them (each expression, its
    conversion and format, in order of their text), for comparing two sentences: their order may differ, nothing
    else. None when it is not a valid string."""
    import ast

    try:
        node = ast.parse(f"({literals_source}\n)", mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ()
    if not isinstance(node, ast.JoinedStr):
        return None
    return tuple(sorted(ast.dump(v) for v in node.values if isinstance(v, ast.FormattedValue)))


def _written(rows: list[str], sentence: Printed) -> str:
    """The sentence's literals as the source writes them."""
    return " ".join(_between(rows, a, b) for a, b in sentence.spans)


def code_shape(source: str) -> list[tuple]:
    """What a translation must keep of a cell's code: its tokens, comments and layout aside, each printed
    sentence's literals as one token that keeps only its fields as Python parses them (``expressions``): names,
    calls, keys and numbers."""
    import tokenize

    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [(None, source)]
    sentences, rows = printed(source), _rows(source)
    first = {s.spans[0][0]: s for s in sentences}
    inside = [(s.spans[0][0], s.spans[-1][1]) for s in sentences]
    shape = []
    for token in tokens:
        if token.type in skip:
            continue
        sentence = first.get(token.start)
        if sentence is not None:
            shape.append(("PRINTED", expressions(_written(rows, sentence))))
        elif not any(a <= token.start < b for a, b in inside):   # the sentence's other pieces and tokens
            shape.append((token.type, token.string))
    return shape


def merge(old: Catalog, pot: Catalog) -> Catalog:
    """``old`` brought up to the template ``pot``; every translation ``old`` holds is kept somewhere:

    - the same English in the same cell: kept as it was (fuzzy stays fuzzy);
    - the same English in another cell (cells moved, ids renumbered): kept, not fuzzy (the text is the same);
    - the cell's English changed: the old translation, fuzzy, with the English it translated (previous msgid),
      unless that English now sits in another cell (then it went there);
    - English that is new to the notebook (cells renumbered as well as edited): the translation of the most
      similar vanished cell of the same notebook, fuzzy, if one is close;
    - an English edit undone (the text is again the one a fuzzy translation was made for): no longer fuzzy;
    - translations no cell uses any more: obsolete (``#~``), as gettext keeps them.
    """
    new = Catalog(locale=old.locale, project=pot.project, version=pot.version, fuzzy=False,
                  msgid_bugs_address=pot.msgid_bugs_address, header_comment=old.header_comment,
                  last_translator=old.last_translator, language_team=old.language_team,
                  creation_date=pot.creation_date, revision_date=old.revision_date)
    known = [m for m in list(old) + list(old.obsolete.values()) if m.id and m.string]
    exact = {(m.id, m.context): m for m in known}
    by_text: dict[str, Message] = {}
    for m in known:
        if m.id not in by_text or (by_text[m.id].fuzzy and not m.fuzzy):
            by_text[m.id] = m
    by_context = {m.context: m for m in old if m.id and m.string}
    wanted = {m.id for m in pot if m.id}
    used: set[tuple] = set()
    decided: dict = {}  # context -> message (babel's Catalog merges a message set twice instead of replacing it)
    undecided = []

    def take(message: Message, source: Message, fuzzy: bool) -> None:
        used.add((source.id, source.context))
        previous = source.previous_id if source.id == message.id else [source.id]
        if source.fuzzy and source.previous_id and source.previous_id[0] == message.id:
            fuzzy = False  # the English went back to what this translates: an edit undone
        decided[message.context] = _message(message.id, source.string, context=message.context,
                                            auto_comments=message.auto_comments, user_comments=source.user_comments,
                                            flags=["fuzzy"] if fuzzy else [], previous_id=previous if fuzzy else [])

    for message in pot:
        if not message.id:
            continue
        hit = exact.get((message.id, message.context))
        if hit is not None:
            take(message, hit, hit.fuzzy)
        elif message.id in by_text:
            take(message, by_text[message.id], by_text[message.id].fuzzy)
        else:
            undecided.append(message)
    for message in undecided:
        notebook = (message.context or "").split("#")[0]
        candidates = {m.id: m for m in known if (m.context or "").split("#")[0] == notebook
                      and m.id not in wanted and (m.id, m.context) not in used}
        close = difflib.get_close_matches(message.id, list(candidates), n=1, cutoff=SIMILAR)
        before = by_context.get(message.context)
        if before is not None and before.id in candidates and (
                not close or close[0] == before.id or _similarity(message.id, before.id) >= SIMILAR):
            take(message, before, True)  # the same cell, edited in place (however much)
        elif close:
            take(message, candidates[close[0]], True)  # cells renumbered as well: the closest vanished text
    for message in pot:
        if message.id:
            new[message.id] = decided.get(message.context) or _message(message.id, context=message.context,
                                                                       auto_comments=message.auto_comments)
    for m in known:
        if (m.id, m.context) not in used and m.id not in wanted:
            m.flags.discard("python-format")
            new.obsolete[(m.id, m.context) if m.context else m.id] = m
    return new


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _render(catalog: Catalog) -> str:
    out = io.BytesIO()
    write_po(out, catalog, width=0, include_previous=True)
    return out.getvalue().decode("utf-8")


def _without_dates(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "-Date: " not in line)


_QUOTED = re.compile(r'"(?:\\.|[^"\\])*"')


def read_catalogue(path: Path, language: str | None = None) -> Catalog:
    """The catalogue at ``path``, refused in one line if a hand edit broke it (Babel's reader lets an unquoted
    msgstr through, and a later write would keep the damage), with each fuzzy message's previous English."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TranslationError(f"{path}: cannot be read ({e})") from None
    broken = broken_line(text)
    if broken:
        raise TranslationError(f"{path}, line {broken[0]}: not a catalogue line ({broken[1][:50]!r}): fix it by hand "
                               "or restore the file from git")
    try:
        catalog = read_po(io.StringIO(text), locale=language, domain=DOMAIN, abort_invalid=True)
    except (PoFileError, ValueError) as e:
        raise TranslationError(f"{path}: not a readable catalogue ({e}): fix it by hand or restore the file from "
                               "git") from None
    for message in list(catalog) + list(catalog.obsolete.values()):
        _previous_from_comments(message)
    return catalog


def _previous_from_comments(message: Message) -> None:
    """Babel writes a fuzzy message's previous msgid (``#| msgid ...``) but reads it back as a translator's
    comment: put it back where it belongs, so that it is written once, not copied into the comments."""
    lines = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
    if not lines:
        return
    message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
    previous = " ".join(lines).partition("msgid_plural")[0]  # Babel writes it on one line: msgid "" "a\n" "b"
    message.previous_id = ["".join(unescape(q) for q in _QUOTED.findall(previous))]


def _write_if_changed(path: Path, catalog: Catalog, date_field: str) -> bool:
    """Write ``catalog`` unless the file says the same apart from its dates (so an unchanged extract rewrites
    nothing); the date ``date_field`` names becomes now when it does write. Atomic: never half a file."""
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if old is not None and _without_dates(old) == _without_dates(_render(catalog)):
        return False
    setattr(catalog, date_field, datetime.now(timezone.utc).replace(second=0, microsecond=0))
    _write_atomically(path, _render(catalog))
    return True


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise TranslationError(f"{path}: not written ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())  # mkstemp's is 0600
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise TranslationError(f"{path}: not written ({e.strerror or e}); the file is as it was") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- the chapter layer's own messages (harness_lib.chapter.language) ----------------------------------------
CHAPTER_DOMAIN = "chapter"
CHAPTER_CODE = Path(__file__).resolve().parent
KEYWORDS = {"_": None, "N_": None, "C_": ((1, "c"), 2), "ngettext": (1, 2), "npgettext": ((1, "c"), 2, 3),
            "NP_": (1, 2)}
CHAPTER_HEADER = ("# What the companion's chapter layer prints and plots, in {language}: harness_lib/chapter's\n"
                  "# messages (_(), N_(), Text(N_(...))). Updated by `make translations`; see docs/translating.md.")


def chapter_template(code: Path = CHAPTER_CODE) -> Catalog:
    """Every message the chapter layer's code marks, with where it is and the translators' comments."""
    from babel.messages.extract import extract_from_dir

    pot = Catalog(project=PROJECT, version=_version(), msgid_bugs_address=BUGS, fuzzy=False,
                  header_comment=CHAPTER_HEADER.format(language="all languages"))
    found = extract_from_dir(code, method_map=[("**.py", "python")], keywords=KEYWORDS,
                             comment_tags=("TRANSLATORS:",), strip_comment_tags=True)
    for filename, _lineno, message, comments, context in found:
        if not message:
            continue
        where = (f"harness_lib/chapter/{filename}", None)   # no line numbers: a moved line changes no catalogue
        known = pot.get(message, context=context)
        if known is not None:
            known.locations.append(where)
            known.auto_comments.extend(c for c in comments if c not in known.auto_comments)
        else:
            pot.add(message, locations=[where], auto_comments=comments, context=context)
    with data_path("chapter_figures.csv").open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            where = ("data/chapter_figures.csv", None)   # the labels the comparison tables show
            if row["figure"] in pot:
                pot[row["figure"]].locations.append(where)
            else:
                pot.add(row["figure"], locations=[where],
                        auto_comments=["A figure of the chapter, as the comparison tables label it; keep the "
                                       "scenario's name (plan, runaway...) as it is."])
    from ..scripted import scripts

    for name, script in scripts.SCRIPTS.items():   # 00's table of scenarios says what each does
        line, where = script.__doc__.splitlines()[0], ("harness_lib/scripted/scripts.py", None)
        if line in pot:
            pot[line].locations.append(where)
        else:
            pot.add(line, locations=[where], auto_comments=[
                f"What the scripted scenario `{name}` does, as 00's table of scenarios says it (the scenario's "
                "replies stay English: this line is about them)."])
    for message in pot:
        if message.id and any("{" in text for text in _texts(message.id)):
            message.flags.add("python-brace-format")
    return pot


def _texts(value) -> tuple[str, ...]:
    """A message's id or string as a tuple of its forms (one, or a count's forms: ``ngettext``)."""
    return (value,) if isinstance(value, str) else tuple(value)


def _chapter_merge(old: Catalog, pot: Catalog) -> Catalog:
    """``old`` brought up to ``pot`` as gettext's msgmerge does (Babel's ``update``): a message whose English
    changed keeps its old translation, fuzzy, with the English it translated."""
    old.update(pot, update_header_comment=False, update_creation_date=True)
    for message in old:
        message.flags.discard("python-format")
    return old


def extract(notebooks: Path = NOTEBOOKS, locale: Path = LOCALE, languages=tuple(LANGUAGES)) -> list[Path]:
    """Write the templates and bring every language's catalogues up to them: the notebooks' markdown
    (``notebooks.pot``) and the chapter layer's messages (``chapter.pot``); the files that changed."""
    changed = _extract_domain(template(english_notebooks(notebooks)), DOMAIN, merge, locale, languages)
    changed += _extract_domain(chapter_template(), CHAPTER_DOMAIN, _chapter_merge, locale, languages)
    return changed


def _extract_domain(pot: Catalog, domain: str, merging, locale: Path, languages) -> list[Path]:
    changed = []
    pot_path = locale / f"{domain}.pot"
    if pot_path.exists():
        pot.creation_date = read_catalogue(pot_path).creation_date
    if _write_if_changed(pot_path, pot, "creation_date"):
        changed.append(pot_path)
    for language in languages:
        path = catalogue_path(language, locale, domain)
        if path.exists():
            old = read_catalogue(path, language)
        else:
            header = HEADER if domain == DOMAIN else CHAPTER_HEADER
            old = Catalog(locale=language, project=PROJECT, fuzzy=False,
                          header_comment=header.format(language=LANGUAGES.get(language, language)),
                          last_translator="harness-lib contributors",
                          language_team=f"{LANGUAGES.get(language, language)} (harness-lib)")
        new = merging(old, pot)
        if _write_if_changed(path, new, "creation_date"):
            changed.append(path)
    return changed


# -- the translated notebooks -----------------------------------------------------------------------------
def _read_notebook(path: Path):
    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError) as e:
        raise TranslationError(f"{path}: not a readable notebook ({e})") from None


def _translation(catalog: Catalog, msgid: str, ctx: str, notebook: str, cell: str) -> str | Stale:
    message = catalog.get(msgid, context=ctx)
    if message is None:
        if any(m.context == ctx for m in catalog):
            return Stale(notebook, cell, "its English changed since the catalogue was extracted: run `make "
                                         "translations`, then update the translation it marks fuzzy")
        return Stale(notebook, cell, "not in the catalogue: run `make translations`, then translate it")
    if message.fuzzy:
        return Stale(notebook, cell, "its English changed and the translation is marked fuzzy: update the "
                                     "translation, then remove the fuzzy flag")
    if not message.string:
        return Stale(notebook, cell, "not translated yet")
    return message.string


# What a translated notebook's setup cell says first (after its %config line): the chapter layer speaks the language.
SPEAK = {"bg": 'speak("bg")   # слоят на главата (harness_lib.chapter) пише и чертае на български',
         "hu": 'speak("hu")   # a fejezet rétege (harness_lib.chapter) magyarul ír és rajzol'}
SPEAK_IMPORT = "from harness_lib.chapter.language import speak"
STAMP = "harness_lib"   # notebook metadata: {"chapter_catalogue": the sha256 of the chapter.po it was executed with}


def setup_cell(nb):
    """The notebook's setup cell: its first code cell not tagged ``parameters`` (None if it has none)."""
    return next((c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])),
                None)


def speaking(source: str, language: str) -> str:
    """A setup cell's code with the language chosen at its top (below a leading ``%config`` line)."""
    lines = source.splitlines(keepends=True)
    at = 1 if lines and lines[0].startswith("%config") else 0
    return "".join(lines[:at] + [f"{SPEAK_IMPORT}\n{SPEAK[language]}\n"] + lines[at:])


def catalogue_stamp(language: str, locale: Path = LOCALE) -> str:
    """What a translated notebook records of the chapter layer's catalogue it was executed with."""
    import hashlib

    path = catalogue_path(language, locale, CHAPTER_DOMAIN)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else ""


def translate(path: Path, catalog: Catalog, language: str, folder: str = ""):
    """(the translated notebook, [Stale...]): the English notebook at ``path`` with every markdown cell in
    ``catalog``'s language and its setup cell choosing that language (``speak``), its outputs cleared: it is
    executed to have its own. Usable only when the list is empty. ``folder``: the translated notebook's folder
    under the language's (``exercises``), whose glossary link then goes one folder up."""
    nb = copy.deepcopy(_read_notebook(path))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    where = f"notebooks/{language}/{folder + '/' if folder else ''}{path.name}"
    stale = []
    link = _translation(catalog, GLOSSARY_LINK, GLOSSARY_CONTEXT, f"locale/{language}", "(the glossary link)")
    if folder and isinstance(link, str):
        link = link.replace(f"]({GLOSSARY})", f"](../{GLOSSARY})")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or not cell.source.strip():
            continue
        text = _translation(catalog, cell.source, context(path, cell), where, cell.id)
        if isinstance(text, Stale):
            stale.append(text)
            continue
        if index == 0 and isinstance(link, str):
            title, _, rest = text.partition("\n")
            text = f"{title}\n\n{link}\n{rest}" if rest else f"{title}\n\n{link}"
        cell.source = text
    for cell in nb.cells:
        if cell.cell_type == "code":
            problem = _translate_printed(cell, catalog, path.name)
            if problem is not None and not folder:
                stale.append(Stale(where, cell.id, problem))
            texts = []
            for k, comment in enumerate(comments(cell.source)):
                if not translatable(comment):
                    texts.append(comment.text)
                    continue
                found = _comment_translation(catalog, comment.text, context(path, cell))
                if found is None and not folder:
                    stale.append(Stale(where, f"{cell.id} comment {k + 1}",
                                       "its comment is not translated yet (`make translations`, then translate it)"))
                texts.append(found or comment.text)   # an exercise's own comments (YOUR CODE HERE) stay as they are
            cell.source = with_comments(cell.source, texts)
    setup = setup_cell(nb)   # its comments translated above; then the two lines that choose the language
    if setup is not None and language in SPEAK:
        setup.source = speaking(setup.source, language)
    if isinstance(link, Stale):
        stale.insert(0, link)
    return nb, stale


def _translate_printed(cell, catalog: Catalog, notebook: str) -> str | None:
    """Put the catalogue's translation of each sentence the cell prints in its code (the notebook's translation of
    that sentence, whichever cell it was extracted from: an exercise's cells are its section's); what is wrong with
    one, or None. A sentence whose translation is missing, fuzzy, or changes its fields stays English."""
    problem = None
    for sentence in reversed(printed(cell.source)):   # from the last: the earlier ones' places stay where they were
        if not shown(sentence):
            continue
        found = _usable(catalog, sentence.text, lambda c: c.startswith(notebook + "#") and " print " in c)
        if found is None:
            problem = ("a sentence it prints is not translated yet (`make translations`, then translate it): "
                       f"{sentence.text[:60]!r}")
            continue
        translated = expressions(" ".join(literals(sentence, found)))
        if translated is None:
            problem = f"the translation of {sentence.text[:60]!r} is not valid in a Python string: escape it"
            continue
        if translated != expressions(_written(_rows(cell.source), sentence)):
            problem = f"the translation of {sentence.text[:60]!r} changes its {{...}} fields: keep them as they are"
            continue
        cell.source = with_printed(cell.source, sentence, found)
    return problem


def _comment_translation(catalog: Catalog, text: str, cell_context: str) -> str | None:
    """The translation of the comment ``text`` of the cell ``cell_context``, whichever its place in the cell (an
    exercise's cell keeps fewer comments than its section's); None when missing or fuzzy."""
    return _usable(catalog, text, lambda c: c.startswith(cell_context + " comment "))


def _usable(catalog: Catalog, text: str, where) -> str | None:
    """The translation of ``text`` under a context ``where`` accepts, neither missing nor fuzzy; else None."""
    return next((m.string for m in catalog if m.id == text and m.string and not m.fuzzy and where(m.context or "")),
                None)


def notebook_text(nb) -> str:
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def differences(expected, actual, where: str, stamp: str | None = None) -> list[str]:
    """How the translated notebook on disk differs from what the catalogue and the English make, cell by cell: its
    markdown, its code and cell metadata (its outputs are its own run's: nbval compares those), and, given
    ``stamp``, whether it was executed with the chapter layer's catalogue as it is now."""
    problems = []
    if len(expected.cells) != len(actual.cells):
        return [f"{where}: {len(actual.cells)} cells, the English has {len(expected.cells)}: run `make translations`"]
    own = (STAMP, "language_info", "kernelspec")   # the stamp, and what the kernel that ran it says of itself
    if ({k: v for k, v in expected.metadata.items() if k not in own}
            != {k: v for k, v in actual.metadata.items() if k not in own}):
        problems.append(f"{where}: its notebook metadata differ from the English: run `make translations`")
    for want, got in zip(expected.cells, actual.cells):
        cell = f"{where} cell {want.get('id', '?')}"
        if want.cell_type != got.cell_type or want.get("id") != got.get("id"):
            problems.append(f"{cell}: not the English notebook's cell here: run `make translations`")
        elif want.cell_type == "code" and (want.source, want.metadata) != (got.source, got.metadata):
            part = "its code differs" if want.source != got.source else "its metadata differ"
            problems.append(f"{cell}: {part} from what the English notebook makes: run `make translations`")
        elif want.cell_type != "code" and want != got:
            problems.append(f"{cell}: not the catalogue's translation: run `make translations`")
    if stamp is not None and actual.metadata.get(STAMP, {}).get("chapter_catalogue") != stamp:
        problems.append(f"{where}: executed with another version of its language's chapter.po (what it prints may "
                        "be older): run `make translations`")
    return problems


def unexecuted(nb) -> bool:
    """Whether a notebook has a code cell that has not run."""
    return any(c.cell_type == "code" and c.source.strip() and c.get("execution_count") is None for c in nb.cells)


def needs_writing(nb, target: Path, stamp: str) -> bool:
    """Whether the translated notebook ``nb`` must be written at ``target`` and executed: missing there, or that
    file's cells or metadata are not ``nb``'s, or it was executed with another catalogue, or never."""
    if not target.exists():
        return True
    on_disk = _read_notebook(target)
    return bool(differences(nb, on_disk, str(target), stamp)) or unexecuted(on_disk)


def write_and_execute(made: list[tuple], say=None, execute: bool = True) -> list[Path]:
    """Write each (notebook, path, stamp) and execute them, two at once on two cores: a translated notebook's
    outputs are its own run's, in its language. The paths written."""
    from .notebooks import default_jobs, execute_all
    from .s12_local_model import NOTEBOOK as NOTEBOOK_12
    from .s12_local_model import keep_recorded_live

    recorded = {target: target.read_text(encoding="utf-8") for _, target, _ in made
                if target.name == NOTEBOOK_12 and target.exists()}
    for nb, target, stamp in made:
        nb.metadata[STAMP] = {"chapter_catalogue": stamp}
        _write_atomically(target, notebook_text(nb))
    paths = [target for _, target, _ in made]
    if paths and execute:
        execute_all(paths, say=say, jobs=default_jobs())
        for target, text in recorded.items():   # the local model's last recorded run, unless it ran now
            keep_recorded_live(target, text)
    return paths


def build(notebooks: Path = NOTEBOOKS, locale: Path = LOCALE, languages=tuple(LANGUAGES), again: bool = False,
          say=None, execute: bool = True) -> dict:
    """Write and execute every notebook whose cells are all translated and which is not what the English notebook
    and the catalogues make (every one, with ``again``: after the library changed what they print); {language:
    {"built": [...], "written": [...], "stale": {notebook: [Stale...]}, "removed": [...]}}. A translated notebook
    whose English is gone is removed. Without ``execute``, written only (the tests' small projects)."""
    paths = english_notebooks(notebooks)
    report = {}
    todo: list[tuple] = []
    for language in languages:
        path = catalogue_path(language, locale)
        if not path.exists():
            raise TranslationError(f"{path} does not exist: run `make translations` (extract) first")
        catalog = read_catalogue(path, language)
        stamp = catalogue_stamp(language, locale)
        out = notebooks / language
        done = report[language] = {"built": [], "written": [], "stale": {}, "removed": [],
                                   "messages": chapter_left(language, locale)}
        for english in paths:
            nb, stale = translate(english, catalog, language)
            if stale:
                done["stale"][english.stem] = stale
                continue
            target = out / english.name
            done["built"].append(english.stem)
            if again or needs_writing(nb, target, stamp):
                todo.append((nb, target, stamp))
                done["written"].append(english.stem)
        names = {p.name for p in paths}
        for orphan in sorted(out.glob("*.ipynb")):
            if orphan.name not in names:
                try:
                    orphan.unlink()
                except OSError as e:
                    raise TranslationError(f"{orphan}: its English notebook is gone, and it cannot be removed "
                                           f"({e.strerror or e})") from None
                done["removed"].append(orphan.name)
    write_and_execute(todo, say=say, execute=execute)
    return report


def chapter_left(language: str, locale: Path = LOCALE) -> list[str]:
    """The messages of the language's chapter.po not translated yet, or fuzzy: the notebooks print them in
    English until they are."""
    path = catalogue_path(language, locale, CHAPTER_DOMAIN)
    if not path.exists():
        return []
    return [m.id for m in read_catalogue(path, language) if m.id and (not m.string or m.fuzzy)]


def summary(report: dict, brief: bool = False) -> str:
    """What ``build`` did, a language a line and, unless ``brief``, a line for each notebook left to translate."""
    lines = []
    for language, done in report.items():
        lines.append(f"{language}: {len(done['built'])} notebooks translated ({len(done['written'])} written), "
                     f"{len(done['stale'])} with cells to translate"
                     + (f": {', '.join(name[:2] for name in done['stale'])}" if brief and done["stale"] else ""))
        if brief:
            continue
        for name, stale in done["stale"].items():
            kinds = sorted({s.why.split(":")[0] for s in stale})
            lines.append(f"   {name}: {len(stale)} cells ({'; '.join(kinds)})")
        lines.extend(f"   removed {name}: its English notebook is gone" for name in done["removed"])
        left = done.get("messages", [])
        if left:
            lines.append(f"   chapter.po: {len(left)} messages to translate or update (fuzzy), printed in English "
                         f"until they are: {left[0][:60]!r}{', ...' if len(left) > 1 else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_lib.chapter.translations",
                                     description="Extract the notebooks' markdown into gettext catalogues and "
                                                 "build the translated notebooks (docs/translating.md).")
    parser.add_argument("step", nargs="?", choices=("extract", "build"), help="one step (default: both)")
    parser.add_argument("--brief", action="store_true", help="one line a language (what `make chapter` prints)")
    parser.add_argument("--again", action="store_true", help="execute every translated notebook again, not only "
                        "those whose English, translation or catalogue changed")
    args = parser.parse_args(argv)
    try:
        if args.step in (None, "extract"):
            for path in extract():
                print(f"updated {path}")
        if args.step in (None, "build"):
            say = lambda line: print(line, flush=True)  # noqa: E731
            print(summary(build(again=args.again, say=say), brief=args.brief))
    except TranslationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
