"""Shared fixtures: one scripted provider per test module, in a background thread, and a fresh one per
test for a test that injects faults (``faulty``): the module's provider refuses faults, so a fault one
test injected and did not spend can never answer the next test's request.

The reader's endpoint seam (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY) is cleared before anything runs, the
notebooks' kernels included (they inherit this environment): the tests check the chapter, not a server
the reader happens to have configured. Tests of the seam set the variables themselves (monkeypatch)."""

import os

import pytest

from harness_lib.scripted import ScriptedProvider

for _name in ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY"):
    os.environ.pop(_name, None)
os.environ.pop("HARNESS_CHAPTER_COLLECT", None)  # `make chapter`'s, for its own kernels: never the tests' notebooks


class SharedProvider(ScriptedProvider):
    """The module's provider: shared by every test of a module, so it takes no faults."""

    def inject(self, *faults: str) -> ScriptedProvider:
        raise RuntimeError("this provider is shared by the whole test module: inject faults into the `faulty` "
                           "fixture, a provider of the test's own")


@pytest.fixture(scope="module")
def provider():
    with SharedProvider() as p:
        yield p


@pytest.fixture
def faulty():
    """A provider of this test's own, for injecting faults."""
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def url(provider):
    return provider.base_url
