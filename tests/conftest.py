"""Shared fixtures: one scripted provider per test module, in a background thread."""

import pytest

from harness_lib.scripted import ScriptedProvider


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def url(provider):
    return provider.base_url
