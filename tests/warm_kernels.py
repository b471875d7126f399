"""The tests' notebook kernels without 1.6 s of imports each: ipykernel children of a fork server.

``make test`` starts about fifty kernels in its own processes (nbval's, one per notebook; the reader sessions of
tests/test_parameters.py, test_sliders.py, test_reader_params.py, test_kernel_stop.py ...), and a fresh kernel
spends about 1.6 s of CPU importing IPython, ipykernel's modules, pandas and matplotlib before its first cell
does anything. Here jupyter_client's launch of ``python -m ipykernel_launcher`` goes to a fork server of
``tests/warm.py`` that imported those once (``MODULES``): the kernel is a forked child, a process of its own
in a process group of its own (so an interrupt or a kill reaches it and what it started, as with a fresh
one), with the environment, working folder, argv, ``sys.path`` and streams a fresh one has (its stdin read as
ended, as jupyter_client leaves it); it then runs ``ipykernel_launcher`` as ``python -m`` does
(tests/test_warm_kernels.py compares what a forked and a fresh kernel report). Its cells run the same code;
what differs is when the modules were imported, and so:

- a kernel is forked only when its environment is the one the server imported those modules with (this
  process's at the session's start, but for the variables jupyter_client sets per kernel and pytest per test,
  ``PER_KERNEL``, which none of ``MODULES`` reads: ipykernel.kernelapp, which reads ``JPY_PARENT_PID`` at
  import, is not among them), and only for the interpreter options the server runs with; any other kernel
  starts fresh. The server imports matplotlib with the backend ipykernel sets before a fresh kernel's first
  import of it (``server_env``);
- harness_lib is never imported by the server: it reads its variables (the endpoint seam, the cache folder,
  the language) when a kernel imports it;
- the kernels share the server's hash seed (``random`` and numpy's global generator are reseeded at the fork).

If the server dies, the kernel asked for meanwhile starts fresh and the next one from a new server. Where a
reader's kernels start, a test may fork them too, through ``site``: the browser test's JupyterLab and the fresh
clone's ``make chapter`` (tests/test_executed.py), whose tests check what a reader sees and what a run writes, not
how long a kernel's imports take; tests/test_loaded.py's child pytest and the benchmarks start their own, and
``HARNESS_TEST_WARM_KERNELS=0`` turns this off for a whole run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import jupyter_client.provisioning.local_provisioner as _provisioner
import warm

MODULES = ("numpy", "pandas", "matplotlib", "matplotlib.pyplot", "matplotlib_inline.backend_inline", "IPython",
           "zmq", "tornado", "jupyter_client", "ipykernel.ipkernel", "ipykernel.zmqshell")
PER_KERNEL = ("JPY_PARENT_PID", "JPY_SESSION_NAME",  # set by jupyter_client for each kernel it launches,
              "PYTEST_CURRENT_TEST")                 # and by pytest for each test
OPTIONS = ((), ("-Xfrozen_modules=off",))            # nbval's current-environment kernel; ipykernel's kernelspec
INLINE = "module://matplotlib_inline.backend_inline"  # the backend ipykernel gives a kernel before matplotlib loads
_fresh = _provisioner.launch_kernel                   # jupyter_client's own


class WarmKernels:
    """Installed as jupyter_client's kernel launcher in this process (``install``); the server starts at the
    first kernel it can fork. ``forked`` and ``fresh`` count the kernels launched each way."""

    def __init__(self, env: dict[str, str]):
        self.env = {k: v for k, v in env.items() if k not in PER_KERNEL}
        self.launchers: dict[tuple[str, ...], warm.Launcher] = {}  # by the interpreter's options
        self.forked = self.fresh = 0
        self._before = _fresh
        self._lock = threading.Lock()  # kernels started from two threads share one server
    @staticmethod
    def options(cmd: list[str]) -> tuple[str, ...] | None:
        """The interpreter options of ``python [OPTIONS] -m ipykernel_launcher ...`` (None: another command)."""
        for options in OPTIONS:
            head = [*options, "-m", "ipykernel_launcher"]
            if cmd[1:len(head) + 1] == head and cmd[:1] == [sys.executable]:  # (not one a symlink leads to)
                return options
        return None

    def why_fresh(self, cmd: list[str], env: dict[str, str] | None, independent: bool, kw: dict) -> str | None:
        """Why this kernel cannot be forked (None: it can)."""
        if self.options(cmd) is None:
            return f"another command: {cmd[:4]}"
        if independent or kw:
            return f"options a fork does not give: independent={independent}, {sorted(kw)}"
        given = {k: v for k, v in (os.environ if env is None else env).items() if k not in PER_KERNEL}
        if given != self.env:
            return f"another environment: {sorted(set(given.items()) ^ set(self.env.items()))[:3]}"
        return None

    def launch(self, cmd, stdin=None, stdout=None, stderr=None, env=None, independent=False, cwd=None, **kw):
        """jupyter_client's ``launch_kernel``, the same arguments and the same ``Popen``-like answer."""
        why = self.why_fresh(cmd, env, independent, kw)
        options = self.options(cmd)
        with self._lock:
            if why is None and options not in self.launchers:
                try:
                    self.launchers[options] = warm.Launcher(MODULES, options, env=self.server_env())
                except warm.LauncherGone as e:
                    why = f"the fork server did not start: {e}"
        if why is None:
            # what jupyter_client's launch_kernel adds (not independent)
            kernel_env = {**(os.environ if env is None else env), "JPY_PARENT_PID": str(os.getpid())}
            try:
                child = self.launchers[options]([sys.executable, *cmd[1:]], env=kernel_env, cwd=cwd,
                                                stdin=subprocess.PIPE if stdin is None else stdin, stdout=stdout,
                                                stderr=stderr, start_new_session=True)
            except warm.LauncherGone:  # the server died (and took its kernels): this one fresh, the next a new server
                with self._lock:
                    self.launchers.pop(options, None)
            else:
                with self._lock:
                    self.forked += 1
                if stdin is None:
                    child.stdin.close()  # as jupyter_client does: the kernel's stdin reads as ended
                return child
        with self._lock:
            self.fresh += 1
        return _fresh(cmd, stdin=stdin, stdout=stdout, stderr=stderr, env=env, independent=independent, cwd=cwd,
                      **kw)

    def server_env(self) -> dict[str, str]:
        """The environment the server imports with: the session's, and the matplotlib backend ipykernel sets
        before a fresh kernel first imports matplotlib (when the session names none: else it stands)."""
        return {"MPLBACKEND": INLINE, **self.env} if not self.env.get("MPLBACKEND") else dict(self.env)

    def install(self):
        self._before = _provisioner.launch_kernel
        _provisioner.launch_kernel = self.launch

    def close(self):
        if _provisioner.launch_kernel == self.launch:
            _provisioner.launch_kernel = self._before
        while self.launchers:
            self.launchers.popitem()[1].close()


# -- in another process: a command under test --------------------------------------------------------------------
# A sitecustomize for a command a test starts (JupyterLab, `make chapter`): in the first process that reads it (the
# variable is taken out of the environment its children inherit), the kernels it launches forked as above; when that
# process ends, a line "FORKED FRESH" is added to the file ``kernels`` beside it.
SITECUSTOMIZE = """import os, sys
_tests = os.environ.pop("HARNESS_TEST_WARM_SITE", None)
if _tests:
    import atexit
    sys.path.insert(0, _tests)
    import warm_kernels
    sys.path.remove(_tests)
    warm_kernels.PER_KERNEL += tuple(filter(None, os.environ.pop("HARNESS_TEST_WARM_PER_KERNEL", "").split(",")))
    _warm = warm_kernels.WarmKernels(dict(os.environ))
    _warm.install()
    def _said():
        with open(os.path.join(os.path.dirname(__file__), "kernels"), "a") as f:
            f.write(f"{_warm.forked} {_warm.fresh}\\n")
    atexit.register(_said)
"""


def enabled() -> bool:
    return os.environ.get("HARNESS_TEST_WARM_KERNELS", "1") != "0" and sys.platform.startswith("linux")


def site(folder, per_kernel: tuple[str, ...] = ()) -> dict[str, str]:
    """What a command's environment needs for its kernels to be forked (``SITECUSTOMIZE``, written into
    ``folder``): ``PYTHONPATH`` to put first and the variables that switch it on; ``per_kernel``, variables the
    command sets for each kernel (none of ``MODULES`` reads them). Nothing when the tests' kernels start fresh."""
    if not enabled():
        return {}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    return {"PYTHONPATH": str(folder), "HARNESS_TEST_WARM_SITE": os.path.dirname(os.path.abspath(__file__)),
            "HARNESS_TEST_WARM_PER_KERNEL": ",".join(per_kernel)}


def counted(folder) -> list[tuple[int, int]]:
    """(forked, fresh) of each process of ``site(folder)`` that has ended."""
    path = os.path.join(folder, "kernels")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f.read().splitlines()]
