"""``make book``: the companion as a website, in English, Bulgarian and Hungarian, from the committed notebooks.

    python -m book                 # into _book/ (ignored by git); its last line names the index.html to open
    python -m book --out DIR       # elsewhere (tests/test_book.py builds into a temporary folder)

Nothing is executed: the notebooks' outputs are the committed ones (the reference, docs/developing.md). Copies are
staged in ``OUT/build/<language>/source`` and changed there, never the committed files:

* a section notebook's code without nbgrader's markers (``### BEGIN SOLUTION``, ``### END SOLUTION``): the code the
  section builds, as a reader reads it;
* an exercise notebook titled as an exercise (``Exercise 02 · The turn cap``, in the page's language), with a note
  under its title saying what it is and linking to its section; the error a cell shows because the piece is not
  written yet (a traceback of ``NotImplementedError`` or of what the stub broke) replaced by one line saying that the
  reader's code goes there and runs in JupyterLab;
* a slider's cell followed by a line saying that a slider cannot move on a static page (the plot above it is the one
  drawn for the committed value);
* an index a language (the chapter's title, how to read the companion, the two commands), and the English glossary,
  made from the Bulgarian and Hungarian ones (the English notebooks have none of their own).

Sphinx then builds each language (``book/conf.py``), the three at once, in ``OUT/build/<language>``; each notebook
as committed is copied beside its page for download (``_notebooks/``), and the pages move to ``OUT/html/<language>``
once every language has built.
``OUT/html/index.html`` lets the reader pick a language. The folder ``OUT/html`` is the whole site: it reads from
``file://`` as from any static host (docs/book.md)."""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .text import LANGUAGES, NAMES, TEXT

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
OUT = ROOT / "_book"
NOTEBOOKS = {"en": ROOT / "notebooks", "bg": ROOT / "notebooks" / "bg", "hu": ROOT / "notebooks" / "hu"}
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*$")
TITLE = re.compile(r"^# (\d\d) · (.+)$")
SLIDER = "await slider("


class BookError(Exception):
    """The book cannot be built: what is missing or what failed, in a sentence."""


# -- the notebooks, staged ----------------------------------------------------------------------------------------
def sections(folder: Path) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]-*.ipynb"))


def exercises(folder: Path) -> list[Path]:
    return sorted((folder / "exercises").glob("[0-9][0-9]-*.ipynb"))


def _lines(source) -> list[str]:
    return ("".join(source) if isinstance(source, list) else source).splitlines(keepends=True)


def without_markers(source) -> str:
    """A cell's code without nbgrader's solution markers (the lines, whole)."""
    return "".join(line for line in _lines(source) if not SOLUTION_MARKER.match(line.rstrip("\n")))


def _note(text: str, css: str) -> dict:
    """An output the book adds: one paragraph (inline code as in Markdown), and its plain text."""
    shown = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/html": f'<p class="{css}">{shown}</p>', "text/plain": text}}


def stage_section(nb: dict, language: str) -> dict:
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = without_markers(cell["source"])
            if SLIDER in "".join(cell["source"]):
                cell["outputs"].append(_note(TEXT[language]["slider"], "book-static-note"))
    return nb


def stage_exercise(nb: dict, language: str, name: str) -> tuple[dict, str]:
    """The exercise notebook staged, and its section's title (``02 · The turn cap``), for the index."""
    text = TEXT[language]
    first = nb["cells"][0]
    lines = _lines(first["source"])
    found = TITLE.match(lines[0].rstrip("\n")) if lines else None
    if first["cell_type"] != "markdown" or found is None:
        raise BookError(f"exercises/{name}: its first cell is not a title `# NN · Title`")
    number, title = found.groups()
    note = text["exercise note"].format(section=f"{number} · {title}", target=f"../{name}")
    first["source"] = "".join([f"# {text['exercise']} {number} · {title}\n", "\n",
                               f"```{{admonition}} {text['exercise']}\n:class: book-exercise\n{note}\n```\n",
                               *lines[1:]])
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        broken = any(output["output_type"] == "error" for output in cell["outputs"])
        cell["outputs"] = [_note(text["stub"], "book-stub-note") if output["output_type"] == "error" else output
                           for output in cell["outputs"]]
        if SLIDER in "".join(cell["source"]) and not broken:   # a slider the stub broke drew nothing
            cell["outputs"].append(_note(text["slider"], "book-static-note"))
    return nb, f"{number} · {title}"


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(nb: dict, path: Path) -> None:
    nb.get("metadata", {}).pop("widgets", None)   # a live widget's state: nothing a static page can draw
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def glossary_table(path: Path) -> dict[str, tuple[str, str]]:
    """The first table of a translated glossary: the English notebooks' word -> (the language's, the code's)."""
    rows, started = {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 3 and not set(cells[0]) <= set("- "):
                if started:
                    rows[cells[1]] = (cells[0], cells[2])
                started = True
        elif started:
            break
    return rows


def english_glossary() -> str:
    """The English book's glossary: the terms the Bulgarian and Hungarian glossaries list, by their English."""
    text = TEXT["en"]
    bg = glossary_table(NOTEBOOKS["bg"] / "glossary.md")
    hu = glossary_table(NOTEBOOKS["hu"] / "glossary.md")
    if not bg or not hu:
        raise BookError("notebooks/bg/glossary.md or notebooks/hu/glossary.md has no table of terms")
    rows = [f"| {' | '.join(['---'] * 4)} |"]
    for english in [*bg, *(term for term in hu if term not in bg)]:
        # the code's names only: the glossaries say around them, in their language, what kind of name each is
        code = ", ".join(re.findall(r"`[^`]+`", (bg.get(english) or hu.get(english))[1])) or "—"
        rows.append(f"| {english} | {code} | {bg.get(english, ('', ''))[0]} | {hu.get(english, ('', ''))[0]} |")
    links = ", ".join(f'<a href="../{code}/glossary.html" hreflang="{code}">{NAMES[code]}</a>' for code in ("bg", "hu"))
    return "\n".join([f"# {text['glossary']}", "", f"{text['glossary intro']} ({links})", "",
                      f"| {text['glossary columns']} |", *rows, ""])


def index(language: str, section_names: list[str], exercise_names: list[tuple[str, str]]) -> str:
    text = TEXT[language]

    def toctree(caption: str, entries: list[str]) -> str:
        return "\n".join(["```{toctree}", *([f":caption: {caption}"] if caption else []), ":maxdepth: 1", "",
                          *entries, "```", ""])

    return "\n".join([
        f"# {text['title']}", "", text["index"],
        toctree(text["sections"], section_names),
        toctree(text["exercises"], [f"{title} <exercises/{name}>" for name, title in exercise_names]),
        toctree("", ["glossary"])])


def stage(language: str, source: Path) -> list[str]:
    """Stage one language's book in ``source``; returns its pages' names, in the book's order."""
    folder = NOTEBOOKS[language]
    if source.exists():
        shutil.rmtree(source)
    section_paths, exercise_paths = sections(folder), exercises(folder)
    if not section_paths:
        raise BookError(f"no notebooks in {folder}: run this from the project's folder")
    for path in section_paths:
        _write(stage_section(_read(path), language), source / path.name)
    titled = []
    for path in exercise_paths:
        nb, title = stage_exercise(_read(path), language, path.name)
        titled.append((path.stem, title))
        _write(nb, source / "exercises" / path.name)
    glossary = english_glossary() if language == "en" else (folder / "glossary.md").read_text(encoding="utf-8")
    (source / "glossary.md").write_text(glossary, encoding="utf-8")
    (source / "index.md").write_text(index(language, [p.stem for p in section_paths], titled), encoding="utf-8")
    if (HERE / "locale" / language).exists():
        stage_locale(language, source / "_locale")
    return ["index", *(p.stem for p in section_paths), *(f"exercises/{p.stem}" for p in exercise_paths), "glossary"]


def stage_locale(language: str, locale: Path) -> None:
    """The theme's labels in ``language`` (book/locale): the catalogue Sphinx compiles for the pages' templates, and
    the search page's messages, which its script reads from ``sphinx.js``: Sphinx's own for the language, with ours
    over it (Sphinx reads the first ``sphinx.js`` its ``locale_dirs`` hold, not both)."""
    from babel.messages.pofile import read_po
    from sphinx import package_dir

    folder = locale / language / "LC_MESSAGES"
    folder.mkdir(parents=True)
    po = HERE / "locale" / language / "LC_MESSAGES" / "sphinx.po"
    shutil.copyfile(po, folder / "sphinx.po")
    messages, plural = {}, "(n != 1)"
    ours = Path(package_dir) / "locale" / language / "LC_MESSAGES" / "sphinx.js"
    if ours.exists():
        found = re.search(r"Documentation\.addTranslations\((.*)\);?\s*$", ours.read_text(encoding="utf-8"), re.S)
        if found is None:
            raise BookError(f"{ours}: not the translations file Sphinx writes")
        sphinx_js = json.loads(found.group(1))
        messages = {key: value for key, value in sphinx_js["messages"].items() if value}   # untranslated: the key
        plural = sphinx_js.get("plural_expr", plural)
    with po.open("rb") as f:
        catalog = read_po(f, locale=language)
    for message in catalog:
        if message.id and message.string:
            key = message.id[0] if isinstance(message.id, tuple) else message.id
            messages[key] = list(message.string) if isinstance(message.string, tuple) else message.string
    # Number(...): Sphinx's script indexes a plural's forms with the expression's value, and "(n != 1)" is a boolean
    # there (forms[true] is undefined: the search's last line failed in every language with a plural translated).
    translations = {"locale": language, "messages": messages, "plural_expr": f"Number({plural})"}
    (folder / "sphinx.js").write_text(f"Documentation.addTranslations({json.dumps(translations, indent=1)});\n",
                                      encoding="utf-8")


# -- Sphinx, the three languages at once ----------------------------------------------------------------------------
def _sphinx(language: str, source: Path, html_out: Path, doctrees: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(HERE), "-d", str(doctrees),
               "-D", f"language={language}", str(source), str(html_out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # In the sources' folder: Sphinx looks for a language's sphinx.js in locale_dirs from there.
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=source)


def landing() -> str:
    """OUT/html/index.html: the chapter's title in each language, each a link to that language's book."""
    items = "\n".join(f'    <li lang="{code}"><a href="{code}/index.html" hreflang="{code}">{html.escape(NAMES[code])}'
                      f'</a>: {html.escape(TEXT[code]["title"])}</li>' for code in LANGUAGES)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{html.escape(TEXT["en"]["title"])}</title>
  <style>
    body {{ font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; padding: 0 1rem;
           line-height: 1.5; }}
    li {{ margin: 0.5rem 0; }}
  </style>
</head>
<body>
  <h1>{html.escape(TEXT["en"]["title"])}</h1>
  <ul>
{items}
  </ul>
</body>
</html>
"""


def build(out: Path = OUT, languages=LANGUAGES) -> dict:
    """Stage and build every language into ``out``; returns the index to open, each language's pages and the
    warnings Sphinx printed (none, as configured). Raises ``BookError`` when a build fails."""
    try:
        import myst_nb  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError as e:
        raise BookError(f"the book needs the `book` extra ({e.name} is missing): make book installs it, or "
                        "pip install -e '.[book]'") from e
    out = Path(out)
    pages, running, warnings = {}, {}, {}
    for language in languages:
        # A language's own folder: myst-nb writes beside Sphinx's output folder (jupyter_execute/), which the three
        # builds, side by side, would otherwise share, and which is no part of the site.
        work = out / "build" / language
        pages[language] = stage(language, work / "source")
        if (work / "html").exists():
            shutil.rmtree(work / "html")
        running[language] = _sphinx(language, work / "source", work / "html", work / "doctrees")
    failed = []
    for language, process in running.items():
        _, stderr = process.communicate()
        warnings[language] = [line for line in stderr.splitlines() if line.strip()]
        if process.returncode != 0:
            failed.append(f"{language}: sphinx exited with {process.returncode}\n{stderr[-3000:]}")
    if failed:
        raise BookError("the book did not build: " + "\n".join(failed))
    (out / "html").mkdir(parents=True, exist_ok=True)
    for language in languages:
        html_out = out / "build" / language / "html"
        for name in pages[language]:
            original = NOTEBOOKS[language] / f"{name}.ipynb"
            if original.exists():
                target = html_out / "_notebooks" / f"{name}.ipynb"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(original, target)
        site = out / "html" / language
        if site.exists():
            shutil.rmtree(site)
        html_out.rename(site)   # the language's pages replace the last build's only once all of them are built
    (out / "html" / "index.html").write_text(landing(), encoding="utf-8")
    return {"index": out / "html" / "index.html", "pages": pages, "warnings": warnings}


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the folder to build into (default: _book/)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        built = build(args.out)
    except BookError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for language, lines in built["warnings"].items():
        for line in lines:
            print(f"{language}: {line}", file=sys.stderr)
    for language in built["pages"]:
        folder = args.out / "html" / language
        print(f"{NAMES[language]}: {len(built['pages'][language])} pages, {_size(folder) / 1e6:.1f} MB, "
              f"{folder.resolve() / 'index.html'}")
    print(f"built in {time.perf_counter() - started:.0f} s; open {built['index'].resolve()}")
    return 0
