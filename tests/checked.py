"""A notebook's check cell, run in tests as the notebook runs it: on the pieces its build cells define, the
reference (the section notebook), a stub (its exercise notebook) or a wrong version (a mistake of
``tests/mistakes.py`` applied to the reference's source).

``report(stem)`` executes the build cells, then the cell tagged ``check`` (its imports, then its last line,
``await check(...)``), and returns the ``Report``. The namespace is the notebook's own, so what is checked is what
the reader's cells define, and the check is called exactly as the notebook calls it."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import nbformat
from built_cells import NOTEBOOKS, load

from harness_lib.chapter import checking

CHECK = "check"


def check_cells(stem: str, folder: Path = NOTEBOOKS) -> list[str]:
    nb = nbformat.read(folder / f"{stem}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and CHECK in c.metadata.get("tags", [])]


def stems_with_checks() -> list[str]:
    return [p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")) if check_cells(p.stem)]


async def _run_check(source: str, namespace: dict):
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    module = compile(source, "<check cell>", "exec", flags=ast.PyCF_ONLY_AST | flags)
    *head, last = module.body
    if not isinstance(last, ast.Expr):
        raise ValueError("a check cell ends with `await check(...)`")
    body = compile(ast.Module(body=head, type_ignores=[]), "<check cell>", "exec", flags=flags)
    ran = eval(body, namespace)  # noqa: S307 - the notebook's own cell
    if asyncio.iscoroutine(ran):
        await ran
    value = eval(compile(ast.Expression(last.value), "<check cell>", "eval", flags=flags), namespace)  # noqa: S307
    return await value if asyncio.iscoroutine(value) else value


def parameters(stem: str, folder: Path = NOTEBOOKS) -> dict:
    """The notebook's parameters cell, as its defaults set them (a check cell may pass one on: 16's deadline)."""
    nb = nbformat.read(folder / f"{stem}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", []))
    values: dict = {}
    exec(cell.source, values)  # noqa: S102 - the notebook's own literals
    return {k: v for k, v in values.items() if not k.startswith("__")}


def report(stem: str, which: int = 0, namespace: dict | None = None, until_first_failure: bool = False):
    """The report of the notebook's ``which``-th check cell on ``namespace`` (default: the build cells' own) and the
    notebook's parameters, with the process's shared scripted provider, as in a kernel. ``until_first_failure``: the
    cases after the first that fails are not run (``checking.UNTIL_FIRST_FAILURE``)."""
    namespace = load(stem) if namespace is None else namespace
    for name, value in parameters(stem).items():
        namespace.setdefault(name, value)
    token = checking.UNTIL_FIRST_FAILURE.set(until_first_failure)
    try:
        return asyncio.run(_run_check(check_cells(stem)[which], namespace))
    finally:
        checking.UNTIL_FIRST_FAILURE.reset(token)
