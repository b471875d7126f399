"""How much of a translated notebook still speaks English where it is the companion's own (issue 46).

    .venv/bin/python tests/english_share.py          # bg and hu: the shares, and the most frequent English lines

Counted on the committed notebooks of a language (section notebooks and exercises), each against its English
notebook:

* **output lines**: every line a cell shows (printed text, a table's cells, Markdown, an error's message), kept when
  it is prose-like (three or more words of letters, and at least half its words such: not a run line of
  ``key=value`` pairs, a JSON trace line, a number or a name in the code) and it is the companion's own: not the
  model's world (its scripted replies, the workspace's files, the tools' texts, the system prompt and task, the local
  model's tasks and answers, the chapter's trace), which stays English by design (the glossaries say so), and not the
  library's source that a cell shows. A kept line is English when the English notebook's same cell shows it too
  (digits aside: a time measured twice differs);
* **prose comments**: every comment of a code cell with three or more words of letters (an exercise's own ``YOUR CODE
  HERE`` aside, English by design); English when the English notebook's same cell has it too.

``share(language)`` gives both, as (English, all); ``tests/test_english_share.py`` keeps them from growing.
"""

from __future__ import annotations

import ast
import html
import re
import sys
from functools import lru_cache
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_lib.chapter.translations import comments  # noqa: E402

WORD = re.compile(r"[^\W\d_]{2,}")
TOKEN = re.compile(r"\S+")
DIGITS = re.compile(r"\d[\d,.\u00a0 ]*")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>", re.S)
TAG = re.compile(r"<[^>]+>")
# Where the model's world is written: its replies and the texts its tools give it, the prompt and task, the local
# model's tasks; and the files and records it reads.
MODEL_CODE = ("harness_lib/scripted/scripts.py", "harness_lib/workspace.py", "harness_lib/tools.py",
              "harness_lib/policy.py", "harness_lib/state.py", "harness_lib/local_format.py",
              "harness_lib/chapter/s12_local_model.py",
              "harness_lib/chapter/s09_cancellation.py", "harness_lib/chapter/checks/s09_cancellation.py")
MODEL_DATA = ("data/workspace/access.log", "data/workspace/errors.log", "data/workspace/notes.txt",
              "data/chapter_trace.jsonl", "data/local_model_recorded.csv", "data/local_model_builtin_format.csv")


@lru_cache(maxsize=None)
def model_world() -> tuple[str, ...]:
    """The texts of the model's world, each of a dozen characters or more, digits aside."""
    texts: set[str] = set()
    for name in MODEL_CODE:
        tree = ast.parse((ROOT / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.update(part for part in node.value.splitlines())
            elif isinstance(node, ast.JoinedStr):   # an f-string's literal parts
                texts.update(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    for name in MODEL_DATA:
        for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
            texts.update(part.strip(' "') for part in line.split(","))
            texts.add(line)
    return tuple(sorted({_norm(t) for t in texts if len(_norm(t)) >= 12}, key=len, reverse=True))


def _norm(text: str) -> str:
    return " ".join(DIGITS.sub("0", text).split())


# An exercise's own comments, and nbgrader's markers: English in every language by design (docs/translating.md).
OWN_COMMENTS = {"YOUR CODE HERE", "## BEGIN SOLUTION", "## END SOLUTION"}


def prose_words(text: str) -> int:
    """Words of letters in ``text`` (a name in the code, ``NBVAL_IGNORE_OUTPUT``, is not words)."""
    return sum(bool(WORD.fullmatch(t.strip(".,:;!?()[]\"'“”„«»—–-"))) for t in TOKEN.findall(text))


def prose_like(line: str) -> bool:
    tokens = TOKEN.findall(line)
    words = [t for t in tokens if WORD.fullmatch(t.strip(".,:;!?()[]\"'“”„«»—–-"))]
    if len(words) < 3 or 2 * len(words) < len(tokens):
        return False
    return not (line.lstrip().startswith(("{", "[", "Traceback", "File ")) or re.search(r"\w=\S", line))


def is_model_world(line: str) -> bool:
    norm = _norm(line)
    return any(text in norm or (len(norm) >= 12 and norm in text) for text in model_world())


def output_lines(cell) -> list[str]:
    """The lines a code cell shows: its printed text, its tables' cells, its Markdown and its errors."""
    lines: list[str] = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            lines += "".join(output.get("text", "")).splitlines()
        elif output.get("output_type") == "error":   # the one line a reader sees (Python's own message aside)
            shown = [ANSI.sub("", line) for line in output.get("traceback", [])]
            lines += shown[-1].splitlines() if len(shown) == 1 else str(output.get("evalue", "")).splitlines()
        else:
            data = output.get("data", {})
            if "text/html" in data:
                body = "".join(data["text/html"])
                cells = CELL.findall(body)
                lines += [html.unescape(TAG.sub("", c)) for c in cells] if cells else \
                    html.unescape(TAG.sub("\n", body)).splitlines()
            elif "text/markdown" in data:
                lines += "".join(data["text/markdown"]).splitlines()
            elif "text/plain" in data:
                lines += "".join(data["text/plain"]).splitlines()
    return [line.strip() for line in lines if line.strip()]


def _shows_source(cell) -> bool:
    """A cell whose output is text that is not the companion's: the library's source it shows, or the local model's
    whole prompt (its chat format's words, llama-cpp-python's or the harness's)."""
    return any(call in cell.source for call in ("show_source(", "inspect.getsource", "prompt_of("))


# Lines the chapter itself prints, English in every language by design (docs/translating.md): the tool's progress
# as the chapter's listing prints it.
CHAPTER_LINES = re.compile(r"progress: .*\(t\+[\d,.\u00a0 ]+ ms\)$")


def pairs(language: str) -> list[tuple[Path, Path]]:
    """(translated notebook, its English notebook): section notebooks and exercises."""
    out = []
    for folder in ("", "exercises"):
        for path in sorted((ROOT / "notebooks" / language / folder).glob("*.ipynb")):
            out.append((path, ROOT / "notebooks" / folder / path.name))
    return out


def measure(language: str) -> dict:
    """{"lines": (English, all), "comments": (English, all), "english_lines": {line: count}, ...}"""
    english_lines: dict[str, int] = {}
    english_comments: dict[str, int] = {}
    lines = [0, 0]
    notes = [0, 0]
    for path, source in pairs(language):
        nb, en = nbformat.read(path, as_version=4), nbformat.read(source, as_version=4)
        by_id = {c.get("id"): c for c in en.cells}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            twin = by_id.get(cell.get("id"))
            if not _shows_source(cell):
                theirs = {_norm(line) for line in output_lines(twin)} if twin is not None else set()
                for line in output_lines(cell):
                    if not prose_like(line) or is_model_world(line) or CHAPTER_LINES.search(line):
                        continue
                    lines[1] += 1
                    if _norm(line) in theirs:
                        lines[0] += 1
                        english_lines[line] = english_lines.get(line, 0) + 1
            theirs = {c.text for c in comments(twin.source)} if twin is not None else set()
            for comment in comments(cell.source):
                if prose_words(comment.text) < 3 or comment.text.strip() in OWN_COMMENTS:
                    continue
                notes[1] += 1
                if comment.text in theirs:
                    notes[0] += 1
                    english_comments[comment.text] = english_comments.get(comment.text, 0) + 1
    return {"lines": tuple(lines), "comments": tuple(notes), "english_lines": english_lines,
            "english_comments": english_comments}


def share(language: str) -> dict[str, float]:
    measured = measure(language)
    return {kind: measured[kind][0] / max(measured[kind][1], 1) for kind in ("lines", "comments")}


def main(languages: list[str]) -> int:
    for language in languages:
        m = measure(language)
        for kind in ("lines", "comments"):
            english, total = m[kind]
            print(f"{language}: {english} of {total} prose-like {kind} are English "
                  f"({100 * english / max(total, 1):.0f} %)")
        for line, n in sorted(m["english_lines"].items(), key=lambda kv: -kv[1])[:25]:
            print(f"   {n:3}  {line[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["bg", "hu"]))
