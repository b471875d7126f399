"""Mutation testing of the core (issue 25): ``make mutate``, or ``python tests/mutate.py [MODULE ...]``.

mutmut changes one thing at a time in a core module's functions (``>=`` to ``>``, ``and`` to ``or``, ``+`` to
``-``, a string to ``"XX..XX"``, an argument to ``None``, a call's argument left out) and runs each such mutant
against the module's own fast tests (``MODULES`` below: ``make check``'s tests of that module), only those that
reach the function it changed, fastest first, up to the first failure. A mutant that no test fails *survives*:
either it changes nothing a caller can see (it is equivalent), or no test looks where it changed something.

``docs/mutation.md`` lists every survivor, each with a line saying which. This script prints the figures, then
exits 1 if a survivor is missing from the page (a new one: look at it, then kill it with a test or say why it
is equivalent), or if the page lists one that no longer survives (a test kills it now: take it off).

Each module runs in a folder of its own, ``mutants/<module>/``: links to harness_lib/, tests/ and data/, and a
pyproject.toml with this file's mutmut settings. Its results are kept there: a second run re-tests only the
functions whose code changed since (``rm -rf mutants`` starts afresh). Another helper's change to a file
under test shows up as survivors to look at, not as a silent pass.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"
DOC = ROOT / "docs" / "mutation.md"
MUTMUT = Path(sys.executable).parent / "mutmut"  # the `mutate` extra's, beside this Python

# Each module's own fast tests: the file that tests it and the files whose runs act its rules out. Slow
# tests (the campaigns, child processes) are left out: `-m "not slow"`.
MODULES: dict[str, list[str]] = {
    "loop": ["test_loop", "test_edges", "test_properties", "test_crash", "test_faults", "test_bad_input", "test_stops",
             "test_strict_budget", "test_conformance", "test_journal"],
    "stops": ["test_stops", "test_edges", "test_loop", "test_options"],
    "budget": ["test_strict_budget", "test_edges", "test_options", "test_runs"],
    "dedupe": ["test_loop", "test_edges", "test_crash", "test_options"],
    "policy": ["test_loop", "test_edges", "test_stops", "test_bad_input", "test_options"],
    "state": ["test_journal", "test_loop", "test_naming", "test_bad_input", "test_crash", "test_operator",
              "test_edges", "test_seam", "test_hostile", "test_runs"],
    "journal": ["test_journal", "test_crash", "test_integration", "test_seam", "test_hostile", "test_naming"],
    "ledger": ["test_operator", "test_naming", "test_edges", "test_hostile", "test_runs"],
    "lock": ["test_operator", "test_journal", "test_edges", "test_hostile", "test_runs"],
    "reply": ["test_reply", "test_conformance", "test_edges", "test_faults", "test_strict_budget"],
}
# Fast by the `make check` measure, but a second or more once each of its child processes imports the
# mutated tree: run by `make check`, left out here.
HEAVY = ["tests/test_strict_budget.py::test_cli_strict_budget",
         "tests/test_integration.py::test_many_runs_in_one_process_leave_no_file_open"]

SETTINGS = """
[tool.mutmut]
source_paths = ["harness_lib/"]
also_copy = ["data/"]  # the workspace and the chapter's tables, beside the package (harness_lib.resources)
only_mutate = ["harness_lib/{module}.py"]
# The words of a raised error: a test that reads them matches a phrase, and no rule depends on them.
do_not_mutate_patterns = ['^\\s*raise ']
pytest_add_cli_args_test_selection = [{selection}]
pytest_add_cli_args = ["-p", "no:cacheprovider"]
# A mutant's tests get (their clean run's seconds + 10) x 5 before it counts as a timeout (mutmut's default,
# (s + 1) x 15, gave a run made endless 8 minutes): five times the clean run, whose seconds were measured in
# the same run, on the same shared machine, and at least 50 s for the quickest.
timeout_multiplier = 5.0
timeout_constant = 10.0
"""
NAME = re.compile(r"harness_lib\.\w+\.x\S+?__mutmut_\d+")


def prepare(module: str) -> tuple[Path, bool]:
    """The module's folder, and whether its mutmut settings are new (then mutmut tests every mutant afresh)."""
    folder = WORK / module
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("harness_lib", "tests", "data"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    own = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", (ROOT / "pyproject.toml").read_text())
    settings = SETTINGS.format(module=module, selection=", ".join(f'"{a}"' for a in selection([module])))
    path = folder / "pyproject.toml"
    before = path.read_text() if path.exists() else ""
    if before != own + settings:
        path.write_text(own + settings)
    # mutmut starts afresh when its own settings change (the tests, the time limit), not when the rest of
    # pyproject.toml does (a dependency added): then it keeps its results
    return folder, not before.endswith(settings)


def selection(modules: list[str]) -> list[str]:
    files = sorted({f"tests/{t}.py" for m in modules for t in MODULES[m]})
    return ["-m", "not slow", *files, *(a for t in HEAVY for a in ("--deselect", t))]


ROUND_TRIP = """
import json, sys, pytest
class Ids:
    def __init__(self):
        self.found = []
    def pytest_collection_modifyitems(self, items):
        self.found += [item.nodeid for item in items]
    def pytest_deselected(self, items):
        gone = {item.nodeid for item in items}
        self.found = [i for i in self.found if i not in gone]
def collect(args):
    ids = Ids()
    pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *args], plugins=[ids])
    return ids.found
first = collect(json.loads(sys.argv[1]))
again = collect(first)
print("\\n" + json.dumps(sorted(set(first) - set(again))))
"""


def ids_round_trip(modules: list[str]) -> list[str]:
    """The tests that pytest cannot find again by their ids, in the process that collected them, as mutmut
    asks it to (a parameter id with brackets in it, say). A mutant's test that cannot be found makes pytest
    exit 4, which mutmut counts as a kill: every mutant of a function that test reaches would be killed."""
    out = subprocess.run([sys.executable, "-c", ROUND_TRIP, json.dumps(selection(modules))], cwd=ROOT,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def mutmut(folder: Path, *args: str) -> str:
    return subprocess.run([str(MUTMUT), *args], cwd=folder, capture_output=True, text=True, check=True).stdout


def verdicts(folder: Path) -> dict[str, str]:
    """Every mutant of the module and what became of it (``mutmut results``: killed, survived, timeout...)."""
    found = (line.strip().partition(": ") for line in mutmut(folder, "results", "--all", "true").splitlines())
    return {name: status for name, _, status in found if NAME.fullmatch(name)}


def diffs(folder: Path, module: str, names: list[str]) -> dict[str, list[str]]:
    """Each mutant's changed lines against the original function (what ``mutmut show`` prints, read from the
    file mutmut wrote: one ``mutmut show`` each took seconds)."""
    source = (folder / "mutants" / "harness_lib" / f"{module}.py").read_text()
    lines = source.splitlines()  # once: ast.get_source_segment splits the whole file each call (4 min for reply)
    functions = {node.name: "\n".join(lines[node.lineno - 1:node.end_lineno]) for node in ast.walk(ast.parse(source))
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name}
    out = {}
    for name in names:
        mutant = name.rpartition(".")[2]
        base = mutant.rpartition("__mutmut_")[0]  # x_run, or xǁClassǁmethod
        orig, shown = base + "__mutmut_orig", base.split("ǁ")[-1] if "ǁ" in base else base[2:]
        before = functions[orig].replace(orig, shown, 1).splitlines()  # one name in both: only changes show
        after = functions[mutant].replace(mutant, shown, 1).splitlines()
        out[name] = [line for line in difflib.unified_diff(before, after, lineterm="", n=0)
                     if line[:1] in "-+" and line[:3] not in ("---", "+++")]
    return out


def main(argv: list[str]) -> int:
    modules = argv or list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        print(f"no such core module: {', '.join(unknown)} (the modules: {', '.join(MODULES)})", file=sys.stderr)
        return 2
    if lost := ids_round_trip(modules):
        print(f"pytest cannot find {len(lost)} of these tests again by their ids, as mutmut asks it to (give the "
              f"parameters plain ids); the first:\n  " + "\n  ".join(lost[:10]), file=sys.stderr)
        return 2
    children = os.environ.get("MUTATE_CHILDREN", "2")
    survivors: dict[str, list[str]] = {}
    totals: dict[str, int] = {}
    print(f"{'module':8} {'mutants':>7} {'killed':>6} {'timeout':>7} {'no test':>7} {'survived':>8} {'rate':>6}"
          f" {'seconds':>7}")
    for module in modules:
        folder, afresh = prepare(module)
        # mutmut keeps a result until the function's code changes, not when a test is added: the survivors of
        # an earlier run meet today's tests again, by name, after the run (not after a run made afresh)
        kept = not afresh and (folder / "mutants" / "mutmut-stats.json").exists()
        before = verdicts(folder) if kept else {}
        started = time.monotonic()
        with open(folder / "run.log", "w") as log:
            code = subprocess.run([str(MUTMUT), "run", "--max-children", children], cwd=folder, stdout=log,
                                  stderr=subprocess.STDOUT).returncode
            again = [n for n, v in verdicts(folder).items() if v == "survived" and before.get(n) == "survived"
                     ] if code == 0 else []
            if again:
                code = subprocess.run([str(MUTMUT), "run", "--max-children", children, *sorted(again)], cwd=folder,
                                      stdout=log, stderr=subprocess.STDOUT).returncode
        seconds = time.monotonic() - started
        if code != 0:
            print(f"{module}: mutmut exited {code}; its output is in {folder / 'run.log'}", file=sys.stderr)
            return 2
        found = verdicts(folder)
        counts = {s: sum(1 for v in found.values() if v == s) for s in set(found.values())}
        for status, n in counts.items():
            totals[status] = totals.get(status, 0) + n
        lived = sorted(n for n, v in found.items() if v == "survived")
        survivors.update(diffs(folder, module, lived))
        print(f"{module:8} {len(found):7} {counts.get('killed', 0):6} {counts.get('timeout', 0):7} "
              f"{counts.get('no tests', 0):7} {len(lived):8} {len(lived) / max(len(found), 1):6.1%} {seconds:7.0f}")
        others = {s: n for s, n in counts.items() if s not in ("killed", "timeout", "no tests", "survived")}
        if others:
            print(f"         and {others}: see `mutmut results` in {folder}")
    if len(modules) > 1:
        n = sum(totals.values())
        print(f"{'all':8} {n:7} {totals.get('killed', 0):6} {totals.get('timeout', 0):7} "
              f"{totals.get('no tests', 0):7} {len(survivors):8} {len(survivors) / max(n, 1):6.1%}")

    (WORK / "survivors.txt").write_text("".join(f"{name}\n" + "".join(f"    {d}\n" for d in lines)
                                                for name, lines in survivors.items()))
    listed, killed = documented(modules)
    new, gone = sorted(set(survivors) - listed), sorted(listed - set(survivors))
    back = sorted(killed & set(survivors))
    doc = DOC.relative_to(ROOT)
    for name in new:
        print(f"survives, not listed in {doc}: {name}\n" + "".join(f"    {d}\n" for d in survivors[name]), end="")
    for name in back:
        print(f"survives again, though {doc} names a test that kills it: {name}")
    for name in gone:
        print(f"listed as a survivor in {doc}, killed now: {name} (move it to the killed ones, naming the test)")
    print(f"survivors with their diffs: {(WORK / 'survivors.txt').relative_to(ROOT)}")
    return 1 if new or gone or back else 0


def documented(modules: list[str]) -> tuple[set[str], set[str]]:
    """The mutants docs/mutation.md lists as survivors (under "## Survivors"), and those it says a test kills
    now (under "## Killed"), of these modules."""
    listed: set[str] = set()
    killed: set[str] = set()
    into = None
    for line in DOC.read_text().splitlines() if DOC.exists() else []:
        if line.startswith("## "):
            into = listed if line.startswith("## Survivors") else killed if line.startswith("## Killed") else None
        elif into is not None:
            into.update(n for n in NAME.findall(line) if n.split(".")[1] in modules)
    return listed, killed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
