"""The fork server the campaigns start their children from (``tests/warm.py``): its children behave as
``subprocess.Popen`` children of ``python -m`` do, and none is left behind, whatever happens to whom."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import warm

PROBE = textwrap.dedent("""
    import json, os, random, signal, sys, time
    import harness_lib.seam as seam
    def handler(s):
        h = signal.getsignal(s)
        return getattr(h, "__name__", str(h))
    seen_before = dict(seam._seen)
    seam._seen["left by an earlier child?"] = 1
    print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__,
                      "foo": os.environ.get("WARM_FOO"), "has_path": "PATH" in os.environ,
                      "fds": sorted(os.listdir("/proc/self/fd")),
                      "signals": [handler(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)],
                      "stdout_line_buffered": sys.stdout.line_buffering, "random": random.random(),
                      "seam_seen": seen_before}), flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    if sys.argv[1] == "raise":
        raise ValueError("boom")
    sys.exit(int(sys.argv[2]) if sys.argv[1] == "exit" else 0)
""")
PIPES = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}


@pytest.fixture(scope="module")
def launch():
    with warm.Launcher() as launcher:
        yield launcher


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "warm_probe.py").write_text(PROBE)
    return [sys.executable, "-m", "warm_probe"]




@pytest.mark.slow
def test_a_warm_child_sees_what_a_fresh_one_sees_and_nothing_of_the_one_before(launch, probe, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "warm_probe.py").write_text(PROBE)
    first = launch([*probe, "plain", "x y"], env={**os.environ, "WARM_FOO": "a"}, cwd=tmp_path, **PIPES)
    out, err = first.communicate(timeout=60)
    a = json.loads(out)
    env = {k: v for k, v in os.environ.items() if k not in ("WARM_FOO", "PATH")}  # PATH: the server has it
    second = launch([*probe, "plain"], env=env, cwd=tmp_path / "a", **PIPES)
    b = json.loads(second.communicate(timeout=60)[0])
    fresh = subprocess.run([*probe, "plain", "x y"], env={**os.environ, "WARM_FOO": "a"}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    f = json.loads(fresh.stdout)
    assert (first.returncode, second.returncode, fresh.returncode) == (0, 0, 0), (err, fresh.stderr)
    assert a["foo"] == "a" and b["foo"] is None  # the environment of one child is not the next one's
    assert a["has_path"] and not b["has_path"]  # nor is the server's
    assert b["cwd"] == b["path0"] == str(tmp_path / "a") and b["argv"][1:] == ["plain"]
    assert a["seam_seen"] == b["seam_seen"] == {}  # a module's state is the server's, untouched, each time
    assert a["random"] != b["random"]
    for key in ("argv", "path0", "cwd", "name", "foo", "fds", "signals", "stdout_line_buffered"):
        assert a[key] == f[key], key  # as python -m: no server socket or pid descriptor left open in it


@pytest.mark.slow
def test_sigkill_gives_minus_9_and_kills_that_child_only(launch, probe, tmp_path):
    victim = launch([*probe, "sleep"], cwd=tmp_path, **PIPES)
    other = launch([*probe, "sleep"], cwd=tmp_path, **PIPES)
    assert json.loads(victim.stdout.readline())["argv"][1] == "sleep"
    assert other.stdout.readline()
    assert victim.poll() is None
    victim.kill()
    assert victim.wait(timeout=60) == -signal.SIGKILL and victim.returncode == -9
    assert other.poll() is None and warm.alive(other.pid)
    other.send_signal(signal.SIGTERM)
    assert other.communicate(timeout=60)[1] == "" and other.returncode == -signal.SIGTERM
    with pytest.raises(subprocess.TimeoutExpired):
        launch([*probe, "sleep"], cwd=tmp_path, **PIPES).wait(timeout=0.05)  # the server serves on


@pytest.mark.slow
def test_exit_codes_and_messages_are_those_of_python_m(launch, probe, tmp_path):
    state_dir = tmp_path / "runs"
    for argv, cwd in (([*probe, "exit", "2"], tmp_path), ([*probe, "raise"], tmp_path),
                      ([sys.executable, "-m", "harness_lib", "resume", "nosuch", "--state-dir", state_dir], None)):
        child = launch(argv, cwd=cwd, **PIPES)
        out, err = child.communicate(timeout=60)
        fresh = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
        assert child.returncode == fresh.returncode and child.returncode in (1, 2), (argv, err)
        assert err.splitlines()[-1:] == fresh.stderr.splitlines()[-1:], (err, fresh.stderr)
    assert child.returncode == 2 and err.startswith("error: ") and len(err.splitlines()) == 1


@pytest.mark.slow
def test_the_server_gone_mid_run_is_a_clear_error_and_takes_its_children(probe, tmp_path):
    with warm.Launcher() as launcher:
        child = launcher([*probe, "sleep"], cwd=tmp_path, **PIPES)
        assert child.stdout.readline()
        launcher.server.kill()
        with pytest.raises(warm.LauncherGone, match="fork server"):
            child.wait(timeout=60)
        with pytest.raises(warm.LauncherGone, match="fork server"):
            launcher([*probe, "plain"], cwd=tmp_path, **PIPES)
        assert warm.gone_within([child.pid])  # PR_SET_PDEATHSIG: it does not outlive the server


@pytest.mark.slow
def test_nothing_is_left_when_the_launcher_closes_or_its_owner_dies(probe, tmp_path):
    others = set(warm.leftovers())  # the module's launcher, and what it still runs
    with warm.Launcher() as launcher:
        child = launcher([*probe, "sleep"], cwd=tmp_path, **PIPES)
        assert child.stdout.readline()
        assert set(warm.leftovers()) - others == {launcher.server.pid, child.pid}
    assert set(warm.leftovers()) - others == set() and not warm.alive(child.pid)
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        sys.path.insert(0, {os.path.dirname(warm.__file__)!r})
        import warm
        launcher = warm.Launcher()
        child = launcher([*{probe!r}, "sleep"], cwd={str(tmp_path)!r}, stdout=subprocess.PIPE)
        child.stdout.readline()
        print(launcher.server.pid, child.pid, flush=True)
        time.sleep(60)""")], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in owner.stdout.readline().split()]
    assert sorted(warm.leftovers(owner.pid)) == sorted(pids)
    owner.kill()  # a pytest worker killed, or Ctrl-C: the lifeline closes with its last holder
    owner.wait()
    assert warm.gone_within(pids) and warm.leftovers(owner.pid) == []


def test_only_python_m_is_launched(launch):
    with pytest.raises(ValueError, match="-m MODULE"):
        launch(["/bin/sh", "-c", "true"])


def test_a_terminal_is_line_buffered_as_in_a_fresh_interpreter(launch, probe, tmp_path):
    """The server's own streams are not terminals; a child's may be: Python decides the buffering anew."""
    leader, terminal = os.openpty()
    child = launch([*probe, "plain"], cwd=tmp_path, stdout=terminal, stderr=subprocess.PIPE, text=True)
    os.close(terminal)
    seen = b""
    while b"\n" not in seen:
        seen += os.read(leader, 65536)
    os.close(leader)
    assert child.wait(timeout=60) == 0, child.stderr.read()
    assert json.loads(seen.decode().splitlines()[0])["stdout_line_buffered"] is True


@pytest.mark.slow
def test_a_signal_crossing_the_childs_end_loses_nothing(launch, probe, tmp_path):
    """Signals sent while the child ends (the campaigns' timed kills): its exit status still arrives."""
    for _ in range(10):
        child = launch([*probe, "exit", "3"], cwd=tmp_path, stdout=subprocess.DEVNULL)
        while child.poll() is None:
            child.send_signal(signal.SIGCONT)  # harmless to a live child; a no-op once it has ended
        assert child.wait(timeout=60) == 3
