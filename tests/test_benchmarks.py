"""The peer benchmark cannot rot: its harness entries run here on a short runaway, with the same meter,
the same scripted provider in its own process, and the same checks that make a figure in RESULTS.md.
The peer libraries run only where the bench extra is installed (pip install -e '.[bench]')."""

from __future__ import annotations

import math
import os

import pytest

from benchmarks import run as bench
from benchmarks.harnesses_imports import IMPORTS, PEERS

CAP = 12


@pytest.fixture(scope="module")
def base_url():
    with bench.provider_process() as url:
        yield url


def _check_runaway(r: dict, name: str):
    runaway = r["runaway"]
    assert runaway["calls"] == CAP, f"{name} made {runaway['calls']} model calls at a cap of {CAP}"
    assert len(runaway["overhead_ms"]) == CAP - 1
    assert all(math.isfinite(x) and x > 0 for x in runaway["overhead_ms"]), runaway["overhead_ms"]
    assert runaway["min_ms"] <= runaway["median_ms"]
    assert runaway["server_usage"]["prompt_tokens"] > 0 and runaway["request_bytes_last"] > 1000
    assert r["import_ms"] > 0 and r["peak_rss_mb"] > 10
    plan = r["plan"]
    assert (plan["calls"], plan["tool_runs"], plan["ended"]) == (3, 2, "returns the answer" if not name.startswith(
        "harness") else "status completed")
    assert plan["overhead_ms"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["httpx", "harness", "harness+state", "harness+state-tmpfs"])
def test_own_entries_run_and_agree_with_the_server(base_url, name):
    r = bench.one(name, base_url, CAP)
    _check_runaway(r, name)
    if name.startswith("harness"):
        # the harness stops by status, its usage equal to the server's, the last call kept as pending
        assert r["runaway"]["ended"] == "status max_turns_exceeded"
        assert r["runaway"]["usage_matches"] is True and r["plan"]["usage_matches"] is True
        assert r["runaway"]["tool_runs"] == CAP - 1
    else:
        assert r["runaway"]["usage"] is None and r["runaway"]["usage_matches"] is None


@pytest.mark.slow
@pytest.mark.parametrize("name", PEERS)
def test_peer_entries_stop_at_their_cap(base_url, name):
    why = bench.available(name)
    if why:
        pytest.skip(f"peer library not installed ({why})")
    r = bench.one(name, base_url, CAP)
    _check_runaway(r, name)
    assert r["runaway"]["usage_matches"] in (True, None)  # None: it offers no totals after its cap


def test_the_report_table_says_what_was_measured():
    runs = [{"import_ms": 10.0, "peak_rss_mb": 30.0,
             "runaway": {"median_ms": m, "min_ms": m / 2, "first_10_ms": m, "last_10_ms": 2 * m, "calls": CAP,
                         "tool_runs": CAP - 1, "ended": "status max_turns_exceeded", "usage_matches": True,
                         "request_bytes_last": 5000},
             "plan": {"overhead_ms": 3.0, "usage_matches": False, "ended": "status completed", "calls": 3}}
            for m in (1.0, 2.0, 3.0)]
    figures = bench.aggregate(runs)
    assert figures["median_ms"] == 2.0 and figures["spread_ms"] == (1.0, 3.0) and figures["min_ms"] == 0.5
    text = bench.table({"httpx": figures, "harness": figures})
    assert "2.00 (1.00-3.00)" in text and "| 1.0 |" in text
    assert "| yes / no (3 of 3 runs differ) |" in text  # a usage mismatch is reported, never averaged away
    assert bench.usage_word([None, None]) == "none" and bench.usage_word([True, None]) == \
        "yes in 1 of 2 runs, else none"


def test_every_harness_has_an_entry_and_a_label():
    from benchmarks.harnesses import HARNESSES
    assert set(HARNESSES) == set(IMPORTS) == set(bench.LABELS)


def test_a_missing_peer_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    assert "pip install -e '.[bench]'" in bench.available("langgraph")
    assert bench.available("harness") is None


def test_a_row_from_another_tree_says_which():
    assert bench.label("harness+state@e7c92e9") == bench.LABELS["harness+state"] + ", at e7c92e9 (before)"
    assert bench.label("harness") == bench.LABELS["harness"]


@pytest.mark.slow
def test_the_persistence_benchmark_times_the_harness_alone():
    from benchmarks import persistence
    for where in ("none", "disk"):
        r = persistence.measure(persistence.ROOT, where, 12)
        assert set(r) == {"median", "first_10", "last_10"} and all(0 < v < 1000 for v in r.values()), r
    assert persistence.fsync_ms(5) > 0


@pytest.mark.slow
def test_the_provider_benchmark_serves_the_runaway_in_order():
    """``python -m benchmarks.provider`` measures what it says: the chapter's 100 requests, in order, billed
    337,299 prompt tokens in all (``child`` raises otherwise), in process and over HTTP."""
    from benchmarks import provider
    for mode in ("complete", "http"):
        r = provider.child(mode)
        assert set(r) == {"total", "cpu", "1", "50", "100"} and all(v > 0 for v in r.values()), r


@pytest.mark.slow
def test_the_coldstart_benchmark_runs_both_commands():
    """``python -m benchmarks.coldstart``: each command is checked by what it prints before it is timed."""
    from benchmarks import coldstart
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for command in coldstart.COMMANDS:
        wall, cpu = coldstart.timed(command, coldstart.ROOT, env)
        assert wall > 0 and cpu > 0
    with pytest.raises(RuntimeError, match="run plan failed"):  # a server that is not there: not a time
        coldstart.timed("run plan", coldstart.ROOT, {**env, "LLM_BASE_URL": "http://127.0.0.1:9/v1"})
