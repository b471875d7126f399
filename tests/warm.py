"""``python -m harness_lib`` children without Python's start-up each time: a fork server for the campaigns.

The crash and operator campaigns (``tests/reliability_campaign.py``, ``tests/operator_campaign.py``) start some
hundreds of ``python -m harness_lib run|resume`` children, and a fresh interpreter spends about 0.3 s
importing the harness (httpx, asyncio) before it does anything. Here one helper process imports all that
once, then forks a child per request::

    with Launcher() as launch:
        child = launch([sys.executable, "-m", "harness_lib", "run", "plan"], env=env, cwd=root,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)   # as subprocess.Popen
        child.send_signal(signal.SIGKILL); out, err = child.communicate(timeout=60)  # child.returncode == -9

What a child is: a real process of its own (its pid, killed by the signal sent to that pid and nothing
else), whose environment, working folder, ``sys.argv``, ``sys.path[0]`` and three standard streams are the
ones asked for, and which then runs the module as ``python -m`` does (``runpy``, under the name
``__main__``), so ``harness_lib/__main__.py`` installs its signal handlers and returns the CLI's exit
code, and an exception nobody catches prints its traceback and exits 1, as in a fresh interpreter.
What it shares with the server, and a fresh interpreter would not: the modules already imported (the
server imports, never runs, so no cache is filled and nothing read from the environment at import
time: the tests in ``tests/test_warm.py`` pin that), the hash seed (``random`` reseeds itself on fork),
and Python's own start-up, which it skips: a signal can no longer land while Python imports. That is
why each campaign keeps a sample of its children on fresh interpreters (see their docstrings).

The server (``serve``) holds no thread (it forks), keeps no descriptor open in a child (the child closes the
server's sockets and pid descriptors), reaps every child and reports its exit status, delivers the
signals the campaign sends (it reaps only in its own loop, so a pid it signals is never one reused), and
when its lifeline closes (the campaign ended, or died: Ctrl-C, a worker killed) it SIGKILLs the children
still alive and leaves. A child dies with the server (``PR_SET_PDEATHSIG``), so none outlives both.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

WARM = ("harness_lib.cli", "harness_lib.loop", "harness_lib.client", "harness_lib.scripted", "asyncio", "httpx",
        # what httpx imports only once a run sends its first request (measured: sys.modules after a run)
        "httpcore", "h11", "anyio._backends._asyncio", "anyio.streams.tls", "anyio.to_thread", "certifi",
        "encodings.idna", "stringprep")
MAX_MESSAGE = 1 << 20
PR_SET_PDEATHSIG = 1


class LauncherGone(RuntimeError):
    """The fork server ended (or was killed) while the campaign still needed it."""


# -- the server ---------------------------------------------------------------------------------------------------
def serve(lifeline: socket.socket):
    """Fork a child per request on ``lifeline``; in the server, return None once the lifeline closes; in a
    child, return ``(module, args)`` with the child set up, for the caller to run."""
    libc = ctypes.CDLL(None, use_errno=True)
    sel, server = selectors.DefaultSelector(), os.getpid()
    sel.register(lifeline, selectors.EVENT_READ, ("lifeline", None, None))
    alive: dict[int, int] = {}  # pid: its pidfd, until reaped
    conns: dict[socket.socket, int] = {}  # the campaign's connection for each child: open until it lets go
    while True:
        for key, _ in sel.select():
            kind, pid, conn = key.data
            if kind == "lifeline":
                message, fds, _, _ = socket.recv_fds(lifeline, MAX_MESSAGE, 4)
                if not message:  # the campaign is gone: so are its children
                    for pid in alive:
                        os.kill(pid, signal.SIGKILL)
                    for pid in alive:
                        os.waitpid(pid, 0)
                    return None
                request, conn = json.loads(message), socket.socket(fileno=fds[0])
                if threading.active_count() != 1:
                    raise RuntimeError("the fork server holds a thread: a forked child would miss it")
                sys.stdout.flush(), sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    for fd in alive.values():
                        os.close(fd)
                    for other in [*conns, conn, lifeline]:
                        other.close()
                    sel.close()
                    return _become(request, fds[1:], libc, server)
                for fd in fds[1:]:
                    os.close(fd)
                if request.get("start_new_session"):
                    with contextlib.suppress(PermissionError):  # (EACCES once a child has exec'd: ours never does)
                        os.setpgid(pid, pid)
                alive[pid], conns[conn] = os.pidfd_open(pid), pid
                conn.send(json.dumps({"pid": pid}).encode())
                sel.register(alive[pid], selectors.EVENT_READ, ("exit", pid, conn))
                sel.register(conn, selectors.EVENT_READ, ("conn", pid, conn))
            elif kind == "conn" and conn in conns:  # a signal to deliver, or the campaign let go of this child
                try:
                    message = conn.recv(MAX_MESSAGE)
                except OSError:
                    message = b""
                if message and pid in alive:  # not reaped yet (only this loop reaps): still this child
                    os.kill(pid, json.loads(message)["signal"])
                elif not message:
                    if pid in alive:
                        os.kill(pid, signal.SIGKILL)  # nobody would hear how it ended
                    sel.unregister(conn)
                    del conns[conn]
                    conn.close()  # (closed by the campaign's side first: nothing it sent is left unread)
            elif kind == "exit":
                sel.unregister(alive[pid])
                os.close(alive.pop(pid))
                _, status = os.waitpid(pid, 0)
                if conn in conns:
                    try:
                        conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                    except OSError:  # the campaign let go of it meanwhile
                        pass


def _become(request: dict, stdio: list[int], libc, server: int) -> tuple[str, list[str]]:
    """In the forked child: take the streams, folder, environment and argv asked for."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != server:
        os._exit(125)  # the server died as we were born: nobody would reap or report this child
    if request.get("start_new_session"):
        os.setpgid(0, 0)  # its own process group (the server does it too: set before its pid is reported)
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
        os.close(fd)
    for target, stream in ((1, sys.stdout), (2, sys.stderr)):
        stream.reconfigure(line_buffering=os.isatty(target))  # as a fresh interpreter decides it
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path.insert(0, os.getcwd())  # python -m puts the working folder first (main took the server's off)
    if "numpy.random" in sys.modules:  # random reseeds itself in a forked child; numpy's global generator does not
        sys.modules["numpy.random"].seed()
    sys.argv = [request["module"], *request["args"]]
    return request["module"], request["args"]


def main():
    """The server's entry point: ``python tests/warm.py FD OWNER MODULES`` (FD: the lifeline, a SOCK_SEQPACKET
    socket; OWNER: the pid of the process that started it, there only for ``leftovers`` to read; MODULES: what
    to import, comma-separated)."""
    lifeline = socket.socket(fileno=int(sys.argv[1]))
    sys.path.pop(0)  # tests/: not on a ``python -m`` child's path
    for name in sys.argv[3].split(","):
        __import__(name)
    lifeline.send(b"ready")
    child = serve(lifeline)
    if child is None:
        return
    module, _ = child
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def leftovers(owner: int | None = None, modules: tuple[str, ...] = WARM) -> list[int]:
    """The process table's word on what is still alive of the servers ``owner`` (this process, by
    default) started to import ``modules`` (the campaigns' servers, by default: not the kernels' of
    tests/warm_kernels.py, which a pytest worker keeps for its whole session), and of their children: a
    forked child keeps the server's command line."""
    mine = [str(Path(__file__).resolve()), str(os.getpid() if owner is None else owner), ",".join(modules)]
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # not a process, or gone meanwhile
        at = argv.index(mine[0]) if mine[0] in argv[1:3] else -1  # (after the interpreter's options, if any)
        if at > 0 and argv[at + 2:at + 4] == mine[1:]:
            found.append(int(entry))
    return sorted(found)


def alive(pid: int) -> bool:
    """The process table's word: ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pids, seconds: float = 20) -> bool:
    """Whether every one of ``pids`` has stopped running within ``seconds``."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(alive(p) for p in pids)


# -- the campaign's side -----------------------------------------------------------------------------------------
class Launcher:
    """The fork server, started once; call it as ``subprocess.Popen`` with ``[sys.executable, "-m", module,
    *args]`` (the only command it runs). Close it (``with``) to end the server and any child still alive.
    ``modules``: what the server imports before it forks (the campaigns' ``WARM`` by default); ``options``:
    the interpreter's own options (``-X...``) the server runs with, which a command then gives after
    ``sys.executable``; ``env``: the server's environment (this process's by default), which is what the
    modules saw when they were imported."""

    def __init__(self, modules: tuple[str, ...] = WARM, options: tuple[str, ...] = (), env: dict | None = None):
        self.options = list(options)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._lifeline = ours
        self.server = subprocess.Popen([sys.executable, *self.options, str(Path(__file__).resolve()),
                                        str(theirs.fileno()), str(os.getpid()),  # the owner, for ``leftovers``
                                        ",".join(modules)],
                                       pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, start_new_session=True, env=env)
        theirs.close()
        if ours.recv(16) != b"ready":
            self.close()
            raise LauncherGone(f"the fork server did not start (exit {self.server.wait()})")

    def __call__(self, argv, *, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False,
                 start_new_session=False) -> Child:
        return Child(self, list(argv), env, cwd, stdin, stdout, stderr, text, start_new_session)

    def _request(self, request: dict, fds: list[int]):
        with self._lock:
            try:
                socket.send_fds(self._lifeline, [json.dumps(request).encode()], fds)
            except OSError as e:
                raise LauncherGone(f"the fork server (pid {self.server.pid}) is gone "
                                   f"(exit {self.server.poll()}): {e}") from None

    def close(self):
        self._lifeline.close()  # the server SIGKILLs what is left and ends
        self.server.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Child:
    """A forked child, seen as ``subprocess.Popen`` sees its own: pid, poll, wait, send_signal, kill,
    terminate, communicate, returncode, and the pipes asked for."""

    def __init__(self, launcher: Launcher, argv, env, cwd, stdin, stdout, stderr, text, start_new_session=False):
        head = [sys.executable, *launcher.options, "-m"]
        if argv[:len(head)] != head or len(argv) <= len(head):
            raise ValueError(f"the launcher runs `{' '.join(head)} MODULE ...` only, not {argv}")
        self.args, self.returncode = argv, None
        module, args = argv[len(head)], argv[len(head) + 1:]
        self.stdin = None
        ours, theirs, sent = {}, [], []
        for fd, how in ((0, stdin), (1, stdout), (2, stderr)):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                ours[fd] = w if fd == 0 else r
                sent.append(r if fd == 0 else w)
                theirs.append(sent[-1])
            elif how == subprocess.DEVNULL:
                sent.append(os.open(os.devnull, os.O_RDWR))
                theirs.append(sent[-1])
            else:
                sent.append(fd if how is None else how if isinstance(how, int) else how.fileno())
        self._conn, conn = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {"module": module, "args": [str(a) for a in args],
                   "env": dict(os.environ if env is None else env), "cwd": str(cwd or os.getcwd()),
                   "start_new_session": bool(start_new_session)}
        try:
            launcher._request(request, [conn.fileno(), *sent])
        finally:
            conn.close()
            for fd in theirs:
                os.close(fd)
        self.pid = self._receive(None)["pid"]
        mode = "r" if text else "rb"
        self.stdout = open(ours[1], mode) if 1 in ours else None
        self.stderr = open(ours[2], mode) if 2 in ours else None
        if 0 in ours:
            self.stdin = open(ours[0], "w" if text else "wb")

    def _receive(self, timeout: float | None) -> dict:
        self._conn.settimeout(timeout)
        try:
            message = self._conn.recv(MAX_MESSAGE)
        except (TimeoutError, BlockingIOError):
            raise subprocess.TimeoutExpired(self.args, timeout) from None
        except OSError as e:
            raise LauncherGone(f"the fork server is gone: {e}") from None
        if not message:
            raise LauncherGone(f"the fork server ended before it reported child {getattr(self, 'pid', '?')}")
        answer = json.loads(message)
        if "returncode" in answer:
            self._conn.close()  # the server closes its end once ours is closed: no message of ours left unread
        return answer

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self._receive(0)["returncode"]
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._receive(timeout)["returncode"]
        return self.returncode

    def send_signal(self, sig: int):
        if self.poll() is None:  # the server reaps only between our messages: the pid is still the child's
            try:
                self._conn.settimeout(None)  # (poll left it non-blocking)
                self._conn.send(json.dumps({"signal": int(sig)}).encode())
            except OSError as e:
                if self.poll() is None:  # (else it ended meanwhile: nothing to signal, as with Popen)
                    raise LauncherGone(f"the fork server is gone: cannot signal child {self.pid}: {e}") from None

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def communicate(self, timeout: float | None = None):
        """Both pipes read to their end (the way ``Popen`` does, each on a thread), then the exit status."""
        if self.stdin:
            self.stdin.close()
        results = {}
        readers = [threading.Thread(target=lambda k=k, f=f: results.__setitem__(k, f.read()), daemon=True)
                   for k, f in (("out", self.stdout), ("err", self.stderr)) if f is not None]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout)
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait(timeout)
        return results.get("out"), results.get("err")


if __name__ == "__main__":
    main()
