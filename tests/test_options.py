"""Options are fixed once made (issue 22, item 3): an assignment after construction is refused, not silently
ignored; ``dataclasses.replace`` makes a new, checked copy; what Options derives (``limits``, ``transport``) is
declared in its class body; the run's limits live apart from the transport, whose defaults have one home."""

import asyncio
import dataclasses
import math

import pytest

from harness_lib import stops
from harness_lib.client import Transport
from harness_lib.loop import Options, run
from harness_lib.options import Limits
from harness_lib.state import new_run
from harness_lib.testing import FakeModel, asks, call
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

URL = "http://127.0.0.1:9/v1"


def runaway(opts: Options):
    """A model that lists the files forever, under ``opts``: the run ends at one of its limits."""
    model = FakeModel([asks(call(f"c{i}", "list_files")) for i in range(50)])
    return asyncio.run(run(new_run(SYSTEM_PROMPT, TASK, "fake"), Workspace.copy_of().tools(),
                           dataclasses.replace(opts, client=model)))


@pytest.mark.parametrize("name, value", [("max_turns", 100), ("max_budget_usd", 1.0), ("base_url", "http://x/v1"),
                                         ("stops", []), ("timeout_s", 5.0), ("limits", None), ("transport", None)])
def test_assigning_a_field_after_construction_is_refused(name, value):
    opts = Options(base_url=URL, max_turns=20, max_budget_usd=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError, match=rf"^cannot assign to field '{name}'$"):
        setattr(opts, name, value)
    assert opts.limits.max_turns == 20 and opts.limits.max_budget_usd == 0.01


def test_the_limits_and_the_transport_are_fixed_too():
    opts = Options(base_url=URL, max_turns=20)
    with pytest.raises(dataclasses.FrozenInstanceError, match="^cannot assign to field 'max_turns'$"):
        opts.limits.max_turns = 100
    with pytest.raises(dataclasses.FrozenInstanceError, match="^cannot assign to field 'conditions'$"):
        opts.limits.conditions = ()
    with pytest.raises(dataclasses.FrozenInstanceError, match="^cannot assign to field 'timeout_s'$"):
        opts.transport.timeout_s = 1.0


def test_replace_gives_a_new_options_with_its_limits_derived_again():
    opts = Options(base_url=URL, max_turns=20, max_budget_usd=0.01)
    more = dataclasses.replace(opts, max_turns=100)
    assert (more.max_turns, more.limits.max_turns, more.limits.max_budget_usd) == (100, 100, 0.01)
    assert [c.__name__ for c in more.limits.conditions] == ["max_turns(100)", "max_budget(0.01)"]
    assert [c.__name__ for c in opts.limits.conditions] == ["max_turns(20)", "max_budget(0.01)"]  # untouched
    assert dataclasses.replace(opts, timeout_s=5.0).transport.timeout_s == 5.0
    assert opts.transport.timeout_s == Transport.timeout_s


def test_a_run_keeps_to_the_limits_of_the_copy_it_was_given():
    opts = Options(base_url=URL, max_turns=3)
    assert runaway(opts).turns == 3
    assert runaway(dataclasses.replace(opts, max_turns=5)).turns == 5
    assert runaway(dataclasses.replace(opts, max_turns=None)).status == "completed"  # the script runs out


@pytest.mark.parametrize("change, message", [
    (dict(max_turns=0), "max_turns must be a whole number of at least 1, got 0"),
    (dict(max_budget_usd=math.nan), "max_budget_usd must be a finite number above 0 and at most 1e+09, got nan"),
    (dict(timeout_s=0), "timeout_s must be a finite number above 0, got 0"),
    (dict(strict_budget=True, max_budget_usd=None), "strict_budget needs a budget: give max_budget_usd (--budget USD)"),
    (dict(dedupe="some"), "dedupe must be one of ('off', 'read-only', 'all'), got 'some'"),
], ids=lambda c: ", ".join(f"{k}={v!r}" for k, v in c.items()) if isinstance(c, dict) else "")
def test_replace_is_checked_as_construction_is(change, message):
    opts = Options(base_url=URL, max_turns=20, max_budget_usd=0.01)
    with pytest.raises(ValueError) as replaced:
        dataclasses.replace(opts, **change)
    with pytest.raises(ValueError) as made:
        Options(**{"base_url": URL, "max_turns": 20, "max_budget_usd": 0.01, **change})
    assert str(replaced.value) == str(made.value) == message


def test_what_options_derive_is_declared():
    derived = {f.name: f.type for f in dataclasses.fields(Options) if not f.init}
    assert derived == {"limits": "Limits", "transport": "Transport"}
    assert [f.name for f in dataclasses.fields(Limits) if not f.init] == ["conditions"]


def test_the_limits_are_apart_from_the_transport():
    ask = stops.when(lambda s: False, "never")
    opts = Options(base_url=URL, max_turns=20, max_budget_usd=0.01, stops=[ask], strict_budget=True,
                   strict_margin=0.05, strict_max_tokens=64, timeout_s=5.0)
    assert opts.limits == Limits(max_turns=20, max_budget_usd=0.01, stops=(ask,), strict_budget=True,
                                 strict_margin=0.05, strict_max_tokens=64)
    assert [c.__name__ for c in opts.limits.conditions] == ["max_turns(20)", "max_budget(0.01)", "when"]
    assert opts.transport == Transport(base_url=URL, timeout_s=5.0)
    assert not {f.name for f in dataclasses.fields(Limits)} & {f.name for f in dataclasses.fields(Transport)}


@pytest.mark.parametrize("part", [Limits, Transport])
def test_every_limit_and_transport_setting_is_theirs_with_their_default(part):
    """Options take the limits' and the transport's settings by their names, and each default is theirs: one home."""
    mine = {f.name: f for f in dataclasses.fields(Options)}
    for f in dataclasses.fields(part):
        if f.init:
            assert f.name in mine, f"Options has no {f.name}"
            assert mine[f.name].default == f.default, \
                f"Options.{f.name} defaults to {mine[f.name].default!r}, {part.__name__}'s to {f.default!r}"
    assert Options(base_url=URL).transport == Transport(base_url=URL)
    assert Options(base_url=URL).limits == Limits()


def test_a_list_of_stops_edited_after_construction_changes_nothing():
    given = [stops.repeated_call(3)]
    opts = Options(base_url=URL, stops=given)
    given.append(stops.when(lambda s: True, "always"))
    assert opts.stops == opts.limits.stops == tuple(given[:1])
    assert [c.__name__ for c in opts.limits.conditions] == [given[0].__name__]


@pytest.mark.parametrize("bad, message", [
    (dict(max_turns=0), "max_turns must be a whole number of at least 1, got 0"),
    (dict(max_budget_usd=-1.0), "max_budget_usd must be a finite number above 0 and at most 1e+09, got -1.0"),
    (dict(strict_budget=True), "strict_budget needs a budget: give max_budget_usd (--budget USD)"),
    (dict(strict_margin=10.5), "strict_margin must be a finite number of at least 0 and at most 10 (0.05 = count 5 % "
                               "more prompt tokens than the local tokenizer does), got 10.5"),
    (dict(stops=len), "stops must be a list of stop conditions, e.g. stops=[repeated_call(3)]"),
], ids=lambda b: ", ".join(f"{k}={v!r}" for k, v in b.items()) if isinstance(b, dict) else "")
def test_limits_made_on_their_own_are_checked_as_options_check_them(bad, message):
    with pytest.raises((ValueError, TypeError)) as alone:
        Limits(**bad)
    with pytest.raises((ValueError, TypeError)) as within:
        Options(base_url=URL, **bad)
    assert str(alone.value) == str(within.value) == message
