"""The figures the notebooks measured, handed to the report instead of measured a second time.

``make chapter`` executes every notebook, then writes the report. Each notebook ends with
``beside_the_chapter(measured, section=...)``: when ``HARNESS_CHAPTER_COLLECT`` names a file (the report
sets it for the kernels it starts), that call also appends its section and its figures to the file, one
JSON line a call. The report reads them back with ``read`` and runs only the experiments of the sections no
notebook reported. A reader's Jupyter has no such variable: nothing is written.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

ENV = "HARNESS_CHAPTER_COLLECT"


class CollectError(Exception):
    """The collected figures cannot be read back as they were written."""


def _plain(value):
    """A figure as JSON holds it: numpy scalars as Python numbers, tuples as lists."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise CollectError(f"a figure is not a finite number: {value!r}")
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise CollectError(f"a figure JSON cannot hold: {type(value).__name__}")
    return value


def record(measured: dict, section: str) -> bool:
    """Append ``section``'s figures to the file ``HARNESS_CHAPTER_COLLECT`` names; False when it names none,
    or one that cannot be written (said in one line: a variable left set, naming a temporary folder since
    removed, must not break a reader's notebook; the report measures a section no notebook recorded)."""
    path = os.environ.get(ENV)
    if not path:
        return False
    line = json.dumps({"section": section, "measured": {k: _plain(v) for k, v in measured.items()}},
                      ensure_ascii=False, allow_nan=False)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        print(f"{ENV}={path}: cannot be written ({e.strerror or e}); {section}'s figures not recorded",
              file=sys.stderr)
        return False
    return True


def read(path: str | Path) -> list[tuple[str, dict]]:
    """Every (section, figures) recorded, in the order recorded; none when there is no file."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
            section, figures = entry["section"], entry["measured"]
        except (ValueError, KeyError, TypeError) as e:
            raise CollectError(f"{path}, line {n}: not a recorded section ({e})") from None
        if not isinstance(section, str) or not isinstance(figures, dict):
            raise CollectError(f"{path}, line {n}: not a recorded section")
        records.append((section, figures))
    return records
