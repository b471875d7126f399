"""Sphinx's configuration for the book, one language a build (``-D language=bg``): myst-nb reads the notebooks
that ``book.build`` staged, as they were executed (never run here), and sphinx-book-theme lays them out. Nothing a
page loads comes from another host: the theme's scripts, styles and fonts are its own files in ``_static``, there
is no MathJax (the notebooks hold no formula: their dollars are inline code), no widget script, no launch button,
no link to the theme's site. ``book.build`` says where the sources are and what it changed in them."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # `book.text`, when Sphinx loads this file by its path

from book.text import LANGUAGES, NAMES, TEXT  # noqa: E402

extensions = ["myst_nb"]

# The notebooks as committed (book.build stages copies): never executed, their outputs are the reference's.
nb_execution_mode = "off"
nb_merge_streams = True                 # a cell's printed lines in one block, as JupyterLab shows them
nb_render_markdown_format = "myst"      # a Markdown output (09's story, 15's table) rendered, tables included
nb_ipywidgets_js = {}                   # no widget manager from a CDN: the sliders are said, not drawn live
myst_enable_extensions: list[str] = []  # no dollarmath: a `$` in prose is money, and no MathJax is needed

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_locale"]
templates_path = [str(HERE / "templates")]
html_static_path = [str(HERE / "static")]
html_css_files = ["book.css"]
locale_dirs = ["_locale"]               # the theme's labels in Bulgarian and Hungarian (book/locale, staged)

html_theme = "sphinx_book_theme"
html_copy_source = False                # each page links to its notebook as committed, not to a staged copy
html_show_sourcelink = False
html_show_sphinx = False
html_show_search_summary = False        # a result's summary is fetched, which a page opened from file:// cannot do
html_last_updated_fmt = None
html_context = {"default_mode": "auto"}  # light or dark as the reader's system is (unset: the theme logs an error)
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": False,       # it would offer the staged copy; book-languages.html links the committed one
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "article_header_start": ["toggle-primary-sidebar.html", "book-languages.html"],
    "navbar_persistent": [],            # one search field, the sidebar's, not a second in a header above it
    "footer_content_items": [],
    "navigation_with_keys": False,
}

language = "en"   # -D language=bg|hu: config_inited below gives each language its title


def _titles(app, config) -> None:
    if config.language not in LANGUAGES:
        raise ValueError(f"the book is written in {', '.join(LANGUAGES)}, not {config.language!r}")
    text = TEXT[config.language]
    config.project = text["title"]
    config.html_title = text["title"]
    config.html_short_title = text["short"]
    config.html_theme_options = {**config.html_theme_options, "search_bar_text": text["search"]}
    if config.language == "bg":
        # Sphinx's search knows no Bulgarian: its plain splitter (Unicode words, no stemming) finds Cyrillic words
        # as they are written; without this line it says so in a warning and does the same.
        config.html_search_language = "en"


def _page(app, pagename, templatename, context, doctree) -> None:
    """The language switch (the same page in each language) and, on a notebook's page, the notebook to download."""
    up = "../" * pagename.count("/")
    here = app.config.language
    context["book_languages"] = [
        {"code": code, "name": NAMES[code], "href": f"{up}../{code}/{pagename}.html", "current": code == here}
        for code in LANGUAGES]
    context["book_languages_label"] = TEXT[here]["languages"]
    source = app.env.doc2path(pagename, False) if pagename in app.env.all_docs else None
    if source is not None and str(source).endswith(".ipynb"):
        context["book_download"] = {"href": f"{up}_notebooks/{pagename}.ipynb", "label": TEXT[here]["download"],
                                    "name": f"{pagename.rsplit('/', 1)[-1]}.ipynb"}


def setup(app):
    app.connect("config-inited", _titles)
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True}
