"""The exercise notebooks come from the section notebooks (harness_lib/chapter/exercises.py): the solutions
between nbgrader's markers cleared, nothing else changed but a tag; never stale; in three languages; and what
a reader sees in one before writing a line is one line per check, not a traceback."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from harness_lib.chapter import exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SECTIONS = ex.sections(NOTEBOOKS)
NOT_WRITTEN = re.compile(r"^not written yet: write `\w+` in its cell above, where it says YOUR CODE HERE$")


def test_clear_replaces_each_region_with_the_stub_at_its_indentation():
    source = ("def f(x):\n    'doc'\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n\n"
              "X = 1\n### BEGIN SOLUTION\nZ = 2\n### END SOLUTION\n")
    assert ex.clear(source) == ("def f(x):\n    'doc'\n    # YOUR CODE HERE\n    raise NotImplementedError\n\n"
                                "X = 1\n# YOUR CODE HERE\nraise NotImplementedError")


@pytest.mark.parametrize("source, says", [
    ("### BEGIN SOLUTION\nx = 1\n", "line 1: ### BEGIN SOLUTION never ended"),
    ("x = 1\n### END SOLUTION\n", "line 2: ### END SOLUTION without a ### BEGIN SOLUTION above it"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "line 2: ### BEGIN SOLUTION inside another"),
])
def test_markers_that_do_not_pair_are_one_line_naming_the_line(source, says):
    with pytest.raises(ex.ExerciseError, match=re.escape(says)):
        ex.clear(source, "02-turn-cap cell 02-04")


def test_a_cell_that_needs_a_cleared_piece_is_tagged_and_no_other():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("N = 3", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("def piece(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
                                  metadata={"tags": ["build"]}),
        nbformat.v4.new_code_cell("await check(piece)", metadata={"tags": ["check"]}),
        nbformat.v4.new_code_cell("n = N\nmine = piece(n)"),                       # calls it
        nbformat.v4.new_code_cell("print(mine)"),                                   # needs what that cell sets
        nbformat.v4.new_code_cell("print(n)"),                                      # n was set before the call
        nbformat.v4.new_code_cell("mine = 2\nprint(mine)"),                         # sets it itself
        nbformat.v4.new_code_cell("f = lambda piece: piece + 1\nprint([mine for mine in range(N)])"),  # its own names
    ])
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="x")]
    made = ex.exercise(nb)
    tags = [c.metadata.get("tags", []) for c in made.cells]
    assert tags == [["parameters"], ["build"], ["check"], ["raises-exception"], ["raises-exception"],
                    ["raises-exception"], [], []]
    assert made.cells[1].source == "def piece(x):\n    # YOUR CODE HERE\n    raise NotImplementedError"
    assert all(c.outputs == [] for c in made.cells if c.cell_type == "code") and nb.cells[3].outputs  # a copy


def test_every_exercise_notebook_is_what_its_section_notebook_makes():
    assert SECTIONS, "no section notebook marks a solution"
    assert ex.stale(NOTEBOOKS) == []
    assert ex.translated_stale(NOTEBOOKS, ROOT / "locale") == []
    assert sorted(p.name for p in (NOTEBOOKS / "exercises").glob("*.ipynb")) == [p.name for p in SECTIONS]


def test_a_changed_section_notebook_makes_its_exercise_stale(tmp_path):
    shutil.copytree(NOTEBOOKS, tmp_path / "notebooks")
    section = tmp_path / "notebooks" / SECTIONS[0].name
    nb = nbformat.read(section, as_version=4)
    build = next(c for c in nb.cells if ex.solved(c.source))
    build.source = re.sub(rf"^([ \t]*){ex.END}", rf"\1pass\n\1{ex.END}", build.source,
                          flags=re.M)   # inside each solution, at its indentation: the same exercise
    nbformat.write(nb, section)
    assert ex.stale(tmp_path / "notebooks") == []
    nb.cells[0].source += " One more sentence."
    nbformat.write(nb, section)
    (tmp_path / "notebooks" / "exercises" / "99-gone.ipynb").write_text("{}")
    assert ex.stale(tmp_path / "notebooks") == [
        f"{tmp_path}/notebooks/exercises/{SECTIONS[0].name}: not what {section} makes: run "
        "`python -m harness_lib.chapter.exercises`",
        f"{tmp_path}/notebooks/exercises/99-gone.ipynb: its section notebook has no solution to clear: remove it"]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_filling_in_the_solutions_gives_back_the_section_notebook(section):
    """An exercise notebook with its stubs replaced by the section's solutions is the section notebook, cell for
    cell (a tag aside): the section notebook's committed run, every check passing, is the exercise solved."""
    mine, theirs = nbformat.read(ex.path_of(section), as_version=4), nbformat.read(section, as_version=4)
    assert len(mine.cells) == len(theirs.cells)
    for stub, solution in zip(mine.cells, theirs.cells):
        regions = re.findall(r"[ \t]*### BEGIN SOLUTION\n.*?### END SOLUTION", solution.source, flags=re.S)
        filled = stub.source
        for region in regions:
            indent = region[:len(region) - len(region.lstrip())]
            filled = filled.replace(f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError", region, 1)
        assert filled == solution.source
        tags = [t for t in stub.metadata.get("tags", []) if t != "raises-exception"]
        assert tags == solution.metadata.get("tags", [])


def _text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    return output.get("data", {}).get("text/plain", "")


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_before_a_line_is_written_each_check_says_one_line_and_only_tagged_cells_fail(section):
    nb = nbformat.read(ex.path_of(section), as_version=4)
    checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert checks
    for cell in checks:
        assert [NOT_WRITTEN.match(_text(o).strip()) is not None for o in cell.outputs] == [True], cell.outputs
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                assert "raises-exception" in cell.metadata.get("tags", []), cell.source
                if out.ename == "NotImplementedError":   # one line, not a traceback
                    assert len(out.traceback) == 1 and NOT_WRITTEN.match(out.traceback[0].split(": ", 1)[1])


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_in_the_section_notebook_every_check_passes(section):
    nb = nbformat.read(section, as_version=4)
    for cell in (c for c in nb.cells if "check" in c.metadata.get("tags", [])):
        text = "".join(_text(o) for o in cell.outputs)
        n = re.search(r"(\d+) of (\d+) cases pass$", text.strip()) or \
            re.search(r"your harness reproduces (\d+) of the (\d+) exact figures .*, and (\d+) of its (\d+) runs", text)
        assert n and n[1] == n[2] and (n.lastindex == 2 or n[3] == n[4]), text[-200:]   # 16, the capstone: runs too
