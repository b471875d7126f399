"""The drawing of the layers in docs/developing.md is true: no module imports from a layer above its own, and
every module placed here is named in the drawing.

Read with ``ast`` (nothing imported), including imports inside functions: a lazy import is still a
dependency."""

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "harness_lib"
DRAWING = PKG.parent / "docs" / "developing.md"

# The harness (the core): the loop and what it is built from. Listed, not globbed, so a new module is a
# decision about its layer.
CORE = {"loop", "options", "policy", "dedupe", "stops", "budget", "subagent", "state", "journal", "files", "trace",
        "tools", "workspace", "reply", "pricing", "numbers", "tokens", "client", "seam", "resources",
        "terminal"}
TESTING = {"testing"}  # a model to script, for tests: imports the core and scripted/, imported by neither
OPERATING = {"runs", "config", "lock", "ledger", "forecast", "local", "local_format"}
ENTRY = {"cli", "__main__"}  # the command line: at the top, beside the notebooks (`harness-lib chapter` too)


def imports(path: Path) -> set[str]:
    """The harness_lib modules a file imports, as dotted names relative to the package."""
    here = path.relative_to(PKG.parent).with_suffix("").parts[:-1]  # ("harness_lib", "chapter"), say
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[:len(here) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
            else:
                parts = (node.module or "").split(".")
            if parts[:1] != ["harness_lib"]:
                continue
            if node.module is None or len(parts) == 1:  # from . import a, b
                found.update(".".join(parts[1:] + [a.name]) for a in node.names)
            else:
                found.add(".".join(parts[1:]))
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("harness_lib."))
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def test_every_module_has_a_layer():
    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    unplaced = modules - CORE - TESTING - OPERATING - ENTRY
    assert not unplaced, f"give these a layer in tests/test_layers.py: {unplaced}"


def drawing() -> str:
    """The drawing in docs/developing.md: the first code block after its heading on the layers."""
    text = DRAWING.read_text(encoding="utf-8")
    section = text[text.index("## How it is built: the layers"):]
    return section.split("```")[1]


def test_the_drawing_names_every_module_of_the_core_and_of_operating_a_run():
    unnamed = sorted(m for m in CORE | TESTING | OPERATING if not re.search(rf"\b{m}\b", drawing()))
    assert not unnamed, f"name these in the drawing of the layers in docs/developing.md: {unnamed}"


@pytest.mark.parametrize("name", sorted(CORE))
def test_the_core_imports_only_the_core(name):
    path = PKG / f"{name}.py"
    if not path.exists():
        pytest.skip(f"{name}.py is gone")
    up = {m for m in imports(path) if top(m) not in CORE}
    assert not up, f"harness_lib/{name}.py imports from a layer above the harness: {sorted(up)}"


def test_testing_imports_only_the_core_and_the_scripted_provider():
    up = {m for m in imports(PKG / "testing.py") if top(m) not in CORE | {"scripted"}}
    assert not up, f"harness_lib/testing.py imports from a layer above the core: {sorted(up)}"


def test_no_module_of_the_package_imports_itself_through_others():
    """No import cycle (a lazy import counts): each module can be read, and tested, after the ones it uses."""
    graph = {}
    for path in PKG.rglob("*.py"):
        name = ".".join(path.relative_to(PKG).with_suffix("").parts)
        name = name.removesuffix(".__init__") if name != "__init__" else ""
        graph[name] = {m for m in imports(path) if m != name}
    graph = {n: {m if m in graph else m.rsplit(".", 1)[0] for m in deps} & graph.keys() for n, deps in graph.items()}
    done, cycles = set(), []

    def visit(node, path):
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for dep in sorted(graph[node]):
            visit(dep, path + [node])
        done.add(node)
    for node in sorted(graph):
        visit(node, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", sorted(OPERATING))
def test_operating_a_run_never_imports_the_layers_above(name):
    up = {m for m in imports(PKG / f"{name}.py") if top(m) in {"chapter"} | ENTRY}
    assert not up, f"harness_lib/{name}.py imports from a layer above its own: {sorted(up)}"


@pytest.mark.parametrize("name", ["cli", "__main__"])
def test_the_command_line_reaches_the_chapter_layer_only_for_its_chapter_command(name):
    """``harness-lib chapter`` is the report; every other command is the harness and its operation."""
    text = (PKG / f"{name}.py").read_text()
    lines = [line.strip() for line in text.splitlines() if "chapter" in line and "import" in line]
    assert all(line.startswith("from .chapter.report import") for line in lines), lines


def test_the_scripted_provider_knows_only_the_tokenizer():
    for path in (PKG / "scripted").glob("*.py"):
        outside = {m for m in imports(path) if top(m) not in ("scripted", "tokens")}
        assert not outside, f"{path.relative_to(PKG.parent)} imports {sorted(outside)}"


def test_the_reader_sees_these_checks_catch_a_reach_up(tmp_path, monkeypatch):
    """The parser itself: a lazy relative import inside a function is found."""
    fake = PKG / "loop.py"
    text = "def f():\n    from .chapter import experiments\n    from . import cli\n"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == fake else "")
    assert imports(fake) == {"chapter", "cli"}
