"""The harness a notebook builds, loaded from the notebook itself, so that a test can run it beside the library.

Every notebook writes its section's mechanism in cells tagged ``build`` (``View > Cell metadata`` in JupyterLab
shows the tag). ``load("01-loop")`` executes those cells, and only those, in order, in a fresh namespace, and
returns it: ``load("01-loop")["agent_loop"]`` is the reader's loop as the committed notebook writes it. A build
cell therefore imports what it uses and only defines (functions, classes, constants): it runs nothing, awaits
nothing. The tests in ``tests/built/`` run each notebook's small version and ``harness_lib`` on every scripted
scenario where the piece applies and compare status, turns, tokens, cost and tool runs: they fail when either
side changes alone.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import nbformat

from harness_lib.loop import Options, run
from harness_lib.state import new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TAG = "build"


def build_cells(stem: str, folder: Path | None = None) -> list[str]:
    """The sources of the notebook's ``build`` cells, in order (``folder``: notebooks/exercises, say)."""
    nb = nbformat.read((folder or NOTEBOOKS) / f"{stem}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and TAG in c.metadata.get("tags", [])]


def edited(sources: list[str], old: str, new: str) -> list[str]:
    """The build cells with ``old``, which must appear exactly once in them, replaced by ``new`` (a mistake)."""
    found = sum(source.count(old) for source in sources)
    if found != 1:
        raise LookupError(f"{old!r} appears {found} times in the build cells, not once: the mistake is stale")
    return [source.replace(old, new) for source in sources]


def load(stem: str, folder: Path | None = None, edits: tuple[tuple[str, str], ...] = ()) -> dict:
    """Execute the notebook's build cells in a fresh namespace and return it; ``edits``, (old, new) pairs: each
    ``old`` replaced by its ``new`` first (a mistake of tests/mistakes.py)."""
    sources = build_cells(stem, folder)
    if not sources:
        raise LookupError(f"notebooks/{stem}.ipynb has no cell tagged {TAG!r}")
    for old, new in edits:
        sources = edited(sources, old, new)
    namespace: dict = {"__name__": f"built_{stem.replace('-', '_')}"}
    for n, source in enumerate(sources, 1):
        tree = ast.parse(source, filename=f"{stem}, build cell {n}")
        ran = [node for node in tree.body if not isinstance(node, DEFINES)
               or isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)]  # a call, say
        if ran:
            raise ValueError(f"{stem}, build cell {n}, line {ran[0].lineno}: a build cell only defines "
                             f"(imports, functions, classes, constants); it has a {type(ran[0]).__name__}")
        # dont_inherit: compiled as the kernel compiles it, not under this file's `from __future__ import annotations`
        exec(compile(tree, f"<{stem}, build cell {n}>", "exec", dont_inherit=True), namespace)  # noqa: S102
    return namespace


DEFINES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
           ast.AnnAssign, ast.Expr)  # an Expr only as a string (a docstring)



def quick_tools():
    """The workspace's tools on a fresh copy, the slow scan made quick (0.05 s): what it returns is the same."""
    return Workspace.copy_of().tools(seconds=0.05)


def run_both(loop, url: str, scenario: str, **limits):
    """A notebook's small loop, called as ``loop(url, scenario, messages, tools, **limits)``, and ``harness_lib.run``
    with ``Options(**limits)`` (the same names: ``max_turns``, ``max_budget_usd``), each on a fresh workspace.
    Returns (what the loop returned, the messages it grew, the library's state)."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    mine = asyncio.run(loop(url, scenario, messages, quick_tools(), **limits))
    state = asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, scenario), quick_tools(), Options(base_url=url, **limits)))
    return mine, messages, state
