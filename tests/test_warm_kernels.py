"""The tests' kernels forked warm (``tests/warm_kernels.py``): a forked kernel is what jupyter_client asked for
(its environment, folder, process group, the parent it watches), is interrupted, shut down and killed as a
fresh one is, leaves nothing behind; and a kernel the server's imports would not fit starts fresh."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
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
    km = KernelManager(kernel_name="python3")
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


def alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pid: int, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


@pytest.mark.slow
def test_a_forked_kernel_is_the_kernel_asked_for(kernels, tmp_path):
    km, kc = started(tmp_path)
    try:
        pid = km.provisioner.pid
        server = kernels.launchers[("-Xfrozen_modules=off",)].server.pid
        assert (kernels.forked, kernels.fresh) == (1, 0) and parent_of(pid) == server
        text, reply = run(kc, textwrap.dedent("""
            import os, sys
            from ipykernel.kernelapp import IPKernelApp
            OUT = " ".join(map(str, (os.getpid(), os.getpgid(0), os.getcwd(), os.environ["JPY_PARENT_PID"],
                                     IPKernelApp.instance().parent_handle, sys.flags.dont_write_bytecode == 0,
                                     sys._xoptions.get("frozen_modules"), "pandas" in sys.modules)))
        """))
        assert reply["status"] == "ok", reply
        me = os.getpid()
        # its own process group (an interrupt to the group reaches it and nothing else); the folder and the
        # environment jupyter_client gave; the parent it watches is this process, not the server's empty one;
        # the interpreter's options of the kernelspec; and pandas already there, which is the point
        assert text.strip("'").split() == [str(pid), str(pid), str(tmp_path), str(me), str(me), "True", "off", "True"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    assert gone_within(pid) and km.provisioner is None or km.provisioner.process is None


@pytest.mark.slow
def test_an_interrupt_reaches_a_forked_kernel_and_a_kill_ends_it(kernels, tmp_path):
    km, kc = started(tmp_path)
    pid, server = km.provisioner.pid, kernels.launchers[("-Xfrozen_modules=off",)].server.pid
    try:
        kc.execute("import time; time.sleep(60)")
        time.sleep(0.5)
        km.interrupt_kernel()  # SIGINT to its process group, as for a fresh kernel
        reply = kc.get_shell_msg(timeout=10)["content"]
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
        text, reply = run(kc, "OUT = 6 * 7")
        assert text == "'42'", reply  # and it goes on
        child = km.provisioner.process
        km.shutdown_kernel(now=True)  # SIGKILL to its process group
        assert gone_within(pid, 10) and child.returncode == -signal.SIGKILL
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    kernels.close()
    assert not alive(server)  # (the session's own servers, from conftest, are this process's too: not these)


@pytest.mark.slow
def test_a_kernel_the_servers_imports_would_not_fit_starts_fresh(kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "agg")  # read by matplotlib when it is imported: the server's was not this
    km, kc = started(tmp_path)
    try:
        assert (kernels.forked, kernels.fresh) == (0, 1) and parent_of(km.provisioner.pid) == os.getpid()
        assert run(kc, "import matplotlib; OUT = matplotlib.get_backend()")[0] == "'agg'"
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
