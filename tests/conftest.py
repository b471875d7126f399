"""Shared fixtures: one scripted provider per test module, in a background thread, and a provider of its own
(``faulty``) for a test that injects faults, so a fault it leaves unspent never reaches another test.

The reader's endpoint seam (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY) is cleared before anything runs, the
notebooks' kernels included (they inherit this environment): the tests check the chapter, not a server
the reader happens to have configured. Tests of the seam set the variables themselves (monkeypatch)."""

import os

import pytest

from harness_lib.scripted import ScriptedProvider

for _name in ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def url(provider):
    return provider.base_url


@pytest.fixture
def faulty():
    """A scripted provider for this test alone: inject faults here, never into the module's ``provider``."""
    with ScriptedProvider() as p:
        yield p
