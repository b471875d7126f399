"""Notebook 01's loop, as the notebook writes it, on the chapter's run.

Beside ``harness_lib.run`` on every script it can finish alone (and on the check's own scripts), it is compared by
its check (``harness_lib/chapter/checks/s01_loop.py``, run on the reference by tests/test_checks.py): answer, turns,
tool runs, tokens, each request's prompt tokens and the transcript. Here, the chapter's figures."""

from __future__ import annotations

import asyncio

import pytest
from built_cells import load

from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace


@pytest.fixture(scope="module")
def built():
    return load("01-loop")


def test_the_notebooks_loop_gives_the_chapters_plan_run(built, url):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    answer, mine = asyncio.run(built["agent_loop"](url, "plan", messages, Workspace.copy_of().tools()))
    assert (mine["turns"], mine["tool_runs"], mine["in"], mine["out"]) == (3, 2, 815, 70)
    assert mine["prompts"] == [204, 269, 342]
    assert answer == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
