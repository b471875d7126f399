"""The reader's code, run where nothing it does can reach the kernel: a process of its own, one per case.

``await sandbox.run(factory, deadline, files)`` runs ``factory()`` (a coroutine function: one case of a check, one
experiment of the capstone) in a child process forked from the kernel, and returns an ``Outcome``:

* ``ok``: what it returned, as plain data (``plain.plain``: built-in values of exact types, read through the
  built-in types' own methods), so that an object which lies about equality, membership or its own value is said
  in one line and is never compared;
* ``raised``: the exception, described in the child (its type, its message in one line, the reader's frames);
* ``hung``: still running at the deadline; the child, and every process it started, is ended;
* ``died``: the process ended before it answered (``os._exit``, a signal, a crash).

The child is a fork, so it has every function and variable of the reader's cells as they are; whatever the piece
does to them, to modules, to the working folder, the streams, the providers or the event loop stays in the child
and ends with it: the next case is forked from the kernel as it was. The child runs in a process group of its own,
in a scratch folder (its working folder and its temporary files, removed after the case); what it prints reaches
the cell, up to ``Printed.limit`` characters a check; the threads and processes it leaves running are named in
``Outcome.left`` and ended with it. The toolbar's Stop (a cancellation of the kernel's task) ends the child at once.

Where the system has no ``fork`` (Windows), the case runs in a thread of the kernel, as the checks did before:
under the same deadline, its result made plain in the thread, but what it changes in the kernel stays changed
(docs/checks.md says why the process was chosen, and what it costs).
"""

from __future__ import annotations

import asyncio
import builtins
import ctypes
import gc
import io
import os
import pickle
import re
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import warnings
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from .language import Text
from .plain import NotPlain, cut, one_line, plain, type_name

FORK = hasattr(os, "fork") and os.environ.get("HARNESS_CHECK_IN_THREAD") != "1"
# What the child ends with, taken now: a piece that replaces os._exit, time.sleep or pickle.dumps in its process
# must not make the child return into the kernel's code.
_EXIT, _SLEEP, _DUMPS, _WRITE, _KILL, _GETPID = os._exit, time.sleep, pickle.dumps, os.write, os.kill, os.getpid
UNANSWERED = 97   # the child's exit code when it could not write its answer (its descriptors closed, say)
RESULT_LIMIT = 64 * 1024 * 1024   # bytes of an answer; plain data is far smaller (plain.TOTAL_LIMIT)
POLL_S = 0.02                     # how often the kernel looks whether the child died without answering
LEFT_JOIN_S = 0.05                # how long the child waits for idle worker threads to end before naming those left


@dataclass
class Outcome:
    """What one run of the reader's code came to (see the module's text). ``error``: ``type`` (its name), ``line``
    (the exception in one line), ``frames`` ((line, function) of the reader's own frames, innermost last), ``shape``
    (a check's own ``Shape`` message, a ``Text``), ``stub`` (whether it is ``NotImplementedError``) and ``not_plain``
    (what ``plain.NotPlain`` said: the type, where, why and its limit)."""
    kind: str
    value: Any = None
    error: dict | None = None
    died: tuple | None = None   # ("exit", code), ("signal", its name) or ("silent",): how the process ended
    left: list[tuple] = field(default_factory=list)   # ("thread", name, target, place) or ("process", command)
    wrote: list[str] = field(default_factory=list)   # what it left in its working folder (a scratch one)


class Shape(Exception):
    """What a piece returned is not what the section's piece returns: one line, said as it is (a check raises it,
    with a ``Text``)."""


# Terminal controls a piece may print (an escape, a carriage return alone): written out, so that what it prints can
# neither hide the check's verdict nor draw one of its own.
_CONTROL = re.compile(r"\x1b|\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Printed:
    """What the reader's code printed during one check, relayed to the cell up to ``limit`` characters; the rest
    is counted and said once, at the end."""

    def __init__(self, limit: int = 10_000):
        self.limit, self.shown, self.hidden = limit, 0, 0

    def relay(self, text: str, stream) -> None:
        text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
        room = max(self.limit - self.shown, 0)
        shown, rest = text[:room], text[room:]
        if shown:
            try:
                stream.write(shown)
                stream.flush()
            except Exception:  # noqa: BLE001 - a stream that cannot take it: the text is counted, not shown
                rest = text
                shown = ""
        self.shown += len(shown)
        self.hidden += len(rest)


# -- the case, as the child (or the thread) runs it ---------------------------------------------------------------
async def _case(factory: Callable[[], Awaitable[Any]], files: frozenset) -> dict:
    try:
        value = await factory()
    except BaseException as error:  # noqa: BLE001 - the reader's code may raise anything
        return {"kind": "raised", "error": describe(error, files)}
    try:
        return {"kind": "ok", "value": plain(value)}
    except NotPlain as wrong:
        return {"kind": "raised", "error": {"type": "NotPlain", "line": str(wrong), "frames": [], "stub": False,
                                            "shape": None,
                                            "not_plain": (wrong.kind, wrong.where, wrong.why, wrong.limit)}}


def describe(error: BaseException, files: frozenset) -> dict:
    """An exception of the reader's code as plain data: made where it was raised, under the case's deadline (its
    message may take for ever, or raise)."""
    frames = [(line, frame.f_code.co_name) for frame, line in traceback.walk_tb(error.__traceback__)
              if frame.f_code.co_filename in files][-20:]
    shape = None
    if type(error) is Shape:
        said = error.args[0] if error.args else ""
        shape = plain(said) if isinstance(said, Text) else cut(one_line(error).split(": ", 1)[-1], 400)
    stub = type(error) is NotImplementedError and not BaseException.__getattribute__(error, "args")
    return {"type": type_name(error), "line": one_line(error), "frames": frames, "shape": shape, "stub": stub,
            "not_plain": None}


# -- in a process of its own ----------------------------------------------------------------------------------------
def scratch() -> tempfile.TemporaryDirectory:
    """A scratch folder for one case (``with sandbox.scratch() as folder``): the working folder and the temporary
    files of each process the case runs in, the workspace it copies among them; removed with the case."""
    return tempfile.TemporaryDirectory(prefix="harness-check-", ignore_cleanup_errors=True)


async def run(factory: Callable[[], Awaitable[Any]], deadline: float, files: frozenset = frozenset(),
              printed: Printed | None = None, folder: str | None = None) -> Outcome:
    """``factory()`` in a child process (a thread where there is no fork), for at most ``deadline`` seconds;
    ``folder``: the case's scratch folder (default: one of its own, removed after)."""
    printed = printed or Printed()
    if not FORK:
        return await _in_thread(factory, deadline, files)
    if folder is None:
        with scratch() as own:
            return await run(factory, deadline, files, printed, own)
    os.makedirs(os.path.join(folder, "cwd"), exist_ok=True)
    pipes = [os.pipe() for _ in range(3)]   # the answer, stdout, stderr
    cwd = os.getcwd()
    with warnings.catch_warnings():   # Python 3.12 warns of fork in a process with threads: the child uses none
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:   # the child: never returns
        _child(factory, files, folder, cwd, pipes)
    for _r, w in pipes:
        os.close(w)
    reads = [r for r, _w in pipes]
    try:
        return await _await_child(pid, reads, deadline, printed)
    finally:
        _end(pid)
        for r in reads:
            try:
                os.close(r)
            except OSError:
                pass


def _child(factory, files: frozenset, scratch: str, cwd: str, pipes: list) -> None:
    """The child's whole life: set apart, run the case, write the answer, wait to be ended. Whatever happens, it
    ends in ``_EXIT``: it never returns into the kernel's code."""
    me = _GETPID()
    code = UNANSWERED
    try:
        answer = b""
        try:
            (result_r, result_w), (out_r, out_w), (err_r, err_w) = pipes
            _set_apart(scratch, cwd, (result_r, out_r, err_r), out_w, err_w)
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            outcome = loop.run_until_complete(_case(factory, files))
            outcome["left"] = _left_in_child(loop)
            outcome["wrote"] = _wrote(os.path.join(scratch, "cwd"))
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a stream the piece closed: what it held is lost, nothing else
                    pass
            answer = _DUMPS(outcome)
        except BaseException as error:  # noqa: BLE001 - anything at all: said, and the child still exits
            try:
                answer = _DUMPS({"kind": "raised", "error": describe(error, files)})
            except BaseException:  # noqa: BLE001
                answer = b""
        finally:
            try:
                if answer and _GETPID() == me:   # a process the piece forked answers nothing
                    view = memoryview(struct.pack("<Q", len(answer)) + answer)
                    while view:
                        view = view[_WRITE(result_w, view):]
                    code = 0
                    while True:   # the kernel ends the child, with what it left running, once it has the answer
                        _SLEEP(3600)
            except BaseException:  # noqa: BLE001 - the kernel hears the child died, which is true
                pass
    finally:
        try:
            _EXIT(code)
        finally:
            _KILL(_GETPID(), signal.SIGKILL)


def _set_apart(scratch: str, cwd: str, reads: tuple, out_w: int, err_w: int) -> None:
    """What the child changes first: its own process group, its own streams, folder and temporary files, no
    keyboard, the kernel's objects never collected here."""
    gc.freeze()   # the kernel's objects are the kernel's: no finalizer of theirs runs in the child
    os.setpgid(0, 0)
    for fd in reads:
        os.close(fd)
    if threading.current_thread() is threading.main_thread():
        signal.set_wakeup_fd(-1)   # the kernel's event loop's: a signal here must not wake it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.platform.startswith("linux"):
        try:   # PR_SET_CHILD_SUBREAPER: a process the piece starts and leaves stays ours to find and end
            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    os.register_at_fork(after_in_child=_forked_by_the_piece)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    old = (sys.stdout, sys.stderr)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    for stream, to in zip(old, (sys.stdout, sys.stderr)):   # a logger holding the kernel's stream writes here too
        try:
            stream.write, stream.flush = to.write, to.flush
        except (AttributeError, TypeError):
            pass
    sys.stdin = io.StringIO()
    builtins.input = _no_keyboard
    _quiet_display()
    os.chdir(os.path.join(scratch, "cwd"))
    sys.path[:] = [cwd if p in ("", ".") else p for p in sys.path]
    tempfile.tempdir = scratch
    os.environ["TMPDIR"] = scratch
    if sys.platform == "darwin":   # urllib's proxy lookup through the system's frameworks crashes after a fork
        os.environ.setdefault("no_proxy", "*")
    asyncio.events._set_running_loop(None)   # the kernel's loop is running in the thread that forked


def _forked_by_the_piece() -> None:
    """A process the piece forks is the piece's: the workspace copies and temporary folders this child made are
    this child's to remove, never that process's when it lets them go."""
    for finalizer in list(weakref.finalize._registry):   # noqa: SLF001 - detach is the public way; the set is not
        finalizer.detach()


def _wrote(folder: str) -> list[str]:
    try:
        return sorted(cut(name, 60) for name in os.listdir(folder))[:20]
    except OSError:
        return []


def _no_keyboard(prompt: str = "") -> str:
    from .language import _
    raise EOFError(_("input() has no keyboard inside a check"))


def _quiet_display() -> None:
    """``display()`` in the child prints the value's text instead of sending it through the kernel's sockets."""
    ipython = sys.modules.get("IPython")   # in a kernel; not imported here for the sake of it
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and getattr(shell, "display_pub", None) is not None:
        shell.display_pub.publish = lambda data, *a, **k: print((data or {}).get("text/plain", ""))


def _left_in_child(loop) -> list[str]:
    """The threads and processes the case left running, each in a few words; idle workers of the loop's own
    executor are let go first."""
    executor = getattr(loop, "_default_executor", None)
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
    until = time.monotonic() + LEFT_JOIN_S
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not _ours(thread):
            thread.join(max(until - time.monotonic(), 0))
    frames = sys._current_frames()
    left = [_thread_words(t, frames.get(t.ident)) for t in threading.enumerate()
            if t is not me and t.is_alive() and not _ours(t)]
    return left + [("process", command) for _pid, command in _descendants(os.getpid())]


def _ours(thread: threading.Thread) -> bool:
    """A thread of the check's own (a provider it started), or one serving a connection of a server's."""
    target = getattr(thread, "_target", None)
    return thread.name.startswith("check: ") or getattr(target, "__name__", "") == "process_request_thread"


def _thread_words(thread: threading.Thread, frame) -> tuple:
    """("thread", its name, what it was started to run, where it is now (a pool's worker: only that))."""
    target = getattr(thread, "_target", None)
    name = getattr(target, "__qualname__", None) if target is not None else None
    place = None
    if frame is not None:
        place = f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"
    running = cut(name, 40) if isinstance(name, str) and name != "_worker" else None
    return ("thread", cut(thread.name, 40), running, None if running else place)


def _descendants(pid: int) -> list[tuple[int, str]]:
    """Every live process below ``pid`` (Linux: ``/proc``), as (pid, its command line); elsewhere, none named."""
    return [(p, _command(p)) for p, state, _group in _below(pid) if state != "Z"]


def _below(pid: int, limit: int = 5000) -> list[tuple[int, str, int]]:
    """Every process below ``pid``, an ended one not yet reaped included, as (pid, state, process group)."""
    found, queue = [], [pid]
    while queue and len(found) < limit:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                try:
                    with open(f"/proc/{child}/stat") as f:
                        state, _ppid, group = f.read().rsplit(")", 1)[-1].split()[:3]
                except (OSError, ValueError):
                    continue
                found.append((child, state, int(group)))
                queue.append(child)
    return found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read(400).split(b"\0")
        return cut(" ".join(w.decode(errors="replace") for w in words if w), 60) or f"pid {pid}"
    except OSError:
        return f"pid {pid}"


# -- the kernel's side ----------------------------------------------------------------------------------------------
async def _await_child(pid: int, reads: list[int], deadline: float, printed: Printed) -> Outcome:
    loop = asyncio.get_running_loop()
    result_r, out_r, err_r = reads
    answer = bytearray()
    got = loop.create_future()
    texts = {out_r: _utf8(), err_r: _utf8()}
    for fd in reads:
        os.set_blocking(fd, False)

    def whole() -> bool:
        return len(answer) >= 8 and len(answer) >= 8 + struct.unpack("<Q", answer[:8])[0]

    def on_answer():
        try:
            chunk = os.read(result_r, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        answer.extend(chunk)
        if (not chunk or whole() or len(answer) > RESULT_LIMIT) and not got.done():
            loop.remove_reader(result_r)
            got.set_result(None)

    def relay(fd: int, stream, chunk: bytes):
        printed.relay(texts[fd].decode(chunk), stream)

    def on_output(fd: int, stream):
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        if chunk:
            relay(fd, stream, chunk)
        else:
            loop.remove_reader(fd)

    loop.add_reader(result_r, on_answer)
    loop.add_reader(out_r, on_output, out_r, sys.stdout)
    loop.add_reader(err_r, on_output, err_r, sys.stderr)
    try:
        end = loop.time() + deadline
        while not got.done():
            remaining = end - loop.time()
            if remaining <= 0:
                return Outcome("hung", left=[("process", c) for _p, c in _descendants(pid)])
            await asyncio.wait({got}, timeout=min(remaining, POLL_S))
            if not got.done() and _exited(pid):   # gone without answering: what it wrote before it went
                _drain(result_r, answer.extend)
                break
        for fd, stream in ((out_r, sys.stdout), (err_r, sys.stderr)):   # what it printed last
            _drain(fd, lambda chunk, fd=fd, stream=stream: relay(fd, stream, chunk))
        return _outcome(pid, bytes(answer))
    finally:
        for fd in reads:
            loop.remove_reader(fd)


def _utf8():
    """Bytes to text across chunks (a character cut in two by the pipe waits for the next chunk)."""
    import codecs
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _drain(fd: int, take) -> None:
    for _ in range(64):
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError, OSError):
            return
        if not chunk:
            return
        take(chunk)


def _exited(pid: int) -> bool:
    """Whether the child has ended (it stays unreaped: its process group is still ours to end)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _outcome(pid: int, answer: bytes) -> Outcome:
    if len(answer) >= 8:
        size = struct.unpack("<Q", answer[:8])[0]
        if len(answer) == 8 + size:
            try:
                return _read_answer(_Reader(io.BytesIO(answer[8:])).load())
            except Exception:  # noqa: BLE001 - what came is not an answer the child wrote
                return Outcome("died", died=("garbled",))
    return Outcome("died", died=_how_it_ended(pid))


def _read_answer(data) -> Outcome:
    """The child's answer, its shape checked (the child ran the reader's code: it may have written anything)."""
    def words(items, arity):
        return [tuple(i) for i in items if isinstance(i, tuple) and len(i) in arity
                and all(isinstance(w, str) or w is None for w in i)]

    if not isinstance(data, dict) or data.get("kind") not in ("ok", "raised"):
        raise ValueError("not an answer")
    error = data.get("error")
    if data["kind"] == "raised":
        if not isinstance(error, dict) or not isinstance(error.get("line"), str):
            raise ValueError("not an error")
        error = {"type": str(error.get("type")), "line": error["line"], "stub": error.get("stub") is True,
                 "frames": [(f[0], f[1]) for f in error.get("frames") or [] if isinstance(f, tuple) and len(f) == 2
                            and isinstance(f[0], int) and isinstance(f[1], str)],
                 "shape": error.get("shape") if isinstance(error.get("shape"), str) else None,
                 "not_plain": error.get("not_plain") if isinstance(error.get("not_plain"), tuple)
                 and len(error["not_plain"]) == 4 else None}
    left = data.get("left") if isinstance(data.get("left"), list) else []
    wrote = data.get("wrote") if isinstance(data.get("wrote"), list) else []
    return Outcome(data["kind"], value=plain(data.get("value")), error=error if data["kind"] == "raised" else None,
                   left=words(left, (2, 4)), wrote=[w for w in wrote if isinstance(w, str)])


def _how_it_ended(pid: int) -> tuple:
    status, until = None, time.monotonic() + 0.5
    while status is None and time.monotonic() < until:   # its pipes close a moment before it can be waited for
        try:
            status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if status is None:
            time.sleep(0.002)
    if status is None:
        return ("silent",)
    if status.si_code == os.CLD_EXITED:
        return ("unanswered",) if status.si_status == UNANSWERED else ("exit", status.si_status)
    try:
        return ("signal", signal.Signals(status.si_status).name)
    except ValueError:
        return ("signal", str(status.si_status))


class _Reader(pickle.Unpickler):
    """The child's answer: plain data, and the chapter layer's ``Text`` (the only class it may name)."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("harness_lib.chapter.language", "_rebuild"):
            from .language import _rebuild
            return _rebuild
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


_UNREAPED: list[int] = []   # children ended, not yet reaped: their exit (a large process's memory) runs meanwhile


def reap() -> None:
    """Wait for every child ended so far (a check calls it as it ends)."""
    while _UNREAPED:
        try:
            os.waitpid(_UNREAPED.pop(), 0)
        except ChildProcessError:
            pass


def _end(pid: int) -> None:
    """End the child and everything below it: each process group among them stopped first (a group's signal reaches
    a member forked meanwhile too; a stopped process forks nothing more), looked at again until no new one shows,
    then killed. Reap the child now if it is gone, else later (``reap``): a forked kernel takes milliseconds to give
    its memory back, which the next case need not wait for."""
    own = os.getpgrp()
    found, groups = set(), {pid}
    for _ in range(20):   # a process that forks and leaves, again and again, is caught by its group: an ended one
        below = _below(pid)   # not yet reaped still names it
        new = {p for p, _state, _group in below} - found
        found |= new
        groups |= {group for _p, _state, group in below} - {own}   # never the kernel's own group
        for group in groups:
            _signal(-group, signal.SIGSTOP)
        if not new:
            break
    for group in groups:
        _signal(-group, signal.SIGKILL)
    for target in found | {pid}:
        _signal(target, signal.SIGKILL)
    try:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            _UNREAPED.append(pid)
    except ChildProcessError:
        pass
    for earlier in list(_UNREAPED[:-1]):
        try:
            if os.waitpid(earlier, os.WNOHANG) != (0, 0):
                _UNREAPED.remove(earlier)
        except ChildProcessError:
            _UNREAPED.remove(earlier)


def _signal(target: int, signum: int) -> None:
    """Send ``signum`` to a process (a group, when ``target`` is negative); one already gone is no matter."""
    try:
        if target < 0:
            os.killpg(-target, signum)
        else:
            os.kill(target, signum)
    except (ProcessLookupError, PermissionError):
        pass


# -- in a thread, where there is no fork ------------------------------------------------------------------------
GRACE_S = 1.0      # after the deadline, how long a cancelled case may take to end before its thread is interrupted
GIVE_UP_S = 2.0    # ... and how long it is interrupted before the check says it could not be stopped
CPYTHON = sys.implementation.name == "cpython"


class _OutOfTime(BaseException):
    """Raised inside a piece deaf to cancellation, in its own thread, when its deadline is long past."""


_ENDING: ContextVar[threading.Event | None] = ContextVar("checking_case_ending", default=None)


def ending() -> bool:
    """Inside a case: whether the check itself is ending it (its deadline, or Stop), so that a cancellation is not
    the piece's doing. (Python 3.10 has no ``Task.cancelling``.) In a child process, never: the check ends a child
    by ending the process."""
    event = _ENDING.get()
    return event is not None and event.is_set()


async def _in_thread(factory, deadline: float, files: frozenset) -> Outcome:
    """``factory()`` in a thread of its own, on an event loop of its own, for at most ``deadline`` seconds. A case
    past its deadline is cancelled; if it does not end within ``GRACE_S``, its thread is interrupted (``_OutOfTime``,
    which no ``except Exception`` catches) until it ends."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    inside: dict = {}

    def finish(outcome):
        if not done.done():
            done.set_result(outcome)

    async def case():
        inside["loop"], inside["task"] = asyncio.get_running_loop(), asyncio.current_task()
        inside["loop"].set_exception_handler(_quiet_about_interruptions)
        _ENDING.set(inside.setdefault("ending", threading.Event()))
        return await _case(factory, files)

    def work():
        outcome: dict | None = None
        while True:  # an interruption sent as the case ended may land here: it is taken and the tail run again
            try:
                if outcome is None:
                    try:
                        outcome = asyncio.run(case())
                    except BaseException as error:  # noqa: BLE001 - interrupted, or cancelled by the check
                        outcome = {"kind": "raised", "error": describe(error, files)}
                inside["ended"] = True   # _stop sends no interruption after this
                _clear_interruption()
                loop.call_soon_threadsafe(finish, outcome)
                return
            except _OutOfTime:
                outcome = outcome or {"kind": "hung"}
            except RuntimeError:  # the caller's loop has closed: nobody is waiting for the outcome
                return

    thread = threading.Thread(target=work, name="check: one case", daemon=True)
    thread.start()
    try:
        got = await asyncio.wait_for(asyncio.shield(done), deadline)
    except asyncio.TimeoutError:
        stopped = await _stop(thread, inside)
        return Outcome("hung", left=[] if stopped else [("thread", thread.name, None, None)])
    except asyncio.CancelledError:  # Stop pressed during the case: the case goes with the check
        await _stop(thread, inside)
        raise
    return Outcome(got["kind"], value=got.get("value"), error=got.get("error"))


async def _stop(thread: threading.Thread, inside: dict) -> bool:
    """Cancel the case's task; if it has not ended within ``GRACE_S``, interrupt its thread (waking its loop each
    time) until it ends or ``GIVE_UP_S`` more have passed. True once the thread has ended."""
    case_loop, task = inside.get("loop"), inside.get("task")

    def wake(callback):
        try:
            case_loop.call_soon_threadsafe(callback)
        except (RuntimeError, AttributeError):  # its loop has closed, or never started: nothing to wake
            pass

    inside.setdefault("ending", threading.Event()).set()
    if task is not None:
        wake(lambda: task.cancel("the check's deadline"))
    started = time.monotonic()
    while thread.is_alive() and time.monotonic() - started < GRACE_S + GIVE_UP_S:
        if time.monotonic() - started >= GRACE_S and CPYTHON and not inside.get("ended"):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_OutOfTime))
            wake(lambda: None)  # a thread asleep in its loop's select runs no bytecode to raise in
        await asyncio.sleep(0.02)
    return not thread.is_alive()


def _quiet_about_interruptions(loop, context) -> None:
    if not isinstance(context.get("exception"), _OutOfTime):
        loop.default_exception_handler(context)


def _clear_interruption() -> None:
    if CPYTHON:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)


__all__ = ["FORK", "Outcome", "Printed", "Shape", "describe", "ending", "reap", "run", "scratch"]
