"""The exercise notebooks, made from the section notebooks: one source, the solutions cleared.

    python -m harness_lib.chapter.exercises            # write notebooks/exercises/ (executed) and bg/, hu/ beside
    python -m harness_lib.chapter.exercises 02-turn-cap.ipynb   # one of them (and the translations)
    python -m harness_lib.chapter.exercises --check    # exit 1, naming each exercise notebook that is stale

A section notebook keeps the reference solution of each piece the reader builds between nbgrader's markers,
``### BEGIN SOLUTION`` and ``### END SOLUTION``, inside the piece (after its signature and docstring). Its exercise
notebook is the same notebook, prose and all, with each marked region replaced by ``# YOUR CODE HERE`` and
``raise NotImplementedError`` at the region's indentation, as nbgrader's ClearSolutions does. A cell that calls a
cleared piece (directly, or through a name such a cell sets) is tagged ``raises-exception``: run before the reader
has written the piece, it says so in one line (``cells.one_line_stubs``) and Run All goes on. The cells tagged
``check`` run the section's check on the reader's piece: in an exercise notebook as executed here, each says "not
written yet". The English exercise notebooks are executed (their outputs are what a reader sees before writing a
line, and what nbval compares); the Bulgarian and Hungarian ones are built from them and the catalogues, as the
translated section notebooks are (``translations``).
"""

from __future__ import annotations

import argparse
import ast
import copy
import sys
from pathlib import Path

from .nbformat_fast import nbformat

NOTEBOOKS = Path("notebooks")   # the project's, relative: run from the project's folder
FOLDER = "exercises"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError")
RAISES = "raises-exception"
BUILD, CHECK = "build", "check"


class ExerciseError(Exception):
    """A section notebook whose markers cannot be cleared: one line naming the notebook, the cell and the line."""


def clear(source: str, where: str = "a cell") -> str:
    """``source`` with every region between the markers replaced by the stub, at the BEGIN marker's indentation."""
    out: list[str] = []
    inside = None
    for n, line in enumerate(source.splitlines(), 1):
        mark = line.strip()
        if mark == BEGIN:
            if inside is not None:
                raise ExerciseError(f"{where}, line {n}: {BEGIN} inside another solution (line {inside})")
            inside = n
            indent = line[:len(line) - len(line.lstrip())]
            out += [indent + STUB[0], indent + STUB[1]]
        elif mark == END:
            if inside is None:
                raise ExerciseError(f"{where}, line {n}: {END} without a {BEGIN} above it")
            inside = None
        elif inside is None:
            out.append(line)
    if inside is not None:
        raise ExerciseError(f"{where}, line {inside}: {BEGIN} never ended with {END}")
    return "\n".join(out)


def solved(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def _tree(source: str) -> ast.Module:
    from IPython.core.inputtransformer2 import TransformerManager
    python = TransformerManager().transform_cell(source)   # %magics and !commands as the kernel runs them
    return compile(python, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _bound(tree: ast.Module) -> set[str]:
    """The names a cell binds at its top level (imports apart: they never fail for want of a reader's piece)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names


def _used(node: ast.AST, local: frozenset = frozenset()) -> set[str]:
    """The names ``node`` reads from the notebook's namespace: a function's or lambda's own parameters, and the
    targets of a comprehension, are not the namespace's."""
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) and node.id not in local else set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        local = local | {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        local = local | {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    return set().union(*(_used(child, local) for child in ast.iter_child_nodes(node)))


def _defined(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def exercise(nb):
    """The exercise notebook of section notebook ``nb``: a copy with its solutions cleared, the cells that would
    fail for want of them tagged ``raises-exception``, no outputs."""
    nb = copy.deepcopy(nb)
    cleared: set[str] = set()    # the pieces left for the reader, and the names only cells calling them set
    bound: set[str] = set()      # names some cell not calling them binds
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        tree = _tree(cell.source)
        if solved(cell.source):
            cell.source = clear(cell.source, f"cell {cell.get('id', '?')}")
            cleared |= _defined(tree)
        elif CHECK not in tags and BUILD not in tags and (_used(tree) - _bound(tree)) & cleared:
            cleared |= _bound(tree) - bound
            tags.append(RAISES) if RAISES not in tags else None
        else:
            bound |= _bound(tree)
        if tags:
            cell.metadata["tags"] = tags
        cell.outputs, cell.execution_count = [], None
    return nb


def path_of(section: Path) -> Path:
    return section.parent / FOLDER / section.name


def sections(root: Path = NOTEBOOKS) -> list[Path]:
    """The section notebooks that have something to clear."""
    return [p for p in sorted(root.glob("*.ipynb"))
            if any(c.cell_type == "code" and solved(c.source) for c in nbformat.read(p, as_version=4).cells)]


def _sources(nb) -> list[tuple]:
    return [(c.cell_type, c.get("id"), c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]


def stale(root: Path = NOTEBOOKS) -> list[str]:
    """The exercise notebooks whose cells are not what their section notebook makes (outputs aside: nbval
    compares those), and those whose section is gone."""
    problems = []
    made = {path_of(p).name: exercise(nbformat.read(p, as_version=4)) for p in sections(root)}
    for name, nb in made.items():
        path = root / FOLDER / name
        if not path.exists():
            problems.append(f"{path}: missing: run `python -m harness_lib.chapter.exercises`")
        elif _sources(nbformat.read(path, as_version=4)) != _sources(nb):
            problems.append(f"{path}: not what {root / name} makes: run `python -m harness_lib.chapter.exercises`")
    problems += [f"{p}: its section notebook has no solution to clear: remove it"
                 for p in sorted((root / FOLDER).glob("*.ipynb")) if p.name not in made]
    return problems


def write(root: Path = NOTEBOOKS, only: list[str] | None = None) -> list[Path]:
    """Write and execute the English exercise notebook of each section notebook (of those named in ``only``, by
    file name, when given); remove those whose section has nothing left to clear. The paths written."""
    from .notebooks import execute as run_notebook
    from .notebooks import strip
    from .translations import notebook_text

    written = []
    (root / FOLDER).mkdir(exist_ok=True)
    made = sections(root)
    for section in made:
        if only and section.name not in only:
            continue
        target = path_of(section)
        target.write_text(notebook_text(strip(exercise(nbformat.read(section, as_version=4)))), encoding="utf-8")
        run_notebook(target)
        written.append(target)
    for orphan in sorted((root / FOLDER).glob("*.ipynb")):
        if orphan.name not in {s.name for s in made}:
            orphan.unlink()
    return written


def translated(root: Path = NOTEBOOKS, locale: Path | None = None) -> dict:
    """The Bulgarian and Hungarian exercise notebooks: {language: {name: (notebook, [Stale...])}}, each the English
    exercise notebook with its markdown translated (the section notebook's cells have the same ids and text, so
    their translations serve) and its setup cell speaking the language, made as ``translations.translate`` makes a
    section notebook's, to be executed."""
    from . import translations as tr

    out: dict = {}
    for language in tr.LANGUAGES:
        catalog = tr.read_catalogue(tr.catalogue_path(language, locale or tr.LOCALE), language)
        out[language] = {p.name: tr.translate(p, catalog, language, FOLDER)
                         for p in sorted((root / FOLDER).glob("*.ipynb"))}
    return out


def translated_stale(root: Path = NOTEBOOKS, locale: Path | None = None) -> list[str]:
    """What differs between the translated exercise notebooks on disk and what the English ones and the catalogues
    make: untranslated cells, files missing, left over or out of date."""
    from . import translations as tr

    problems = []
    for language, made in translated(root, locale).items():
        folder = root / language / FOLDER
        stamp = tr.catalogue_stamp(language, locale or tr.LOCALE)
        for name, (nb, left) in made.items():
            path = folder / name
            problems += [str(s) for s in left]
            if not left and not path.exists():
                problems.append(f"{path}: missing: run `python -m harness_lib.chapter.exercises`")
            elif not left:
                on_disk = nbformat.read(path, as_version=4)
                problems += tr.differences(nb, on_disk, str(path), stamp)
                if tr.unexecuted(on_disk):
                    problems.append(f"{path}: not executed: run `python -m harness_lib.chapter.exercises`")
        problems += [f"{p}: its English exercise notebook is gone: remove it"
                     for p in sorted(folder.glob("*.ipynb")) if p.name not in made]
    return problems


def write_translated(root: Path = NOTEBOOKS, locale: Path | None = None, again: bool = False) -> list[Path]:
    """Write and execute the translated exercise notebooks whose cells are all translated and which are not what
    the English and the catalogues make (all of them, with ``again``); the paths written."""
    from . import translations as tr

    todo = []
    for language, made in translated(root, locale).items():
        folder = root / language / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        stamp = tr.catalogue_stamp(language, locale or tr.LOCALE)
        for name, (nb, left) in made.items():
            path = folder / name
            if not left and (again or tr.needs_writing(nb, path, stamp)):
                todo.append((nb, path, stamp))
        for orphan in sorted(folder.glob("*.ipynb")):
            if orphan.name not in made:
                orphan.unlink()
    return tr.write_and_execute(todo, say=lambda line: print(line, flush=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_lib.chapter.exercises",
                                     description="Make the exercise notebooks from the section notebooks.")
    parser.add_argument("notebooks", nargs="*", help="section notebooks' file names (default: every one)")
    parser.add_argument("--check", action="store_true", help="only say which exercise notebooks are stale")
    parser.add_argument("--again", action="store_true", help="execute every translated exercise notebook again")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = stale() + translated_stale()
            print("\n".join(problems) or "every exercise notebook is what its section notebook makes")
            return 1 if problems else 0
        for path in write(only=[Path(n).name for n in args.notebooks]) + write_translated(again=args.again):
            print(f"wrote {path}")
    except ExerciseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
