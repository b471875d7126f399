"""``harness_lib.seam``, the crash seam the core owns: a test plugs a hook into it, or sets ``HARNESS_CRASH_AT`` in a
process it starts; without either it does nothing. The core reaches it only once what the boundary names is on
disk, which is what the crash campaign (tests/reliability_campaign.py) relies on."""

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from harness_lib import seam, trace
from harness_lib.loop import Options, run
from harness_lib.state import load, new_run
from harness_lib.testing import FakeModel, asks, call
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

SEAM = "from harness_lib.seam import reached\nfor k in ['turn', 'save', 'turn', 'turn']:\n" \
       "    print(k, flush=True)\n    reached(k)\nprint('end')"


def child(env_value):
    env = {k: v for k, v in os.environ.items() if k != seam.ENV}
    if env_value is not None:
        env[seam.ENV] = env_value
    return subprocess.run([sys.executable, "-c", SEAM], env=env, capture_output=True, text=True, timeout=60)


def test_the_crash_seam_does_nothing_unless_asked():
    r = child(None)
    assert (r.returncode, r.stdout.split()) == (0, ["turn", "save", "turn", "turn", "end"])


@pytest.mark.parametrize("spec, printed", [("turn:2", ["turn", "save", "turn"]), ("save:1", ["turn", "save"]),
                                           ("turn:4", ["turn", "save", "turn", "turn", "end"])])
def test_the_crash_seam_kills_at_the_nth_boundary_of_its_kind(spec, printed):
    r = child(spec)
    assert r.stdout.split() == printed
    assert r.returncode == (0 if printed[-1] == "end" else -signal.SIGKILL)


def test_a_malformed_crash_spec_is_an_error_not_a_silent_no_op(monkeypatch):
    monkeypatch.setenv(seam.ENV, "turn")
    with pytest.raises(ValueError, match="expected KIND:N"):
        seam.reached("turn")


def test_a_plugged_hook_hears_every_boundary_once_it_is_on_disk(tmp_path, monkeypatch):
    """The hook sees each trace line already in the file and each save already loadable: a kill there loses
    nothing the boundary names. Unplugged, it hears nothing more."""
    monkeypatch.delenv(seam.ENV, raising=False)
    state = new_run(SYSTEM_PROMPT, TASK, "fake", run_id="r1")
    path, runs = tmp_path / "trace.jsonl", tmp_path / "runs"
    heard = []

    def hook(kind):
        if kind == "save":
            heard.append(("save", load(runs, "r1").to_dict() == state.to_dict()))
        else:
            heard.append((kind, trace.read(path)[-1]["type"] == kind))
    unplug = seam.plug(hook)
    try:
        model = FakeModel([asks(call("c1", "read_file", {"path": "errors.log"}))])
        opts = Options(client=model, trace=trace.Trace(path), state_dir=runs)
        done = asyncio.run(run(state, Workspace.copy_of(into=tmp_path / "ws").tools(), opts))
    finally:
        unplug()
    assert done is state and done.status == "completed"
    kinds = [k for k, _ in heard]
    assert kinds.count("save") >= 4 and {"turn", "tool_start", "tool_result", "run_stopped"} <= set(kinds)
    assert all(ok for _, ok in heard), heard
    seam.reached("turn")  # unplugged: not heard
    assert len(heard) == len(kinds)
