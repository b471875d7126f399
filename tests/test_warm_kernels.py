"""The tests' kernels forked warm (``tests/warm_kernels.py``): a forked kernel reports what a fresh one does (its
folder, path, backend, streams, environment, process group ...), is interrupted, shut down and killed as a fresh one
is, leaves nothing behind; and a kernel the server's imports would not fit starts fresh."""

import ast
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
import warm
import warm_kernels
from jupyter_client import KernelManager


@pytest.fixture
def kernels():
    """Warm kernels of this test's own (the session's, from conftest, are put back after)."""
    w = warm_kernels.WarmKernels(dict(os.environ))
    w.install()
    try:
        yield w
    finally:
        w.close()


def started(tmp_path, **options) -> tuple[KernelManager, object]:
    # IPC sockets, files in the test's folder: TCP ports picked free by one process can be taken by another worker's
    # kernel before this one binds them ("Address already in use"), which is not what these tests are about
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / f"kernel-{uuid.uuid4().hex[:8]}"))
    km.start_kernel(cwd=str(tmp_path), **options)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def run(kc, code: str, timeout: float = 60) -> tuple[str, dict]:
    """Run ``code``, which binds ``OUT``: ``str(OUT)`` and the execute reply's content. (Read from the reply
    itself, not from printed text: a stream message may trail the reply on a busy machine.)"""
    reply = kc.execute_interactive(code, timeout=timeout, user_expressions={"out": "str(OUT)"})["content"]
    if reply["status"] != "ok":
        return "", reply
    got = reply["user_expressions"]["out"]
    return (got["data"]["text/plain"] if got["status"] == "ok" else ""), reply


def parent_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])




FACTS = textwrap.dedent("""
    import os, select, signal, sys, threading
    import matplotlib, numpy
    from ipykernel.kernelapp import IPKernelApp
    def handler(s):
        h = signal.getsignal(s)
        return getattr(h, "__name__", str(h))
    OUT = repr({"cwd": os.getcwd(), "path": sys.path, "backend": matplotlib.get_backend(),
                "stdin ended": bool(select.select([0], [], [], 5)[0]) and os.read(0, 1) == b"",
                "parent given": IPKernelApp.instance().parent_handle == int(os.environ["JPY_PARENT_PID"]),
                "group": os.getpgid(0) == os.getpid(), "flags": repr(sys.flags), "x": sys._xoptions,
                "signals": [handler(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)],
                "threads": sorted(t.name for t in threading.enumerate()),
                "environment": sorted(set(os.environ) - {"JPY_PARENT_PID", "PYTEST_CURRENT_TEST"}),
                "draw": numpy.random.rand()})
""")


def facts(tmp_path) -> dict:
    km, kc = started(tmp_path)
    try:
        text, reply = run(kc, FACTS)
        assert reply["status"] == "ok", reply
        return {**ast.literal_eval(ast.literal_eval(text)), "pid": km.provisioner.pid, "pgid": km.provisioner.pgid,
                "parent": parent_of(km.provisioner.pid)}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


@pytest.mark.slow
def test_a_forked_kernel_reports_what_a_fresh_one_does(kernels, tmp_path, monkeypatch):
    """The folder, sys.path, matplotlib's backend, stdin read as ended, JPY_PARENT_PID taken at start (not
    frozen at the server's import), a process group of its own, the interpreter's flags and options, the
    signal handlers, the threads, the environment's names: as in a fresh kernel. A draw from numpy's global
    generator differs between two forked kernels (reseeded at the fork, as ``random`` reseeds itself)."""
    forked = [facts(tmp_path), facts(tmp_path)]
    assert (kernels.forked, kernels.fresh) == (2, 0)
    server = kernels.launchers[("-Xfrozen_modules=off",)].server.pid
    monkeypatch.setattr(warm_kernels._provisioner, "launch_kernel", warm_kernels._fresh)
    fresh = facts(tmp_path)
    assert fresh["parent"] == os.getpid() and kernels.forked == 2  # (that one was not forked)
    own = ("pid", "pgid", "parent", "draw")
    for one in forked:
        assert one["parent"] == server
        assert one["pgid"] == one["pid"]  # what jupyter_client's killpg reaches: the kernel's group, not the server's
        assert {k: v for k, v in one.items() if k not in own} == {k: v for k, v in fresh.items() if k not in own}
    assert fresh["backend"] == warm_kernels.INLINE and fresh["stdin ended"] and fresh["group"]
    assert forked[0]["draw"] != forked[1]["draw"]
    for one in forked:
        assert warm.gone_within([one["pid"]])


@pytest.mark.slow
def test_an_interrupt_reaches_a_forked_kernel_and_a_kill_ends_it(kernels, tmp_path):
    km, kc = started(tmp_path)
    pid, server = km.provisioner.pid, kernels.launchers[("-Xfrozen_modules=off",)].server.pid
    try:
        msg_id = kc.execute("import time; print('asleep', flush=True); time.sleep(60)")
        while not (m := kc.get_iopub_msg(timeout=60))["msg_type"] == "stream" or \
                m["parent_header"].get("msg_id") != msg_id:
            pass  # (the cell's own code is running: an interrupt now reaches it, not the kernel around it)
        km.interrupt_kernel()  # SIGINT to its process group, as for a fresh kernel
        reply = kc.get_shell_msg(timeout=30)["content"]
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
        for _ in range(100):  # a request that comes while the kernel still aborts after the interrupt's error is
            text, reply = run(kc, "OUT = 6 * 7")  # answered "aborted", not run (ipykernel's stop_on_error): ask again
            if reply["status"] != "aborted":
                break
        assert text == "'42'", reply  # and it goes on
        child = km.provisioner.process
        km.shutdown_kernel(now=True)  # SIGKILL to its process group
        assert warm.gone_within([pid], 10) and child.returncode == -signal.SIGKILL
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    kernels.close()
    assert not warm.alive(server)  # (the session's own servers, from conftest, are this process's too: not these)


@pytest.mark.slow
def test_a_kernel_the_servers_imports_would_not_fit_starts_fresh(kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "svg")  # read by matplotlib when it is imported: the server's was not this
    km, kc = started(tmp_path)
    try:
        assert (kernels.forked, kernels.fresh) == (0, 1) and parent_of(km.provisioner.pid) == os.getpid()
        assert run(kc, "import matplotlib; OUT = matplotlib.get_backend()")[0] == "'svg'"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert kernels.why_fresh([sys.executable, "-c", "pass"], None, False, {}).startswith("another command")
    assert kernels.why_fresh(["/nowhere/python", "-m", "ipykernel_launcher"], None, False, {}).startswith("another")
    assert kernels.why_fresh([sys.executable, "-m", "ipykernel_launcher"], None, True, {}).startswith("options")


RECORD = textwrap.dedent("""
    import json, os, sys
    read = set()
    class Recording(type(os.environ)):
        def __getitem__(self, key):
            read.add(key)
            return super().__getitem__(key)
        def __contains__(self, key):
            read.add(key)
            return super().__contains__(key)
    e = os.environ
    os.environ = Recording(e._data, e.encodekey, e.decodekey, e.encodevalue, e.decodevalue)
    for name in sys.argv[1:]:
        __import__(name)
    print(json.dumps({"read": sorted(read), "modules": sorted(sys.modules)}))
""")


def imports(*modules: str) -> dict:
    import json
    out = subprocess.run([sys.executable, "-c", RECORD, *modules], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_the_servers_imports_read_no_variable_set_per_kernel_and_leave_the_harness_to_the_kernel():
    """What the server imports never reads a variable jupyter_client or pytest sets per kernel or per test (they
    differ between the server and every kernel), nor imports harness_lib or ipykernel.kernelapp. The recorder is
    checked on ipykernel.kernelapp itself, which does read JPY_PARENT_PID when imported."""
    got = imports(*warm_kernels.MODULES)
    assert not set(got["read"]) & set(warm_kernels.PER_KERNEL), got["read"]
    assert not [m for m in got["modules"] if m == "ipykernel.kernelapp" or m.startswith("harness_lib")]
    assert "JPY_PARENT_PID" in imports("ipykernel.kernelapp")["read"]


@pytest.mark.slow
def test_kernels_started_from_two_threads_share_one_server_and_a_dead_server_is_replaced(kernels, tmp_path):
    import threading
    managers = []
    threads = [threading.Thread(target=lambda: managers.append(started(tmp_path))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert len(managers) == 2 and len(kernels.launchers) == 1 and kernels.forked == 2
        server = kernels.launchers[("-Xfrozen_modules=off",)].server
        assert all(parent_of(km.provisioner.pid) == server.pid for km, _ in managers)
        assert [run(kc, "OUT = 1")[0] for _, kc in managers] == ["'1'", "'1'"]  # neither killed by the other's server
    finally:
        for km, kc in managers:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    server.kill()  # the server gone: the kernel asked for meanwhile starts fresh, the next from a new server
    server.wait(10)
    for expected_parent in (os.getpid(), None):
        km, kc = started(tmp_path)
        try:
            parent = parent_of(km.provisioner.pid)
            new = kernels.launchers.get(("-Xfrozen_modules=off",))
            assert parent == (expected_parent or new.server.pid) and run(kc, "OUT = 2")[0] == "'2'"
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    assert (kernels.forked, kernels.fresh) == (3, 1) and new.server.pid != server.pid
