"""The README and the pages under docs/ say what is true: every page is linked from the README, every link
lands on a file and a heading that exist, and the figures they quote from elsewhere are the figures there
(the chapter's tally, from the figures table; the benchmarks' headline, from benchmarks/RESULTS.md; the
first run's output, from running it).

Which tests read which page: the README's two commands and its languages, tests/test_packaging.py and
tests/test_translations.py; the drawing of the layers in docs/developing.md, tests/test_layers.py; the
rest, this file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness_lib.chapter.figures import chapter_figures, compare, tally

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+://", target)]


def test_the_readme_links_every_page_under_docs():
    linked = {(README.parent / target.split("#")[0]).resolve() for target in _links(README)}
    pages = {page.resolve() for page in DOCS.glob("*.md")}
    assert pages, "no pages under docs/"
    missing = sorted(p.name for p in pages - linked)
    assert not missing, f"pages under docs/ the README does not link to (add them to 'Where to go next'): {missing}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_a_heading(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            broken.append(f"{target}: no such file")
        elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
            broken.append(f"{target}: no heading '{anchor}' in {goal.name} (it has {sorted(_anchors(goal))})")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_no_page_names_a_commit():
    """A commit hash in prose goes stale with the next commit: the pages say what is, not when it changed."""
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", h) and re.search(r"\d", h)]
        assert not hashes, f"{page.name} names commits: {hashes}"


def _readme_tally() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"its last line is the tally, after the report's name; on this machine the tally "
                      r"reads\s*`([^`]+)`", text)
    assert found, "the README no longer quotes make chapter's last line"
    return found.group(1)


def test_the_readmes_tally_is_the_line_a_full_reproduction_gives():
    """The line the README quotes is what `make chapter` prints when every figure it can measure comes back
    (the notebooks' own tests check that each does): the counts follow the figures table, which changes."""
    figures = chapter_figures()
    measured = {f.id: f.value for f in figures.itertuples() if f.kind != "unreproducible"}
    assert tally(compare(measured)) == _readme_tally()
    # with the `local` extra, the four of section 12 are measured on another model, as the README says
    local = {**measured, **{f.id: f.value for f in figures.itertuples() if f.kind == "unreproducible"}}
    said = "4 not reproducible here (4 measured here with another model)"
    assert tally(compare(local)) == _readme_tally().replace("4 not reproducible here", said)


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 3 and not set(cells[0]) <= set("-") and cells[0] != "harness":
            rows[cells[0]] = cells
    return rows


def test_the_benchmarks_headline_is_what_results_md_holds():
    """docs/benchmarks.md quotes a few columns of benchmarks/RESULTS.md, which `make bench` rewrites: the
    two must say the same, so a new run of the benchmark means a new headline."""
    headline = _rows((DOCS / "benchmarks.md").read_text(encoding="utf-8"))
    results = _rows((ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"))
    assert len(headline) >= 8
    for label, (_, median, floor, first_last, *_) in headline.items():
        assert label in results, f"docs/benchmarks.md's row '{label}' is not in benchmarks/RESULTS.md"
        measured = results[label]
        assert (median, floor, first_last) == (measured[1].split()[0], measured[2], measured[4]), \
            f"'{label}': docs/benchmarks.md says {median}, {floor}, {first_last}; RESULTS.md {measured[1:5]}"


def test_the_readmes_first_run_prints_what_the_readme_shows(capsys):
    """The run the README shows under "A first run" is what the command prints, every figure of it; only the
    wall time (ms=) is this machine's."""
    from harness_lib.cli import main

    text = README.read_text(encoding="utf-8")
    block = text[text.index("## A first run"):].split("```")[1].strip().splitlines()
    command, shown = block[0], block[1:block.index("")]
    assert command.startswith(".venv/bin/python -m harness_lib run plan"), command
    assert main(command.split()[3:]) == 0
    printed = capsys.readouterr().out.splitlines()

    def without_ms(lines):
        return [re.sub(r"ms=\d+", "ms=…", line) for line in lines]
    assert without_ms(printed) == without_ms(shown)


def test_the_readmes_python_run_prints_what_its_comment_says(capsys):
    """The README's Python block runs as written (its own scripted provider) and prints what its comment shows."""
    text = README.read_text(encoding="utf-8")
    code = text[text.index("```python"):].split("```")[1].removeprefix("python\n")
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    shown = re.search(r"# (completed .*)$", code, re.M).group(1)
    assert capsys.readouterr().out.strip() == shown
