"""Text from a model, a tool or a server, made safe to show on a terminal.

A terminal obeys what it prints: ``\\r`` returns to the start of the line, ``ESC [2K`` erases it, a bidi
override reverses what follows. A call id carrying ``\\r\\x1b[2K`` could make the approval line show a
harmless call while the real one deletes something else. So everything the CLI prints that did not come
from the harness itself goes through ``visible`` (one line of text) or ``json_safe`` (inside JSON), which
turn every control or formatting character into a visible escape, and show exactly what will run. Text
a model streams keeps its line breaks, so each of its lines is marked as the model's (``Quoted``): a line
of its own cannot pass for the harness's approval line.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and every "format" character (bidi overrides and isolates, zero-width joiners,
# the BOM...): what a terminal acts on or hides instead of showing. Line and paragraph separators too.
_DANGEROUS = re.compile(  # the characters of categories Cc, Cf, Zl, Zp (Unicode 14), and lone surrogates
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def visible(text) -> str:
    """``text`` on one line with every control, escape and formatting character shown as an escape
    (``\\x1b``, ``\\r``, ``\\u202e``); a backslash is doubled so that an escape cannot be forged."""
    text = text if isinstance(text, str) else str(text)
    return _DANGEROUS.sub(lambda m: _escape(m.group()), text.replace("\\", "\\\\"))


def visible_lines(text) -> str:
    """``visible`` for text shown as it streams: line breaks and tabs are kept as they are, every other
    control or formatting character is escaped, and a backslash doubled, as ``visible`` does."""
    text = text if isinstance(text, str) else str(text)
    return _DANGEROUS.sub(lambda m: m.group() if m.group() in "\n\t" else _escape(m.group()),
                          text.replace("\\", "\\\\"))


def quoted_lines(text) -> str:
    """Text a model or a file wrote (a rendered prompt), shown whole: escaped as ``visible_lines`` does, every
    line begun with ``Quoted.MARK``, so that none can pass for the harness's own lines around it."""
    lines = visible_lines(text).splitlines(keepends=True)
    return "".join(Quoted.MARK + line for line in lines) + ("" if not lines or lines[-1].endswith("\n") else "\n")


class Quoted:
    """What a model streams, shown as it arrives with the care of what it says at the end: every control or
    formatting character escaped (``visible_lines``: only line breaks and tabs kept), and every line it
    writes begun with ``MARK``, so that no line of its can pass for one of the harness's (an approval line,
    a run line). Call it with each piece of text; ``fresh_line`` ends a line it left open."""

    MARK = "> "

    def __init__(self, screen):
        self.screen, self.at_line_start = screen, True

    def __call__(self, text: str) -> None:
        out: list[str] = []
        for i, piece in enumerate(visible_lines(text).split("\n")):
            if i:
                out.append("\n")
                self.at_line_start = True
            if piece:
                out += [self.MARK, piece] if self.at_line_start else [piece]
                self.at_line_start = False
        if out:
            self.screen.write("".join(out))
            self.screen.flush()

    def fresh_line(self) -> None:
        if not self.at_line_start:
            self("\n")


def json_safe(dumped: str) -> str:
    """A ``json.dumps(..., ensure_ascii=False)`` string with the characters ``visible`` escapes written
    as JSON escapes (``\\u001b``), so that it parses to the same value and prints harmlessly."""
    return _DANGEROUS.sub(lambda m: "".join(f"\\u{u:04x}" for u in _utf16(m.group())), dumped)


def _utf16(ch: str) -> list[int]:
    n = ord(ch)
    if n < 0x10000:
        return [n]
    n -= 0x10000
    return [0xD800 + (n >> 10), 0xDC00 + (n & 0x3FF)]
