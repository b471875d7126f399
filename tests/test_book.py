"""The book (``make book``, docs/book.md) as readers get it: built once from the committed notebooks into a folder of
the test's own, its pages read as files, then opened in Debian's Chromium with the network off.

* every language's pages, in the book's order: the index, the sections 00 to 16, the exercises, the glossary; a
  section titled as the section, an exercise as an exercise (in the page's language), never the section's title
  again; Sphinx warned of nothing;
* every link and every file a page points to, inside the book, is there (anchors included), and so is each page's
  notebook to download, the committed file byte for byte;
* no page shows nbgrader's solution markers, no exercise page a traceback (a line saying the reader's code goes
  there instead), a Markdown output is a table, not pipes, and a slider's cell shows its plot and says it cannot
  move;
* nothing is loaded from another host: no page, style or script points outside the book (the few URLs the theme's
  scripts carry in comments and messages are listed, and a new one fails here until someone reads it);
* the build changed no committed file;
* in Chromium, every request outside ``file://`` refused and recorded (none may be made): a plot visible and a table
  rendered on an English page, a table wider than the text scrolling in its box (not the page), the language switch
  leading to the same page in Bulgarian and from Hungarian to English, and the search box finding a Bulgarian word,
  on a page opened from ``file://``.

Without the `book` extra (Sphinx, myst-nb, sphinx-book-theme: in `test` too, so `make test` has it), Chromium or
Playwright, the test is skipped, except under CI (``CI=true``), where that is a failure. ``HARNESS_BOOK_SHOTS=DIR``
keeps the browser's screenshots (docs/book-*.png are two of them)."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import sys
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))   # the book's builder, book/, beside harness_lib/ (not part of the package)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LANGUAGES = ("en", "bg", "hu")
FOLDERS = {"en": ROOT / "notebooks", "bg": ROOT / "notebooks" / "bg", "hu": ROOT / "notebooks" / "hu"}
EXERCISE = {"en": "Exercise", "bg": "Упражнение", "hu": "Feladat"}

pytestmark = pytest.mark.slow


def _required(what: str) -> None:
    message = f"the book's test needs {what}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: not skipped)")
    pytest.skip(message)


def _committed() -> dict[str, str]:
    """Every file under notebooks/ and book/, by its sha256: what the build must leave as it found it."""
    return {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in (ROOT / "notebooks", ROOT / "book") for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    try:
        import myst_nb  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError as e:
        _required(f"the `book` extra ({e.name}: pip install -e '.[test]')")
    from book import build

    before = _committed()
    out = tmp_path_factory.mktemp("book")
    built = build.build(out)
    return {**built, "html": out / "html", "changed": sorted(k for k, v in _committed().items() if before.get(k) != v)}


def _pages(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.html"))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _expected_order(language: str) -> list[str]:
    folder = FOLDERS[language]
    sections = [p.stem for p in sorted(folder.glob("[0-9][0-9]-*.ipynb"))]
    exercises = [f"exercises/{p.stem}" for p in sorted((folder / "exercises").glob("[0-9][0-9]-*.ipynb"))]
    return ["index", *sections, *exercises, "glossary"]


# -- the pages, read as files ----------------------------------------------------------------------------------
def test_the_build_warns_of_nothing_and_changes_no_committed_file(book):
    assert book["warnings"] == {language: [] for language in LANGUAGES}, book["warnings"]
    assert book["changed"] == [], f"the build changed committed files: {book['changed']}"
    assert book["index"].is_file() and all(f'href="{language}/index.html"' in _read(book["index"])
                                           for language in LANGUAGES)


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_has_its_pages_in_the_books_order(book, language):
    order = _expected_order(language)
    assert book["pages"][language] == order
    assert len(order) == 1 + 17 + 15 + 1, order     # the count: 17 sections, 15 exercises
    folder = book["html"] / language
    index = _read(folder / "index.html")
    sidebar = index[index.index('class="bd-links bd-docs-nav"'):]
    sidebar = sidebar[:sidebar.index("</nav>")]
    linked = [href.removesuffix(".html") if href != "#" else "index"   # the page itself: index
              for href in re.findall(r'<a class="[^"]*reference internal" href="([^"]+)"', sidebar)]
    assert linked == order, f"{language}: the sidebar lists {linked}"
    for name in order:
        page = _read(folder / f"{name}.html")
        title = _title(page)
        if name.startswith("exercises/"):
            section = _title(_read(folder / f"{name.split('/')[1]}.html"))
            assert title == f"{EXERCISE[language]} {section}", (name, title, section)
            assert re.search(r'<div class="[^"]*\bbook-exercise\b', page), f"{language}/{name}: not labelled"
        elif name not in ("index", "glossary"):
            assert re.match(r"\d\d · ", title) and not title.startswith(EXERCISE[language]), (name, title)


def _title(page: str) -> str:
    """The article's heading (a page has a second h1, without a link, in the table of contents for printing)."""
    found = re.search(r"<h1>([^<]*(?:<(?!/h1)[^<]*)*?)<a class=\"headerlink\"", page)
    assert found, "a page without its title"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


def _targets(page: str) -> list[str]:
    return re.findall(r'\s(?:href|src)="([^"]*)"', page)


def _ids(page: str) -> set[str]:
    return set(re.findall(r'\sid="([^"]*)"', page))


def test_every_link_inside_the_book_resolves(book):
    """Every href and src of every page: a file of the book, and the anchor on it when one is named."""
    root = book["html"].resolve()
    ids: dict[Path, set[str]] = {}
    broken, checked = [], 0
    for page in _pages(root):
        if "_static" in page.relative_to(root).parts:   # the theme's Jinja macros, copied as they are: not pages
            continue
        text = _read(page)
        for target in _targets(text):
            target = html.unescape(target)
            if not target or re.match(r"[a-z]+:", target):   # data: images; no other scheme (the next test)
                continue
            checked += 1
            path, _, anchor = urllib.parse.urldefrag(target)[0], None, urllib.parse.urldefrag(target)[1]
            goal = (page.parent / urllib.parse.unquote(path.split("?")[0])).resolve() if path else page
            if not goal.is_file() or not goal.is_relative_to(root):
                broken.append(f"{page.relative_to(root)}: {target}")
            elif anchor and goal.suffix == ".html":
                if goal not in ids:
                    ids[goal] = _ids(_read(goal))
                if anchor not in ids[goal]:
                    broken.append(f"{page.relative_to(root)}: {target} (no such anchor)")
    assert checked > 5_000, f"only {checked} links checked"
    assert not broken, f"{len(broken)} links lead nowhere: {broken[:10]}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_notebook_page_offers_its_committed_notebook(book, language):
    for name in book["pages"][language]:
        committed = FOLDERS[language] / f"{name}.ipynb"
        page = _read(book["html"] / language / f"{name}.html")
        if not committed.exists():
            assert 'class="book-download"' not in page, name
            continue
        href = re.search(r'class="book-download" href="([^"]+)"', page)
        assert href, f"{language}/{name}: no download link"
        offered = (book["html"] / language / f"{name}.html").parent / href.group(1)
        assert offered.read_bytes() == committed.read_bytes(), f"{language}/{name}: not the committed notebook"


def test_no_page_shows_solution_markers_or_an_exercises_traceback(book):
    marked = [p for p in _pages(book["html"]) if re.search(r"### (BEGIN|END) SOLUTION", _read(p))]
    assert not marked, f"pages with nbgrader's markers: {marked[:5]}"
    for language in LANGUAGES:
        for path in sorted((FOLDERS[language] / "exercises").glob("*.ipynb")):
            errors = sum(o["output_type"] == "error" for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                         for o in c.get("outputs", []))
            page = _read(book["html"] / language / "exercises" / f"{path.stem}.html")
            assert "Traceback" not in page and 'class="output traceback' not in page, f"{language}/{path.stem}"
            assert page.count('class="book-stub-note"') == errors, f"{language}/{path.stem}: {errors} errors"


def test_a_sliders_cell_shows_its_plot_and_says_it_cannot_move(book):
    for language in LANGUAGES:
        for name in ("02-turn-cap", "09-cancellation", "11-latency", "14-libraries"):
            page = _read(book["html"] / language / f"{name}.html")
            plot = page.find('<img src="data:image/png;base64,')
            note = page.find('class="book-static-note"')
            assert 0 <= plot < note, f"{language}/{name}: the slider's plot, then the note that it cannot move"


TABLE_RULE = re.compile(r"^\|(\s*:?-{2,}:?\s*\|)+\s*$", re.M)   # a Markdown table's line under its header


def test_markdown_outputs_are_rendered_as_tables(book):
    """A Markdown output (IPython's Markdown: 00's scenarios) is an HTML table on the page, not its pipes."""
    seen = 0
    for language in LANGUAGES:
        folder = FOLDERS[language]
        for path in sorted(folder.glob("[0-9][0-9]-*.ipynb")) + sorted(folder.glob("exercises/[0-9][0-9]-*.ipynb")):
            tables = sum(bool(TABLE_RULE.search("".join(o.get("data", {}).get("text/markdown", ""))))
                         for c in json.loads(path.read_text(encoding="utf-8"))["cells"] for o in c.get("outputs", []))
            if not tables:
                continue
            seen += tables
            page = _read(book["html"] / language / path.relative_to(folder).with_suffix(".html"))
            prose = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
            assert not re.search(r"\|\s*:?-{2,}", prose), f"{language}/{path.stem}: a table shown as pipes"
            assert prose.count("<table") >= tables, f"{language}/{path.stem}"
    assert seen >= 6, seen


# What the theme's scripts carry that names another host without loading it: an XML namespace, a comment, a
# message. A script that starts fetching from another host fails the browser test below; a new name here is read
# before it is listed.
NAMED_NOT_LOADED = {"www.w3.org", "snowballstem.org", "pydata-sphinx-theme.readthedocs.io", "developer.mozilla.org"}


def test_nothing_points_outside_the_book(book):
    outside = []
    for path in sorted(book["html"].rglob("*")):
        if path.suffix == ".html":
            # every attribute: a page loads and links only what the book holds (data: images are inside the page)
            for name, value in re.findall(r'\s([a-z-]+)="([^"]*)"', _read(path)):
                if re.match(r"\s*(https?:)?//", html.unescape(value)) and name != "xmlns":
                    outside.append(f"{path.name}: {name}={value[:80]}")
            outside += [f"{path.name}: {u}" for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^)'\"]+)",
                                                                 _read(path))]
        elif path.suffix == ".css":
            text = _read(path)
            outside += [f"{path.name}: {u}" for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^)'\"]+)", text)]
            outside += [f"{path.name}: @import {u}" for u in re.findall(r"@import\s+(?:url\()?['\"]?((?:https?:)?//"
                                                                          r"[^'\")\s;]+)", text)]
        elif path.suffix == ".js":
            hosts = {urllib.parse.urlsplit(u).hostname for u in re.findall(r"https?://[^\s\"'`)]+", _read(path))}
            outside += [f"{path.name}: {h}" for h in sorted(hosts - NAMED_NOT_LOADED - {None})]
    assert not outside, f"outside the book: {outside[:10]}"
    mathjax = [p.name for p in _pages(book["html"]) if re.search(r"<script[^>]*mathjax", _read(p), re.I)]
    assert not mathjax, f"pages that load MathJax: {mathjax[:5]}"


# -- in Chromium, offline ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        _required(f"{CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _required("playwright (pip install -e '.[test]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def test_a_reader_reads_plots_tables_switches_language_and_searches_offline(book, chromium, tmp_path):
    shots = Path(os.environ.get("HARNESS_BOOK_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    refused, errors, loaded = [], [], []

    def route(r):
        if r.request.url.startswith(("file:", "data:", "blob:")):
            loaded.append(r.request.url)
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("pageerror", lambda e: errors.append(str(e)))
    books = book["html"].resolve()

    # An English section: its plots drawn and a table rendered, as files from the disk.
    page.goto((books / "en" / "02-turn-cap.html").as_uri())
    plots = page.locator("div.cell_output img")
    assert plots.count() >= 4
    plot = plots.nth(1)
    plot.scroll_into_view_if_needed()
    assert plot.is_visible() and plot.evaluate("img => img.complete && img.naturalWidth > 300")
    table = page.locator("div.cell_output table", has_text="337299").first   # the runaway's four caps
    table.scroll_into_view_if_needed()
    assert table.is_visible() and table.locator("td").count() > 4 and "16259" in table.inner_text()
    wide = page.locator("div.cell_output .output", has_text="predicted_in").first   # the forecast's, wider than text
    assert wide.evaluate("box => box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX == 'auto'")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the page scrolls sideways"
    page.set_viewport_size({"width": 1200, "height": 900})
    plots.first.evaluate("img => { img.scrollIntoView({block: 'end'}); window.scrollBy(0, 16); }")
    page.screenshot(path=str(shots / "book-en.png"))   # a table, then a plot: docs/book-en.png

    # The language switch: the same page, in Bulgarian.
    page.get_by_role("link", name="Български").first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/bg/02-turn-cap.html"), page.url
    assert page.locator("html").get_attribute("lang") == "bg"
    assert page.locator("article.bd-article h1").first.inner_text().startswith("02 · Лимитът на ходовете")
    assert page.locator(".book-languages").inner_text().split()[:3] == ["English", "Български", "Magyar"]

    # Search, from the sidebar's field, for a Bulgarian word: the page that uses it is found.
    page.locator(".bd-sidebar-primary .search-button-field").click()
    field = page.locator("#pst-search-dialog input[name=q]")
    field.fill("ходовете")
    field.press("Enter")
    page.wait_for_load_state()
    assert "/bg/search.html?q=" in page.url, page.url
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for()
    found = [results.nth(i).get_attribute("href") for i in range(results.count())]
    assert any(href.startswith("02-turn-cap.html") for href in found), found
    page.locator("#search-results").get_by_text("Търсенето завърши").wait_for()   # Sphinx's words, in Bulgarian
    page.screenshot(path=str(shots / "book-bg-search.png"))

    # A Hungarian exercise: the stub's line instead of a traceback, the slider's plot, then back to English.
    page.goto((books / "hu" / "exercises" / "02-turn-cap.html").as_uri())
    assert page.locator("article.bd-article h1").first.inner_text().startswith("Feladat 02")
    assert page.locator(".book-stub-note").first.is_visible()
    slider = page.locator("div.cell_output img[src^='data:image/png']").first
    slider.scroll_into_view_if_needed()
    assert slider.is_visible() and slider.evaluate("img => img.complete && img.naturalWidth > 300")
    page.get_by_role("link", name="English").first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/en/exercises/02-turn-cap.html"), page.url
    assert page.locator("article.bd-article h1").first.inner_text().startswith("Exercise 02 · The turn cap")

    context.close()
    assert any(u.endswith("searchindex.js") for u in loaded), "the search page never loaded its index"
    assert not refused, f"requests outside file://: {refused[:5]}"
    assert not errors, f"errors on the pages: {errors[:5]}"
    if not os.environ.get("HARNESS_BOOK_SHOTS"):
        shutil.rmtree(tmp_path, ignore_errors=True)
