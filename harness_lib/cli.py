"""The command line: ``python -m harness_lib serve | run | resume | forecast | chapter``. It parses, calls ``runs.py``
(which operates the run: the lock, the ledger, the saved options, the reserve, the graceful stop) and prints.

Exit code 0 for any of the five exits (a stop is an answer, not a crash); 2 for a usage error, a state
file that cannot be used, a run another process owns, or an environment that cannot hold the run (a
folder that is a file or read-only, a full disk), always as one line that says what to fix; 128 + the
signal's number (130 for Ctrl-C, 143 for SIGTERM) when a signal stopped the run, saved and resumable.

A run's options have one name each (``config.SAVED``), the flag being that name with dashes unless
``config.FLAGS`` gives a shorter one (``--budget`` for ``max_budget_usd``). ``run`` saves them with the run,
``resume`` continues with them, and an option given to ``resume`` is a change (SUPPRESS: absent unless
given). The signals are here, not in ``runs.py``: a process's Ctrl-C and SIGTERM are its owner's, and the
command line owns this process; it ties them to the run's ``GracefulStop``. Everything printed that came
from a model, a tool or a server goes through ``terminal.visible``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import threading
from typing import TYPE_CHECKING

from . import config, forecast, runs
from .config import DEFAULT_MAX_TURNS
from .dedupe import DEDUPE
from .ledger import LedgerError
from .local import LocalModelError
from .lock import RunLockError
from .policy import POLICIES
from .pricing import dollars
from .runs import EnvironmentProblem, RunError
from .state import DecisionError, RunState, StateFileError, load
from .terminal import Quoted, json_safe, quoted_lines, visible
from .workspace import TASK

if TYPE_CHECKING:
    from .runs import GracefulStop

# asyncio, httpx and the loop are imported where a command uses them, not here: `--help`, a usage error and
# `serve` never pay for them (python -m benchmarks.coldstart).


def summary(state: RunState, scenario: str, wall_ms: float, priced: bool = True) -> dict:
    """``priced=False`` (no price given for a real endpoint): ``cost_usd`` is None, never a made-up cost."""
    return {
        "run_id": state.run_id, "scenario": scenario, "status": state.status, "interruption": state.interruption,
        "turns": state.turns, "tool_runs": state.tool_runs, "prompt_tokens": state.prompt_tokens,
        "completion_tokens": state.completion_tokens,
        "cost_usd": state.total_cost_usd if priced else None,  # exact (pricing.add): never rounded below
        "tokens_estimated": any(t.get("estimated") for t in state.per_turn),
        "wall_ms": round(wall_ms, 1), "answer": state.output,
        "per_turn_prompt_tokens": [t["prompt_tokens"] for t in state.per_turn], "error": state.error,
    }


def chapter_line(s: dict, label: str) -> str:
    """The chapter's own line format. Whatever came from the model or a server is shown ``visible``."""
    lines = [f"{visible(label):<15} turns={s['turns']}  tools={s['tool_runs']}  in={s['prompt_tokens']:,}  "
             f"out={s['completion_tokens']:,}  {_cost(s)}  ms={s['wall_ms']:.0f}  status={s['status']}"]
    if s["answer"] is not None:
        lines.append(f"   answer: {visible(json.dumps(s['answer'], ensure_ascii=False))}")
    i = s["interruption"]
    if i and i["type"] == "approval":
        args = json.dumps(i["args"], separators=(",", ":"), ensure_ascii=False)
        lines.append(f"   stopped at turn {s['turns']}: interrupted / approval -> "
                     f"{visible(i['toolName'])}({visible(args)})  [call {visible(i['callId'])}]")
    elif i:
        lines.append(f"   stopped: {s['status']} / {i['type']}" +
                     (f" ({visible(i['reason'])})" if i.get("reason") else ""))
    if s["error"]:
        lines.append(f"   error: {visible(s['error'])}")
    lines.append("   per-turn prompt tokens: " + ", ".join(str(p) for p in s["per_turn_prompt_tokens"]))
    return "\n".join(lines)


def _cost(s: dict) -> str:
    est = " (tokens estimated)" if s.get("tokens_estimated") else ""
    if s["cost_usd"] is None:
        return f"cost=unknown (no price given){est}"
    return f"cost=${dollars(s['cost_usd'])}" + (" (estimated)" if est else "")



SEAM = ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY")


def _arg(parse, name: str):
    """``parse`` (text -> value, ``ValueError`` saying what is wrong) as an argparse type named ``name``."""
    def typed(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    typed.__name__ = name
    return typed


_price = _arg(config.PRICE.parse, "price")
_timeout = _arg(config.TIMEOUT.parse, "timeout")
_seconds = _arg(config.SECONDS.parse, "seconds")
_budget = _arg(config.BUDGET.parse, "budget")
_margin = _arg(config.MARGIN.parse, "margin")
_latency = _arg(config.LATENCY.parse, "latency")


def _turn_cap(text: str) -> int | None:
    """``--max-turns N|none`` (``config.turn_cap``); text that is no number gets argparse's own message."""
    if text.strip().lower() not in ("none", "0"):
        int(text)
    return _arg(config.turn_cap, "_turn_cap")(text)


def endpoint_options(saved):
    """Options for pointing the harness at a real server. All plain values, saved with the run."""
    saved("price_in", type=_price, metavar="USD", help="dollars per million input tokens "
          "(default: the chapter's $2 for the scripted provider, unknown for any other endpoint)")
    saved("price_out", type=_price, metavar="USD", help="dollars per million output tokens "
          "(default: the chapter's $12 for the scripted provider, unknown for any other endpoint)")
    saved("timeout_s", type=_timeout, metavar="SECONDS",
          help="deadline of one attempt of the model call, whole response included (default 60)")
    saved("stream", action="store_true", help="stream the answer's text to the screen as it "
          "arrives; earlier turns show one step line each")


class _Visible:
    """A ``Trace``'s ``on_event``: retries and waits (a server loading its model) on stderr, always; with
    --stream also one line per turn and tool, so a long run is never silent."""

    def __init__(self, steps: bool, fresh_line=lambda: None, run_id: str | None = None, prompts=None):
        self.steps, self.fresh_line = steps, fresh_line  # (a streamed text may have left a line unfinished)
        self.run_id = run_id  # the run's own id: another one's steps are a subagent's, shown as a child's
        self.prompts, self.prompts_shown = prompts, 0  # --show-prompt: the local model's prompts so far

    def __call__(self, event: dict) -> None:
        type, line = event["type"], None
        child = "   child " if self.run_id is not None and event.get("runId") != self.run_id else ""
        if type == "retry":
            line = (f"      {'waiting: the server is loading its model' if event.get('loading') else 'retry'}: "
                    f"{event['problem']} (next try in {event['delayS']} s)")
        elif self.steps and type == "turn":
            est = ", estimated" if event.get("estimated") else ""
            line = (f"   {child}step {event['turn']}: {event['prompt_tokens']:,} in, {event['completion_tokens']:,} "
                    f"out{est} ({event.get('finish')})")
        elif self.steps and type == "tool_start":
            line = f"      {'   ' if child else ''}{event['toolName']}({event['args']})"
        if line:  # a tool's arguments and a server's words: shown, never obeyed
            self.fresh_line()
            print(visible(line), file=sys.stderr, flush=True)
        if type == "turn" and self.prompts is not None:
            for prompt in self.prompts()[self.prompts_shown:]:
                self.prompts_shown += 1
                self.fresh_line()
                print(f"--- {child.strip() + ' ' if child else ''}turn {event['turn']}: the prompt the model read "
                      f"---\n{quoted_lines(prompt)}--- end of the prompt ---", file=sys.stderr, flush=True)


def _nonempty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _absolute(text: str) -> str:
    """A file name saved with the run: absolute, so that a resume from another folder finds it."""
    return os.path.abspath(_nonempty(text))




def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_lib", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the scripted provider in the foreground")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--latency-ms", type=_latency, default=0.0)

    def limits(q, resume: bool):
        # A run's option, under its flag (config.flag); on resume one left out keeps the run's saved value
        # (SUPPRESS: absent unless given), on run it takes its default (config.DEFAULTS).
        def saved(name, **kw):
            q.add_argument(config.flag(name), dest=name, **kw,
                           default=argparse.SUPPRESS if resume else config.DEFAULTS[name])
        saved("max_turns", type=_turn_cap, metavar="N|none",
              help=f"turn cap (default {DEFAULT_MAX_TURNS}; 0 or none: no cap)")
        saved("max_budget_usd", type=_budget, metavar="BUDGET", help="max spend in USD (overshoot: at most one turn)")
        saved("strict_budget", action="store_true", help="with --budget: price each "
              "call before making it (local token count, max_tokens), so the budget is never crossed")
        saved("strict_margin", type=_margin, metavar="FRACTION",
              help="with --strict-budget against another server: count this much more prompt than the local "
              "tokenizer does (0.1 = 10 %%; default 0, exact for the scripted provider)")
        saved("tool_errors", choices=POLICIES)
        saved("dedupe", choices=DEDUPE)
        saved("trace", type=_absolute, help="append the JSONL trace to this file")
        saved("base_url", type=_nonempty, help="an OpenAI-compatible endpoint; default: start the scripted provider")
        saved("latency_ms", type=_latency, help="the scripted provider's latency")
        q.add_argument("--cancel-after", type=_seconds, help="press Stop after this many seconds")
        q.add_argument("--json", action="store_true", help="one JSON object on stdout")
        endpoint_options(saved)

    r = sub.add_parser("run", help="run one scenario")
    r.add_argument("scenario", nargs="?", help="the scripted provider's scenario (plan, runaway, ...); "
                   "against a real endpoint, only a label")
    r.add_argument("--model", help="the model name to ask for (default: $LLM_MODEL; the scripted provider: "
                   "the scenario)")
    r.add_argument("--task", default=TASK)
    r.add_argument("--state-dir")
    r.add_argument("--workspace", help="the folder the tools act on (default: a fresh copy of data/workspace)")
    r.add_argument("--run-id")
    limits(r, resume=False)

    z = sub.add_parser("resume", help="continue a saved run, optionally deciding a pending call")
    z.add_argument("run_id")
    z.add_argument("--state-dir", required=True)
    decide = z.add_mutually_exclusive_group()
    decide.add_argument("--approve", metavar="CALL_ID")
    decide.add_argument("--reject", metavar="CALL_ID")
    z.add_argument("--reason", help="with --reject: the words the model reads")
    z.add_argument("--silent", action="store_true", help="with --reject: leave the transcript slot empty")
    limits(z, resume=True)

    add_local_model(sub, r, z)

    f = sub.add_parser("forecast", help="price turn caps from the first turns of a run's trace (also: "
                       "python -m harness_lib.forecast)", description=forecast.DESCRIPTION)
    forecast.arguments(f)
    f.set_defaults(usage_error=f.error)

    c = sub.add_parser("chapter", help="every chapter figure, recomputed, beside the chapter's")
    c.add_argument("--json", action="store_true")
    c.add_argument("--execute", action="store_true", help="also execute the notebooks and write reports/")
    c.add_argument("--live", action="store_true", help="let notebook 12 use LLM_BASE_URL / LLM_MODEL / "
                   "LLM_API_KEY (otherwise they are ignored and the chapter's recorded run is shown)")
    return p

# -- signals: finish the step in flight, save, stop -------------------------------------------------------
SIGNALS: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Signalled(BaseException):
    """A signal that came when no run was going (starting up, or printing): stop, quietly."""

    def __init__(self, signum: int):
        super().__init__(SIGNALS[signum])
        self.signum = signum


_closing = [False]  # set once main is on its way out: a signal then is let go, never raised mid-cleanup
_held: list[int] = []  # signals that came once the run was over, before its event loop was closed (_hold)


def _raise_signalled(signum, frame):
    if not _closing[0]:
        _closing[0] = True  # one is enough: a second must not interrupt the cleanup the first set going
        raise Signalled(signum)


@contextlib.contextmanager
def quiet_signals():
    """Outside the run, Ctrl-C and SIGTERM end the process with one line, never a traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _closing[0] = False
    before = {s: signal.signal(s, _raise_signalled) for s in SIGNALS}
    try:
        yield
    finally:
        _closing[0] = True
        for s, handler in before.items():
            signal.signal(s, handler)


def _hold(signum, frame):
    _held.append(signum)


@contextlib.contextmanager
def _held_until_the_loop_is_closed():
    """Puts back the handlers there were before the event loop, once it is closed, and acts on a signal held
    since the run ended (``_hold``): raised now, it lands in plain code, not inside asyncio."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _hold:  # (only _on_signals, in the main thread, puts it there)
            for s, handler in before.items():
                signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
            got, _held[:] = _held[:1], []
            if got:
                signal.raise_signal(got[0])


def _arun(make):
    """``asyncio.run(make())``, with no instant at which a signal leaves something half made. The loop is built
    with SIGINT and SIGTERM held: one landing midway (its exception raised from ``quiet_signals``) left a
    half-built loop whose clean-up printed a traceback; held, it lands once the loop is whole. The run's
    coroutine is made once the loop is there, and closed if it never ran (no "never awaited" warning). A signal
    that comes once the run is over is held until the loop is closed (``_on_signals``), then acted on."""
    import asyncio

    def whole_loop():
        held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS) if hasattr(signal, "pthread_sigmask") else None
        try:
            return asyncio.new_event_loop()
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    with _held_until_the_loop_is_closed():
        if not hasattr(asyncio, "Runner"):  # Python 3.10 has no Runner to build the loop: asyncio.run, as before
            return asyncio.run(make())
        coro = None
        try:
            with asyncio.Runner(loop_factory=whole_loop) as runner:  # (entering it builds the loop)
                coro = make()
                return runner.run(coro)
        finally:
            if coro is not None:
                coro.close()  # a coroutine that ran is done by now: only one never started is closed here


@contextlib.contextmanager
def _on_signals(stop: GracefulStop, heard: list[int]):
    """While the run goes, Ctrl-C and SIGTERM are requests to its ``GracefulStop``: the first stops it at the
    next step boundary (the reply or tool result in flight is saved, so no turn is paid and lost); a second
    one, or ``runs.GRACE_S`` later, cancels it now; any more are ignored. The handlers are Python's own (not
    the loop's), so there is no instant at which a signal kills the process. When the run ends, a signal is
    held (``_hold``) until ``_arun`` has closed the loop, which then puts back the handlers found here."""
    import asyncio
    loop = asyncio.get_running_loop()

    def heard_one(signum: int):
        heard.append(signum)
        if stop.request(SIGNALS[signum]):
            print(f"{SIGNALS[signum]}: stopping after the current step (again to stop at once)", file=sys.stderr)

    def handler(signum, frame):
        loop.call_soon_threadsafe(heard_one, signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        # Not the handlers before (``quiet_signals``' raise): the run is over but its loop still runs, and
        # closes. An exception raised from a signal there lands inside asyncio: in the callback that stops the
        # loop (logged as a traceback, and the loop never stopped: the process hung, deaf to any signal) or
        # halfway through loop.close() (its self-pipe closed but kept, so the loop's __del__ closed it again:
        # "ValueError: Invalid file descriptor: -1"). Held, it is acted on once the loop is closed.
        for s in SIGNALS:
            signal.signal(s, _hold)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Show:
    """How this process shows a run as it goes (``runs``' ``view``): retries and waits always, with --stream
    the steps and the model's text (escaped, every line marked), and with --show-prompt the local model's
    prompts (``prompts``). ``heard``: the signals the run was stopped by, for the exit code."""

    def __init__(self, args, prompts=None):
        self.args, self.prompts, self.heard = args, prompts, []
        self.quoted = Quoted(sys.stderr if args.json else sys.stdout)
        self.stream = False

    def view(self, cfg: dict, run_id: str):
        self.stream = cfg["stream"]
        return _Visible(cfg["stream"], self.quoted.fresh_line, run_id, self.prompts), self.quoted

    def watch(self, stop: GracefulStop):
        return _on_signals(stop, self.heard)

    def how(self) -> dict:
        return {"api_key": os.environ.get("LLM_API_KEY") or "not-needed", "view": self.view, "watch": self.watch,
                "cancel_after": self.args.cancel_after, "say": _say}

    def done(self) -> None:
        if self.stream:
            self.quoted.fresh_line()


def _given(args) -> dict:
    """The run's options given on this command line, by their names (argparse's dests are those names)."""
    return {name: getattr(args, name) for name in config.SAVED if hasattr(args, name)}


def cmd_run(args, lm=None) -> int:
    """``run``; ``lm``: the local model started for it (--local-model), its endpoint and its model."""
    # The environment seam, flags winning: LLM_BASE_URL, LLM_MODEL (LLM_API_KEY: _Show.how).
    base_url = lm.base_url if lm else args.base_url or os.environ.get("LLM_BASE_URL") or None
    model = args.model or (lm.model if lm else None) or (os.environ.get("LLM_MODEL") if base_url else None) or None
    show = _Show(args, lm.prompts if lm and args.show_prompt else None)
    out = _arun(lambda: runs.start(args.scenario, model=model, task=args.task, run_id=args.run_id,
                                   state_dir=args.state_dir, workspace=args.workspace,
                                   options={**_given(args), "base_url": base_url}, **show.how()))
    show.done()
    return _finish(out, args, show.heard)


def cmd_resume(args, lm=None) -> int:
    """``resume``; ``lm``: the run's local model, started again on this process's port (not a change of the
    run's options). Moved to another server (--base-url), a run is no longer the local model's."""
    given = _given(args)
    if "base_url" in given:
        given.setdefault("local_model", False)
    show = _Show(args, lm.prompts if lm and args.show_prompt else None)
    out = _arun(lambda: runs.resume(args.state_dir, args.run_id, approve=args.approve, reject=args.reject,
                                    reason=args.reason, silent=args.silent, options=given,
                                    local_base_url=lm.base_url if lm else None, **show.how()))
    show.done()
    return _finish(out, args, show.heard)


def _finish(out: runs.Outcome, args, heard: list[int]) -> int:
    state = out.state
    s = summary(state, state.meta.get("scenario", state.model), out.wall_ms, priced=out.priced)
    s["max_turns"] = state.config.get("max_turns")  # the cap this process ran under (None: no cap)
    if args.json:
        print(json_safe(json.dumps(s, ensure_ascii=False)))
    else:
        print(chapter_line(s, out.label))
        if state.resumable and args.state_dir:
            print(f"   run {state.run_id} saved in {visible(args.state_dir)}: python -m harness_lib resume "
                  f"{state.run_id} --state-dir {visible(shlex.quote(str(args.state_dir)))}")
    if (state.error or "").startswith("cannot write the run's files"):
        print(f"error: run {state.run_id}: {visible(state.error)}; every paid turn is saved: make room "
              f"(or fix the folder), then `resume {state.run_id} --state-dir {visible(args.state_dir)}`",
              file=sys.stderr)
        return 2
    reason = (state.interruption or {}).get("reason", "")
    if heard and state.status == "interrupted" and reason.startswith(SIGNALS[heard[0]]):
        return 128 + heard[0]
    if reason.startswith("the run's lock file"):  # a run another process may own: exit 2, as when refused
        print(f"error: run {state.run_id}: {reason}; see who holds it before you resume it", file=sys.stderr)
        return 2
    return 0


def _signalled_inside(e: BaseException) -> Signalled | None:
    seen = 0
    at: BaseException | None = e
    while at is not None and seen < 20:
        if isinstance(at, Signalled):
            return at
        at, seen = at.__cause__ or at.__context__, seen + 1
    return None


# -- section 12: a real local model (harness_lib.local, the `local` extra) ---------------------------------------
def add_local_model(sub, *runs) -> None:
    """``run|resume ... --local-model`` and ``serve-local``: SmolLM2-135M behind llama-cpp-python's server,
    started on a free loopback port for the run and stopped after it."""
    for q in runs:
        q.add_argument("--local-model", action="store_true",  # resume: the run's own, unless given
                       default=argparse.SUPPRESS if q.prog.split()[-1] == "resume" else False,
                       help="start the local model (needs the `local` extra: make local) and run against it")
        q.add_argument("--show-prompt", action="store_true",
                       help="with --local-model: print on stderr, after each turn, the prompt the model read")
    s = sub.add_parser("serve-local", help="serve the local model in the foreground (needs the `local` extra)")
    s.add_argument("--port", type=int, default=8000, help="0 for any free port")
    s.add_argument("--ready-timeout", type=_seconds, default=120.0, help="seconds to wait for the model to load")


def cmd_local(args, command) -> int:
    """``command(args, lm)`` with ``lm`` a local model server started for it."""
    from . import local
    if getattr(args, "base_url", None):
        raise SystemExit("error: --local-model starts its own server; it is not allowed with --base-url")
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    with local.LocalModel(progress=_say) as lm:
        code = command(args, lm)
        if lm.died:
            _say(f"error: the local model server died during the run: {lm.died}" +
                 (f"\n  the run's state is saved in {args.state_dir}" if args.state_dir else ""))
    return code


def _wants_local(args) -> bool:
    """``run --local-model``; ``resume`` of a run made with it (unless told --base-url), or told it."""
    if args.command == "run" or hasattr(args, "local_model"):
        return getattr(args, "local_model", False)
    if args.command != "resume" or getattr(args, "base_url", None):  # (moved to another server: cmd_resume)
        return False
    try:
        return load(args.state_dir, args.run_id).config.get("local_model") is True
    except StateFileError:
        return False  # cmd_resume says what is wrong with it


def cmd_serve_local(args) -> int:
    from . import local
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    with local.LocalModel(port=args.port, ready_timeout_s=args.ready_timeout, progress=_say) as lm:
        print(f"local model {lm.model} on {lm.base_url}  (Ctrl-C stops it)", flush=True)
        try:
            if lm.process is not None:  # started by the context manager, so always, once ready
                lm.process.wait()
        except KeyboardInterrupt:
            return 0
        lm.check()  # it ended without being asked to: say how
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        with quiet_signals():
            return _main(argv)
    except Signalled as e:  # one that landed while main was already returning: the work is done and saved
        _closing[0] = True
        print(f"stopped by {e}", file=sys.stderr)
        return 128 + e.signum


def _main(argv: list[str] | None) -> int:
    try:
        args = parser().parse_args(argv)
        wants_local = _wants_local(args)
        if getattr(args, "show_prompt", False) and not wants_local:
            raise SystemExit("error: --show-prompt shows the local model's prompts: it needs --local-model "
                             "(another server renders its prompts where the harness cannot see them)")
        if wants_local:
            return cmd_local(args, cmd_run if args.command == "run" else cmd_resume)
        if args.command == "serve-local":
            return cmd_serve_local(args)
        if args.command == "serve":
            from .scripted import serve
            serve(args.host, args.port, args.latency_ms)
            return 0
        if args.command == "run":
            return cmd_run(args)
        if args.command == "resume":
            return cmd_resume(args)
        if args.command == "forecast":
            return forecast.command(args, args.usage_error)
        if not args.live:  # the chapter is the chapter: a reader's server is used only when asked
            for name in SEAM:
                os.environ.pop(name, None)
        from .chapter.report import main as chapter_main
        return chapter_main(json_out=args.json, execute=args.execute)
    except RunError as e:  # its words are the operator's already (what came from elsewhere is visible in them)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (StateFileError, DecisionError, LedgerError, RunLockError, EnvironmentProblem, ValueError,
            FileNotFoundError, LocalModelError) as e:
        print(f"error: {visible(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # the environment: a full disk, a read-only folder, a name too long
        where = f" {visible(e.filename)}" if e.filename else ""
        print(f"error: cannot use{where}: {visible(e.strerror or e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug still reaches the user as one line, not a traceback
        if (signalled := _signalled_inside(e)) is not None:  # raised within an import, and wrapped there
            print(f"stopped by {signalled}", file=sys.stderr)
            return 128 + signalled.signum
        print(f"error: unexpected {type(e).__name__}: {visible(e)} (a bug in the harness: please report "
              f"it; a run that had begun is saved and can be resumed)", file=sys.stderr)
        return 1
    except Signalled as e:
        print(f"stopped by {e} (nothing left half-done: a run that had begun is saved)", file=sys.stderr)
        return 128 + e.signum
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
