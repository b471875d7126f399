"""What a reader's piece gave back, as plain data: built-in values of exact types, read through the built-in types'
own methods, bounded in size; and an exception in one line. A check compares and shows only these.

``plain(value)`` returns a copy made of ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``,
``tuple``, ``dict``, ``set`` and ``frozenset`` (and ``Text``, the chapter layer's message with values). A subclass
of one of them is read as the built-in it extends, through that type's own methods (``dict.items``,
``int.__int__``...): an ``int`` that claims to equal anything becomes the number it holds, a ``dict`` that says yes
to every key the items it holds, and neither ever reaches a comparison. Anything else (an object of the reader's, a
numpy array, a generator) is ``NotPlain``, said in one line with where it was found. A string longer than
``STRING_LIMIT`` is cut ("… (N more characters)"), and more than ``TOTAL_LIMIT`` characters or ``ITEMS_LIMIT``
values in all, or values nested deeper than ``DEPTH_LIMIT``, are ``NotPlain`` too: what a check keeps and shows is
bounded, whatever the piece returns.

``one_line(error)`` is an exception as one line of at most ``LINE_LIMIT`` characters of its message, even when its
message is huge, or cannot be made (its ``__str__`` raises).
"""

from __future__ import annotations

import re
from typing import Any

from .language import Text

STRING_LIMIT = 10_000        # characters of one string kept; a longer one is cut, and says by how much
TOTAL_LIMIT = 2_000_000      # characters in all
ITEMS_LIMIT = 200_000        # values in all
DEPTH_LIMIT = 60             # containers inside containers
LINE_LIMIT = 240             # characters of an exception's message in its one line


class NotPlain(Exception):
    """A value that is not plain data: ``kind`` its type's name, ``where`` the path to it (``['turns']``), ``why``
    when it is its size or depth rather than its type: ``values``, ``characters`` or ``depth`` (past ``limit``)."""

    def __init__(self, kind: str, where: str, why: str = "", limit: int = 0):
        where = where if len(where) <= 80 else f"{where[:40]}…{where[-36:]}"
        super().__init__(f"{kind} at {where or 'the top'}" + (f": past {limit:,} ({why})" if why else ""))
        self.kind, self.where, self.why, self.limit = kind, where, why, limit


def cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, then how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def type_name(value) -> str:
    """The name of ``value``'s type, read from the type itself (never from the value, which may lie), on one line."""
    try:
        name = type.__getattribute__(type(value), "__qualname__")
        if not isinstance(name, str):
            return "object"
        name = " ".join(str.__str__(name).split()).replace("`", "'")
        return cut(_speakable(name), 60) or "object"
    except Exception:  # noqa: BLE001 - a type whose name cannot be read is still a type
        return "object"


class _Budget:
    def __init__(self):
        self.items, self.chars = 0, 0

    def take(self, where: str, chars: int = 0) -> None:
        self.items += 1
        self.chars += chars
        if self.items > ITEMS_LIMIT:
            raise NotPlain("", where, "values", ITEMS_LIMIT)
        if self.chars > TOTAL_LIMIT:
            raise NotPlain("", where, "characters", TOTAL_LIMIT)


def plain(value: Any, where: str = "") -> Any:
    """``value`` as plain data (see the module's text), or ``NotPlain``."""
    return _plain(value, where, _Budget(), 0)


def _key(where: str, key) -> str:
    return f"{where}[{key!r}]" if isinstance(key, (str, int, float, bool)) or key is None else f"{where}[…]"


def _plain(value: Any, where: str, budget: _Budget, depth: int) -> Any:
    """Read through ``type(value)``, which a value cannot fake (``isinstance`` believes a ``__class__`` it claims)."""
    if depth > DEPTH_LIMIT:
        raise NotPlain(type_name(value), where, "depth", DEPTH_LIMIT)
    kind = type(value)
    if value is None or kind is bool:
        budget.take(where)
        return value
    if kind is Text:
        return _text(value, where, budget, depth)
    if issubclass(kind, str):
        text = _speakable(str.__str__(value))
        budget.take(where, min(len(text), STRING_LIMIT))
        return cut(text, STRING_LIMIT)
    if issubclass(kind, int):
        budget.take(where)
        return int.__int__(value)
    if issubclass(kind, float):
        budget.take(where)
        return float.__float__(value)
    if issubclass(kind, (bytes, bytearray)):
        data = bytes.__add__(b"", value)
        budget.take(where, min(len(data), STRING_LIMIT))
        return data if len(data) <= STRING_LIMIT else data[:STRING_LIMIT]
    if issubclass(kind, dict):
        budget.take(where)
        out = {}
        for k, v in list(dict.items(value)):
            key = _plain(k, f"{where} (a key)", budget, depth + 1)
            try:
                hash(key)
            except TypeError:
                raise NotPlain(type_name(k), f"{where} (a key)") from None
            out[key] = _plain(v, _key(where, key), budget, depth + 1)
        return out
    if issubclass(kind, (list, tuple)):
        base = list if issubclass(kind, list) else tuple
        budget.take(where)
        items = [base.__getitem__(value, i) for i in range(base.__len__(value))]
        made = [_plain(v, f"{where}[{i}]", budget, depth + 1) for i, v in enumerate(items)]
        return made if base is list else tuple(made)
    if issubclass(kind, (set, frozenset)):
        base = set if issubclass(kind, set) else frozenset
        budget.take(where)
        made = [_plain(v, f"{where} (an item)", budget, depth + 1) for v in list(base.__iter__(value))]
        return set(made) if base is set else frozenset(made)
    raise NotPlain(type_name(value), where)


_PADDED = re.compile(r"\{[^{}]*:[^{}]*[0-9][^{}]*\}")   # a field with a width or a precision: {x:>9}, {x:.3}


def _text(value: Text, where: str, budget: _Budget, depth: int):
    """A message with values stays one (said in the language spoken) when it is small and pads nothing: its
    template made again from bounded values is bounded too. Any other is the text it reads as."""
    template, values = getattr(value, "template", None), getattr(value, "values", None)
    text = _speakable(str.__str__(value))
    if (type(template) is str and len(template) <= 1000 and not _PADDED.search(template)
            and type(values) is dict and all(type(k) is str for k in values)):
        plain_values = {k: _plain(v, _key(where, k), budget, depth + 1) for k, v in dict.items(values)}
        try:
            made = Text(template, **plain_values)
        except Exception:  # noqa: BLE001 - a template its values do not fill: the text it reads as
            made = None
        if made is not None and len(made) <= STRING_LIMIT:
            budget.take(where, len(made))
            return made
    budget.take(where, min(len(text), STRING_LIMIT))
    return cut(text, STRING_LIMIT)


def _speakable(text: str) -> str:
    """``text`` as it can be sent and shown: half a character (a lone surrogate) written as its escape."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(error: BaseException) -> str:
    """``error`` as ``Type: the first line of its message`` (cut), or ``Type`` alone, or ``Type (its message could
    not be shown: ...)`` when making it raised."""
    name = type_name(error)
    try:
        text = str(error)
        text = str.__str__(text) if isinstance(text, str) else ""
    except BaseException as cause:  # noqa: BLE001 - the message is the reader's code too
        return f"{name} (its message could not be shown: {type_name(cause)})"
    head = text.lstrip()[: LINE_LIMIT + 1]
    first = head.splitlines()[0].strip() if head.strip() else ""
    if not first:
        return name
    if len(first) <= LINE_LIMIT:   # a message of several lines: its first line, as a traceback's last line shows
        return f"{name}: {first}"
    rest = text.lstrip().split("\n", 1)[0].rstrip()
    return f"{name}: {first[:LINE_LIMIT]}… ({len(rest) - LINE_LIMIT:,} more characters)"


__all__ = ["NotPlain", "cut", "one_line", "plain", "type_name"]
