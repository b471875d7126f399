"""Every parameter of every notebook, tried as a reader would (issue 19, item 5).

Each notebook declares its parameters once, in its section module (``PARAMETERS``: a ``params.Spec`` each), and
its setup cell checks them all (``params.check``) before anything runs. For every parameter this test sets, in
the notebook's own kernel, each value its spec must refuse (just past each bound, a wrong type) and runs the
parameters cell and the setup cell only: the refusal is one line, a ``ParameterError`` naming the parameter, from
the setup cell, never a traceback and never a later cell. Then it sets the values the spec must accept at both
ends of its range, one parameter at a time (the others at their defaults), and runs the notebook again from the
parameters cell: no cell fails or writes to stderr, and every cell shows the same kinds of output (text, tables,
plots) as with the defaults. One kernel per notebook; the provider outlives the re-runs, as in a reader's session.
Before the parameters, in the same kernel after Run All, every code cell runs once more on its own.
"""

from __future__ import annotations

import ast
import importlib
import math
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from output_kinds import kinds

from harness_lib.chapter import params

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))


def module_of(path: Path):
    """A notebook's section module: notebooks/05-tool-errors.ipynb -> harness_lib.chapter.s05_tool_errors."""
    return importlib.import_module(f"harness_lib.chapter.s{path.stem.replace('-', '_')}")


def cells(nb) -> tuple[int, int]:
    """Indexes of the parameters cell and of the setup cell (the code cell after it)."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    at = next(i for i in code if "parameters" in nb.cells[i].metadata.get("tags", []))
    return at, next(i for i in code if i > at)


def defaults(source: str) -> dict:
    """The parameters cell's names and values, in order (each an assignment of a literal)."""
    values = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise AssertionError(f"a parameters cell holds assignments of literals only: {ast.unparse(node)}")
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def literal(value) -> str:
    """``value`` as Python source: what a reader types."""
    if isinstance(value, float) and math.isnan(value):
        return "float('nan')"
    return repr(value)


def source_with(values: dict) -> str:
    return "\n".join(f"{k} = {literal(v)}" for k, v in values.items())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_parameter_is_declared_and_checked_at_the_top(path):
    nb = nbformat.read(path, as_version=4)
    at, setup = cells(nb)
    spec = module_of(path).PARAMETERS
    given = defaults(nb.cells[at].source)
    assert list(given) == list(spec), "the parameters cell and the module's PARAMETERS name the same parameters"
    assert all(isinstance(s, params.Spec) for s in spec.values())
    assert params.check(spec, **given)  # the defaults are inside their own ranges
    call = next((n for n in ast.walk(ast.parse(nb.cells[setup].source.replace("%config", "#")))
                 if isinstance(n, ast.Call) and ast.unparse(n.func) == "params.check"), None)
    assert call is not None, "the setup cell checks every parameter: params.check(sNN.PARAMETERS, NAME=NAME, ...)"
    assert [k.arg for k in call.keywords] == list(spec) and all(ast.unparse(k.value) == k.arg for k in call.keywords)



def names(source: str) -> tuple[set[str], set[str], set[str]]:
    """What a cell binds (assigned, defined), reads, and imports: its code as IPython runs it (magics turned
    into calls, a top-level ``await`` allowed), names inside its functions included."""
    from IPython.core.inputtransformer2 import TransformerManager
    tree = compile(TransformerManager().transform_cell(source), "<cell>", "exec",
                   flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    binds, reads, imports = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports |= {a.asname or a.name.split(".")[0] for a in node.names}
    return binds, reads, imports


def touched(nb, at: int, name: str) -> list[int]:
    """The code cells from the parameters cell on whose output a change of ``name`` can reach: a cell that reads a
    name the change may have touched runs again, and then everything it binds may have changed, and so may every
    earlier cell's variable it reads (a method call can change an object in place; imported modules and
    functions aside). A cell that binds such a name runs again too, so each name holds, cell by cell, what Run
    All gives it (a module imported again after a loop bound its name to a string). Any other
    cell shows what it showed: running it again would only repeat its work (in 12, the local model's six
    tasks, which only LOCAL_MAX_TURNS reaches)."""
    fixed = {k for k, v in defaults(nb.cells[at].source).items() if isinstance(v, (int, float, str, tuple))}
    dirty, assigned, out = {name}, set(), []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        binds, reads, imports = names(cell.source)
        if i == at:
            out.append(i)  # it sets every parameter again; only ``name`` changes
        elif i > at and (reads | binds | imports) & dirty:  # (binds: its value is back where Run All has it)
            out.append(i)
            dirty |= binds | (reads & assigned)
        assigned |= binds - imports - (fixed if i == at else set())  # (a number or a string cannot change in place)
    return out


def refusal(client, nb, at, setup, values) -> str:
    """Run the parameters cell with ``values`` and the setup cell: the one line the setup cell shows."""
    nb.cells[at].source = source_with(values)
    client.execute_cell(nb.cells[at], at)
    try:
        client.execute_cell(nb.cells[setup], setup)
    except CellExecutionError:
        pass
    else:
        raise AssertionError(f"accepted {values}")
    (error,) = [o for o in nb.cells[setup].outputs if o.output_type == "error"]
    assert error.ename == "ParameterError" and len(error.traceback) == 1, error.traceback
    return error.traceback[0]


# A cell "again alone" leaves to the both-ends runs, which run it again twice in the same kernel: notebook 12's local
# model (six tasks, about 26 turns of a real model, 15 to 20 s of CPU), which the runs of LOCAL_MAX_TURNS repeat at 1
# and at 8 turns a task (test_a_changed_parameter_reruns_... checks that they reach it).
AGAIN_BY_THE_EDGES = {"12-local-model": ("s12.live_run(", "LOCAL_MAX_TURNS")}


def again_alone(path: Path, nb, at: int, code: list[int]) -> list[int]:
    """The code cells to run once more on their own, last first: all of them, but a cell in AGAIN_BY_THE_EDGES."""
    if path.stem not in AGAIN_BY_THE_EDGES:
        return list(reversed(code))
    needle, name = AGAIN_BY_THE_EDGES[path.stem]
    (cell,) = [i for i in code if needle in nb.cells[i].source]
    if cell not in touched(nb, at, name):
        raise AssertionError(f"{name} no longer reaches the cell with {needle}: run it again alone")
    return [i for i in reversed(code) if i != cell]


def live_section_ran(nb) -> None:
    """Notebook 12's reader session is where a notebook runs the local model whole (nbval's kernels have it switched
    off: tests/conftest.py): where the model can run (and under HARNESS_REQUIRE_LOCAL=1, CI's), it must have run."""
    from harness_lib import local
    from harness_lib.chapter import s12_local_model as s12
    if os.environ.get("HARNESS_REQUIRE_LOCAL") == "1" or local.missing() is None:
        assert s12.ran_live(nb), f"the local model did not run: {s12.live_cells(nb)[0].outputs[:1]}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_again_alone_then_every_parameter_at_its_edges_and_past_them(path, tmp_path):
    """A reader's session in one kernel: Run All; then every code cell once more on its own, last first, each
    giving the same kinds of output (the provider outlives every cell; no cell consumes what another made); then
    every parameter refused past its bounds and run at both ends of its range, as the module's docstring says
    (12's local model is run again by those, not alone: AGAIN_BY_THE_EDGES).
    (One kernel and one Run All for both: they were two tests, each starting its own kernel and running the
    notebook whole, 12's live model included, before doing what it tests.)"""
    nb = nbformat.read(path, as_version=4)
    at, setup = cells(nb)
    spec = module_of(path).PARAMETERS
    base = defaults(nb.cells[at].source)
    # a hang guard, not a measure: 12's live section runs a local model when the `local` extra is installed
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        first = {i: kinds(c.outputs) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
        if path.stem.startswith("12-"):
            live_section_ran(nb)
        for index in again_alone(path, nb, at, list(first)):
            client.execute_cell(nb.cells[index], index)  # raises on an error output
            assert kinds(nb.cells[index].outputs) == first[index], ("again alone", nb.cells[index].source)
        expected = {i: k for i, k in first.items() if i >= at}
        for name, rule in spec.items():
            for value in rule.outside():
                line = refusal(client, nb, at, setup, {**base, name: value})
                assert line.startswith(f"ParameterError: {name} accepts ") and "\n" not in line, line
            for value in rule.inside()[:2]:  # both ends of the range; the defaults are nbval's run
                nb.cells[at].source = source_with({**base, name: value})
                for index in touched(nb, at, name):
                    client.execute_cell(nb.cells[index], index)  # raises on an error output
                    got = kinds(nb.cells[index].outputs)
                    assert ("stream", "stderr") not in got, (name, value, nb.cells[index].source)
                    assert got == expected[index], (name, value, nb.cells[index].source)


def test_a_changed_parameter_reruns_the_cells_it_reaches_and_the_ones_that_rebind_their_names():
    """``touched`` (above) decides which cells the both-ends runs repeat: 12's local model runs again only for
    the parameter that reaches it, and a cell that imports ``policy`` runs again when a touched loop has bound
    ``policy`` to a string before the cell that reads the module (Run All's order of names, kept)."""
    def code_of(stem, *needles):
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        found = [next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and n in c.source) for n in needles]
        return nb, cells(nb)[0], found

    nb, at, (live, prompt) = code_of("12-local-model", "s12.live_run(", "s12.prompt_of(")
    assert live in touched(nb, at, "LOCAL_MAX_TURNS")
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert again_alone(ROOT / "notebooks" / "12-local-model.ipynb", nb, at, code) == [
        i for i in reversed(code) if i != live]   # the both-ends runs of LOCAL_MAX_TURNS run it again
    assert live not in touched(nb, at, "PROMPT_TASK") and prompt in touched(nb, at, "PROMPT_TASK")
    # a loop binds `policy` to a string between the cell that imports the module and the one that reads it (as
    # 05 once did): the import runs again, so the reader cell sees the module, as after Run All
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in (
        "CAP = 20", "from harness_lib import policy", "for policy in ('fatal',):\n    print(policy, CAP)",
        "from harness_lib import policy", "policy.error_text")])
    nb.cells[0].metadata["tags"] = ["parameters"]
    assert touched(nb, 0, "CAP") == [0, 2, 3, 4]
