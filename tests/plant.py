"""Plant bugs in the marked solutions, one at a time, and count how many each notebook's check catches.

    .venv/bin/python tests/plant.py                  # every section notebook with a check
    .venv/bin/python tests/plant.py 02-turn-cap -v   # one, listing every bug that got through

The bugs are small edits of the code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nothing outside:
that is not the reader's to write), the kind a learner makes: a comparison flipped or loosened (``>=`` to ``>``),
a number off by one, ``+=`` written ``=``, ``and`` for ``or``, a condition negated, a statement left out, a string
changed (a status, a key). Each planted version runs the notebook's check cell, as ``tests/test_checks.py`` does; it
is caught when a case fails (a difference, a raise, a hang). What gets through is either a gap in the check or a
bug that changes nothing the section is about (an equivalent edit): read each. Not part of ``make test``: it runs
every check some hundred times.
"""

from __future__ import annotations

import argparse
import ast
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from built_cells import build_cells  # noqa: E402
from checked import report, stems_with_checks  # noqa: E402

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SWAP = {ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
        ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.And: ast.Or, ast.Or: ast.And}


def regions(source: str) -> list[range]:
    """The line numbers (1-based) inside each marked solution."""
    lines, found, start = source.splitlines(), [], None
    for n, line in enumerate(lines, 1):
        if line.strip() == BEGIN:
            start = n + 1
        elif line.strip() == END and start is not None:
            found.append(range(start, n))
            start = None
    return found


def _inside(node: ast.AST, lines: list[range]) -> bool:
    return hasattr(node, "lineno") and any(node.lineno in r and node.end_lineno in r for r in lines)


def sites(tree: ast.Module, lines: list[range]) -> list[tuple[ast.AST, str, str]]:
    """(node, kind, what) for every edit this tree admits inside the solution lines."""
    out = []
    for node in ast.walk(tree):
        if not _inside(node, lines):
            continue
        line = node.lineno
        if isinstance(node, ast.Compare):
            out += [(node, f"cmp{i}", f"line {line}: {type(op).__name__} -> {SWAP[type(op)].__name__}")
                    for i, op in enumerate(node.ops) if type(op) in SWAP]
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in SWAP:
            out.append((node, "op", f"line {line}: {type(node.op).__name__} -> {SWAP[type(node.op)].__name__}"))
        if isinstance(node, ast.AugAssign):
            out.append((node, "assign", f"line {line}: {type(node.op).__name__}= -> ="))
        elif isinstance(node, ast.BoolOp):
            out.append((node, "bool", f"line {line}: {type(node.op).__name__} -> {SWAP[type(node.op)].__name__}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            out.append((node, "int", f"line {line}: {node.value} -> {node.value + 1}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value and \
                not isinstance(getattr(node, "_parent", None), ast.Expr):
            out.append((node, "str", f"line {line}: {node.value[:30]!r} -> 'x'"))
        elif isinstance(node, (ast.If, ast.While)):
            out.append((node, "not", f"line {line}: condition negated"))
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                out += [(node, f"drop:{field}:{i}", f"line {s.lineno}: `{_first(s)}` left out")
                        for i, s in enumerate(body) if isinstance(s, ast.stmt) and _inside(s, lines)
                        and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return out


def _first(statement: ast.stmt) -> str:
    return ast.unparse(statement).splitlines()[0][:50]


def plant(node: ast.AST, kind: str) -> None:
    if kind.startswith("cmp"):
        i = int(kind[3:])
        node.ops[i] = SWAP[type(node.ops[i])]()
    elif kind in ("op", "bool"):
        node.op = SWAP[type(node.op)]()
    elif kind == "int":
        node.value += 1
    elif kind == "str":
        node.value = "x"
    elif kind == "not":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif kind.startswith("drop"):
        _, field, i = kind.split(":")
        getattr(node, field)[int(i)] = ast.Pass()


def mutants(stem: str):
    """(description, namespace-making sources) for every bug planted in the notebook's build cells, one at a time."""
    sources = build_cells(stem)
    for k, source in enumerate(sources):
        lines = regions(source)
        if not lines:
            continue
        tree = ast.parse(source)
        for p in ast.walk(tree):
            for child in ast.iter_child_nodes(p):
                child._parent = p  # type: ignore[attr-defined]
        for n, (_, _, what) in enumerate(sites(tree, lines)):
            planted = copy.deepcopy(tree)
            node, kind_, _ = sites(planted, lines)[n]
            plant(node, kind_)
            if isinstance(node, ast.AugAssign) and kind_ == "assign":   # x += y -> x = y
                fixed = ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)
                _replace(planted, node, fixed)
            yield f"build cell {k + 1}, {what}", sources[:k] + [ast.unparse(ast.fix_missing_locations(planted))] + \
                sources[k + 1:]


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and old in value:
                value[value.index(old)] = new


def namespace(stem: str, sources: list[str]) -> dict:
    ns: dict = {"__name__": f"planted_{stem.replace('-', '_')}"}
    for n, source in enumerate(sources, 1):
        exec(compile(source, f"<{stem}, planted, build cell {n}>", "exec", dont_inherit=True), ns)  # noqa: S102
    return ns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stems", nargs="*", help="notebooks (default: every one with a check)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every bug that got through")
    args = parser.parse_args(argv)
    total_caught = total = 0
    for stem in args.stems or stems_with_checks():
        caught, missed, started = 0, [], time.perf_counter()
        for what, sources in mutants(stem):
            try:
                got = report(stem, namespace=namespace(stem, sources))
                ok = got.ok
            except Exception as error:  # noqa: BLE001 - a bug that breaks the cell's definitions: caught at once
                ok, what = False, f"{what} ({type(error).__name__} defining it)"
            if ok:
                missed.append(what)
            else:
                caught += 1
        n = caught + len(missed)
        total_caught, total = total_caught + caught, total + n
        print(f"{stem}: {caught} of {n} planted bugs caught ({time.perf_counter() - started:.0f} s)", flush=True)
        if args.verbose:
            print("".join(f"   got through: {m}\n" for m in missed), end="")
    print(f"all: {total_caught} of {total} planted bugs caught")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
