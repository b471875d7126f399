"""The command line: ``python -m harness_lib serve | run | resume | chapter``.

Exit code 0 for any of the five exits (a stop is an answer, not a crash); 2 for a usage error, a state
file that cannot be used, a run another process owns, or an environment that cannot hold the run (a
folder that is a file or read-only, a full disk), always as one line that says what to fix; 128 + the
signal's number (130 for Ctrl-C, 143 for SIGTERM) when a signal stopped the run, saved and resumable.

A run carries its options: ``run`` saves them in the state (``SAVED``), ``resume`` continues with them,
and an option given to ``resume`` is a change, validated, recorded and traced (``config_changed``). One
process owns a run at a time (``lock.py``); what ``resume`` is asked to do is checked against the
workspace's ledger (``ledger.py``) first. Everything printed that came from a model, a tool or a server
goes through ``terminal.visible``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from . import budget, ledger, numbers
from .ledger import LedgerError
from .local import LocalModelError
from .lock import RunLock, RunLockError
from .loop import DEDUPE, POLICIES, Options, run
from .pricing import CHAPTER_PRICES, MAX_PRICE, SMALLEST_PRICE, UNPRICED, Pricing, add, dollars
from .state import (
    DecisionError,
    RunState,
    StateFileError,
    approve,
    check_run_id,
    load,
    make_reserve,
    new_run,
    reject,
    reserve_path,
    save,
    state_path,
)
from .stops import Stop
from .terminal import Quoted, json_safe, quoted_lines, visible
from .trace import Trace
from .workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace


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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _cost(s: dict) -> str:
    est = " (tokens estimated)" if s.get("tokens_estimated") else ""
    if s["cost_usd"] is None:
        return f"cost=unknown (no price given){est}"
    return f"cost=${dollars(s['cost_usd'])}" + (" (estimated)" if est else "")


DEFAULT_MAX_TURNS = 50  # a runaway stops here unless told otherwise; the anchors use 10 to 50
SEAM = ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY")


def _turn_cap(text: str) -> int:
    """A turn cap: a whole number; 0 or ``none`` removes the cap (the default is DEFAULT_MAX_TURNS)."""
    if text.strip().lower() in ("none", "0"):
        return 0
    return _positive_int(text)


class _Number:
    """A number an operator gives, through the one number check (``numbers.check``) with its bounds: as
    argparse's type (called with the text typed) and, ``saved``, as the check of a value a state file holds."""

    def __init__(self, name: str, unit: str = "", hint: str = "", **bounds):
        self.__name__, self.unit, self.hint, self.bounds = name, unit, hint, bounds  # (argparse names the type)

    def saved(self, value) -> float:
        try:
            return numbers.check(self.__name__, value, kind=f"a finite number{self.unit}", hint=self.hint,
                                 **self.bounds)
        except ValueError as e:
            raise ValueError(str(e).removeprefix(f"{self.__name__} ")) from None

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text}") from None
        try:
            return self.saved(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None


MAX_LATENCY_MS = 600_000.0  # the scripted provider's latency: ten minutes a reply is the most it will sleep
_price = _Number("price", " of dollars", at_most=MAX_PRICE, smallest=SMALLEST_PRICE, hint=" per million tokens")
_timeout = _Number("timeout", " of seconds", above_zero=True)
_seconds = _Number("seconds")
_budget = _Number("budget", " of dollars", above_zero=True, at_most=numbers.MAX_USD)
_margin = _Number("margin", at_most=budget.MAX_MARGIN)
_latency = _Number("latency", " of milliseconds", at_most=MAX_LATENCY_MS)


def endpoint_options(q, saved):
    """Options for pointing the harness at a real server. All plain values, saved with the run."""
    saved("--price-in", dest="price_in", type=_price, metavar="USD", help="dollars per million input tokens "
          "(default: the chapter's $2 for the scripted provider, unknown for any other endpoint)")
    saved("--price-out", dest="price_out", type=_price, metavar="USD", help="dollars per million output tokens "
          "(default: the chapter's $12 for the scripted provider, unknown for any other endpoint)")
    saved("--timeout", dest="timeout", type=_timeout, metavar="SECONDS",
          help="deadline of one attempt of the model call, whole response included (default 60)")
    saved("--stream", dest="stream", action="store_true", help="stream the answer's text to the screen as it "
          "arrives; earlier turns show one step line each")


def served_models(base_url: str, api_key: str) -> list[dict] | None:
    """What ``GET {base_url}/models`` lists (every server here answers it), or None if it cannot say."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", timeout=2.0, trust_env=False,
                      headers={"Authorization": f"Bearer {api_key}"})
        return [m for m in r.json()["data"] if isinstance(m, dict)] if r.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a server that cannot list its models is simply not asked
        return None


def apply_seam(args) -> None:
    """The environment seam, flags winning: LLM_BASE_URL, LLM_MODEL, LLM_API_KEY. Then the checks a real
    endpoint needs (a model name; a price before a budget), as usage errors, and the turn cap's default.
    A base URL that lists only the scripted provider's models (``owned_by: scripted``, e.g. ``serve``) is
    the scripted provider: the scenario is the model and the chapter's prices apply, as without a URL."""
    args.base_url = args.base_url or os.environ.get("LLM_BASE_URL") or None
    args.api_key = os.environ.get("LLM_API_KEY") or "not-needed"
    models = served_models(args.base_url, args.api_key) if args.base_url else None
    scripted = not args.base_url or (models is not None and bool(models)
                                     and all(m.get("owned_by") == "scripted" for m in models))
    args.model = args.model or (os.environ.get("LLM_MODEL") if args.base_url else None) or None
    if args.base_url and scripted and not args.model:
        args.model = args.scenario
    if args.base_url and not args.model:
        names = ", ".join(str(m.get("id")) for m in models or [])[:300]
        raise SystemExit(f"error: against {args.base_url}, give the model's name: --model NAME or LLM_MODEL"
                         + (f" (this server lists: {names})" if names else " (e.g. qwen2.5:0.5b for Ollama)")
                         + "; see the README, 'Point it at your own server'")
    if not args.base_url and not args.scenario:
        raise SystemExit("error: give a scenario for the scripted provider (plan, runaway, ...), or a "
                         "server: --base-url URL (or LLM_BASE_URL) with --model NAME (or LLM_MODEL)")
    if (args.price_in is None) != (args.price_out is None):
        raise SystemExit("error: give both --price-in and --price-out (dollars per million tokens), or neither")
    if args.price_in is None and scripted:  # saved with the run as what it is: the chapter's prices
        args.price_in, args.price_out = CHAPTER_PRICES.per_million_prices()
    args.pricing = _pricing(args.price_in, args.price_out, args.budget)
    _strict_can_act(vars(args), args.pricing)
    args.max_turns = DEFAULT_MAX_TURNS if args.max_turns is None else (args.max_turns or None)


def _pricing(price_in, price_out, budget) -> Pricing:
    """The run's prices (None, None: unknown), and the usage error a budget without a price is."""
    pricing = UNPRICED if price_in is None else Pricing.per_million(price_in, price_out)
    if budget is not None and not pricing.known:
        raise SystemExit("error: --budget needs a price: this endpoint has none; give --price-in and "
                         "--price-out (dollars per million tokens), or cap the turns with --max-turns")
    return pricing


def _strict_can_act(config: dict, pricing: Pricing) -> None:
    """--strict-budget needs a budget (and a price): a usage error now, before anything is saved."""
    try:
        budget.check_options(config["strict_budget"], 0.0, config["budget"], pricing)
    except ValueError as e:
        raise SystemExit(f"error: --strict-budget: {e}") from None


def _cap_label(max_turns) -> str:
    return ", no cap" if max_turns is None else f", cap {max_turns}"


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


# -- the options a run carries ---------------------------------------------------------------------------
def _optional(check):
    return lambda v: None if v is None else check(v)


def _is(kind, test=lambda v: True, what=""):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, kind) or not test(v):
            raise ValueError(f"{v!r} is not {what}")
        return v
    return check


def _flag(v):
    if not isinstance(v, bool):
        raise ValueError(f"{v!r} is not true or false")
    return v


# Saved in the state by ``run``, continued by ``resume``: argparse dest -> (default for run, the check a
# value read back from a state file must pass). A new option joins the saved configuration by one line
# here and one ``saved(...)`` line in ``parser``. The API key is never saved (it stays in LLM_API_KEY).
SAVED = {
    "max_turns": (None, _optional(_is(int, lambda v: v >= 1, "a whole number of at least 1"))),
    "budget": (None, _optional(_budget.saved)),
    "tool_errors": ("descriptive", _is(str, lambda v: v in POLICIES, f"one of {POLICIES}")),
    "dedupe": ("off", _is(str, lambda v: v in DEDUPE, f"one of {DEDUPE}")),
    "trace": (None, _optional(_is(str, bool, "a file name"))),
    "base_url": (None, _optional(_is(str, bool, "a URL"))),
    "latency_ms": (0.0, _latency.saved),
    "strict_budget": (False, _flag),
    "strict_margin": (0.0, _margin.saved),
    "price_in": (None, _optional(_price.saved)),
    "price_out": (None, _optional(_price.saved)),
    "timeout": (60.0, _timeout.saved),
    "stream": (False, _flag),
    "local_model": (False, _flag),  # its server's address changes each time: resume starts it again
}


def saved_config(config: dict) -> dict:
    """The state's configuration, checked value by value (``StateFileError`` names the bad one)."""
    out = {}
    for name, (default, check) in SAVED.items():
        if name == "max_turns" and name not in config:  # made in-process (a notebook): the run's default cap,
            default = DEFAULT_MAX_TURNS                  # never none (a runaway resumed would never stop)
        try:
            out[name] = check(config.get(name, default))
        except ValueError as e:
            raise StateFileError(f"the saved option {name}: {visible(e)}") from None
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_lib", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the scripted provider in the foreground")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--latency-ms", type=_latency, default=0.0)

    def limits(q, resume: bool):
        # On resume an option left out keeps the run's saved value (SUPPRESS: absent unless given).
        def saved(*names, **kw):
            q.add_argument(*names, **kw, default=argparse.SUPPRESS if resume else SAVED[kw["dest"]][0])
        saved("--max-turns", dest="max_turns", type=_turn_cap, metavar="N|none",
              help=f"turn cap (default {DEFAULT_MAX_TURNS}; 0 or none: no cap)")
        saved("--budget", dest="budget", type=_budget, help="max spend in USD (overshoot: at most one turn)")
        saved("--strict-budget", dest="strict_budget", action="store_true", help="with --budget: price each "
              "call before making it (local token count, max_tokens), so the budget is never crossed")
        saved("--strict-margin", dest="strict_margin", type=_margin, metavar="FRACTION",
              help="with --strict-budget against another server: count this much more prompt than the local "
              "tokenizer does (0.1 = 10 %%; default 0, exact for the scripted provider)")
        saved("--tool-errors", dest="tool_errors", choices=POLICIES)
        saved("--dedupe", dest="dedupe", choices=DEDUPE)
        saved("--trace", dest="trace", type=_absolute, help="append the JSONL trace to this file")
        saved("--base-url", dest="base_url", type=_nonempty,
              help="an OpenAI-compatible endpoint; default: start the scripted provider")
        saved("--latency-ms", dest="latency_ms", type=_latency, help="the scripted provider's latency")
        q.add_argument("--cancel-after", type=_seconds, help="press Stop after this many seconds")
        q.add_argument("--json", action="store_true", help="one JSON object on stdout")
        endpoint_options(q, saved)

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

    c = sub.add_parser("chapter", help="every chapter figure, recomputed, beside the chapter's")
    c.add_argument("--json", action="store_true")
    c.add_argument("--execute", action="store_true", help="also execute the notebooks and write reports/")
    c.add_argument("--live", action="store_true", help="let notebook 12 use LLM_BASE_URL / LLM_MODEL / "
                   "LLM_API_KEY (otherwise they are ignored and the chapter's recorded run is shown)")
    return p


@contextlib.contextmanager
def endpoint(config: dict):
    if config["base_url"]:
        yield config["base_url"]
    else:
        from .scripted import ScriptedProvider  # only the CLI knows both sides of the wire
        with ScriptedProvider(latency_ms=config["latency_ms"]) as provider:
            yield provider.base_url


def scenario_tools(state: RunState, workspace: Workspace, base_url: str, pricing: Pricing = CHAPTER_PRICES) -> list:
    """The workspace's four tools; ``delegate`` also gets its research subagent. The child asks for the
    scripted ``plan`` when the run asks for the scripted ``delegate``, else for the run's own model."""
    tools = workspace.tools()
    if state.meta.get("scenario") == "delegate":
        from .subagent import research_tool
        child = "plan" if state.model == "delegate" else state.model
        tools = [research_tool(workspace.tools(), base_url, child,
                               api_key=os.environ.get("LLM_API_KEY", "not-needed"), pricing=pricing), *tools]
    return tools


# -- signals: finish the step in flight, save, stop -------------------------------------------------------
GRACE_S = 10.0  # after the first signal, how long the step in flight may take before it is cancelled
SIGNALS: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Signalled(BaseException):
    """A signal that came when no run was going (starting up, or printing): stop, quietly."""

    def __init__(self, signum: int):
        super().__init__(SIGNALS[signum])
        self.signum = signum


_closing = [False]  # set once main is on its way out: a signal then is let go, never raised mid-cleanup


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


@contextlib.contextmanager
def _on_signals(task: asyncio.Task, heard: list[int]):
    """While the run goes: the first signal stops it at the next step boundary (the reply or tool result
    in flight is saved, so no turn is paid and lost); a second one, or ``GRACE_S`` later, cancels it now;
    any more are ignored. The handlers are Python's own (not the loop's), and the ones before are put
    back in one step when the run ends, so there is no instant at which a signal kills the process."""
    loop = asyncio.get_running_loop()

    def heard_one(signum: int):
        heard.append(signum)
        if task.done() or len(heard) > 2:
            return
        if len(heard) == 1:
            print(f"{SIGNALS[signum]}: stopping after the current step (again to stop at once)", file=sys.stderr)
            loop.call_later(GRACE_S, lambda: task.done() or task.cancel(f"{SIGNALS[signum]} (step cut short)"))
        else:
            task.cancel(SIGNALS[heard[0]])

    def handler(signum, frame):
        loop.call_soon_threadsafe(heard_one, signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


async def _drive(state: RunState, tools: list, args, config: dict, base_url: str,
                 state_dir) -> tuple[RunState, float, list[int]]:
    heard: list[int] = []

    def signalled(s: RunState):
        return Stop("interrupted", {"type": "cancelled", "reason": SIGNALS[heard[0]]}) if heard else None

    def lock_lost(s: RunState):  # the run's lock file gone or replaced: another process may own the run
        why = args.lock.lost() if getattr(args, "lock", None) else None
        return Stop("interrupted", {"type": "cancelled", "reason": why}) if why else None

    show = Quoted(sys.stderr if args.json else sys.stdout)  # a model's streamed text: escaped, every line marked
    fresh_line = show.fresh_line

    opts = Options(base_url=base_url, api_key=os.environ.get("LLM_API_KEY") or "not-needed",
                   max_turns=config["max_turns"], max_budget_usd=config["budget"], stops=[signalled, lock_lost],
                   strict_budget=config["strict_budget"], strict_margin=config["strict_margin"],
                   tool_errors=config["tool_errors"], dedupe=config["dedupe"],
                   trace=Trace(config["trace"], on_event=_Visible(config["stream"], fresh_line, state.run_id,
                                                                  getattr(args, "prompts", None))),
                   state_dir=state_dir, pricing=args.pricing, timeout_s=config["timeout"],
                   stream=config["stream"], on_text=show if config["stream"] else None)
    started = time.perf_counter()
    task = asyncio.ensure_future(run(state, tools, opts))
    with _on_signals(task, heard):
        if args.cancel_after is not None:
            asyncio.get_running_loop().call_later(args.cancel_after, task.cancel, "user pressed Stop")
        try:
            state = await task
        except asyncio.CancelledError:
            pass  # a second signal while the run was closing its connection: the run had stopped and saved
    if config["stream"]:
        fresh_line()
    return state, (time.perf_counter() - started) * 1000, heard


def _finish(state: RunState, args, wall_ms: float, label: str, heard: list[int]) -> int:
    s = summary(state, state.meta.get("scenario", state.model), wall_ms, priced=args.pricing.known)
    s["max_turns"] = state.config.get("max_turns")  # the cap this process ran under (None: no cap)
    if args.json:
        print(json_safe(json.dumps(s, ensure_ascii=False)))
    else:
        print(chapter_line(s, label))
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


# -- the environment: folders that can hold a run ----------------------------------------------------------
class EnvironmentProblem(RuntimeError):
    """A folder or file the run needs cannot be used: one line that says what to fix."""


RESERVE_MIN = 1 << 20  # bytes set aside beside a state (see ``state.save``): room for the last saves


def _usable_trace(path: str | None):
    if path:
        try:
            with open(path, "a"):
                pass
        except OSError as e:
            raise EnvironmentProblem(f"cannot write the trace {visible(path)}: {e.strerror or e}") from None


@contextlib.contextmanager
def _owner(state_dir, run_id: str):
    """Own the run (``RunLock``, yielded; None without a state dir: nothing to share) for this block."""
    if not state_dir:
        yield None
        return
    try:
        if Path(state_dir).exists() and not Path(state_dir).is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder")
        lock = RunLock(state_dir, run_id).__enter__()
    except RunLockError:
        raise
    except OSError as e:
        raise EnvironmentProblem(f"cannot use --state-dir {visible(state_dir)}: {e.strerror or e}") from None
    try:
        yield lock
    finally:
        lock.release()


@contextlib.contextmanager
def _reserve(state_dir, run_id: str):
    """Set aside room beside the state for the saves a full disk would refuse; give it back at the end."""
    if not state_dir:
        yield
        return
    path = state_path(state_dir, run_id)
    size = max(RESERVE_MIN, 4 * (path.stat().st_size if path.exists() else 0))
    try:
        make_reserve(state_dir, run_id, size)
    except OSError as e:
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        raise EnvironmentProblem(f"cannot set aside {size // 1024} KiB in --state-dir {visible(state_dir)} "
                                 f"({visible(e.strerror or e)})" + (": free some space, then try again" if full
                                                                    else "")) from None
    try:
        yield
    finally:
        reserve_path(state_dir, run_id).unlink(missing_ok=True)


def _go(state: RunState, workspace: Workspace, args, state_dir) -> tuple[RunState, float, list]:
    # (--local-model: this process's own server, wherever the saved base_url pointed when it was made)
    with endpoint({**state.config, "base_url": getattr(args, "local_base_url", None) or state.config["base_url"]}) \
            as base_url:
        tools = scenario_tools(state, workspace, base_url, args.pricing)
        out = asyncio.run(_drive(state, tools, args, state.config, base_url, state_dir))
    if state_dir and out[0].status != "running":  # where this process left it: a state may not forget it
        with contextlib.suppress(OSError):
            ledger.append(state_dir, state, "spent", turns=state.turns, costUsd=state.own_cost_usd,
                          totalCostUsd=state.total_cost_usd)
    return out


def _workspace(args, run_id: str) -> Workspace:
    if args.workspace:
        return Workspace(args.workspace)
    if not args.state_dir:
        return Workspace.copy_of()
    into = Path(args.state_dir) / f"{run_id}.workspace"  # the run's own copy lives with the run
    try:
        return Workspace.copy_of(into=into)
    except OSError as e:
        shutil.rmtree(into, ignore_errors=True)
        raise EnvironmentProblem(f"cannot copy the workspace into {visible(into)}: "
                                 f"{e.strerror or 'the copy failed'}; free some space, then try again") from None


@contextlib.contextmanager
def _unless_saved(args, run_id: str):
    """If ``run`` stops before its first save (a usage error, a signal, a full disk), nothing was paid:
    remove the workspace copy it made, so the same command can simply be given again."""
    try:
        yield
    except BaseException:
        copy = Path(args.state_dir or "") / f"{run_id}.workspace"
        if args.state_dir and not args.workspace and not state_path(args.state_dir, run_id).exists():
            shutil.rmtree(copy, ignore_errors=True)
            with contextlib.suppress(OSError):
                ledger.ledger_path(args.state_dir, run_id).unlink()
        raise


def cmd_run(args) -> int:
    if args.workspace and Path(args.workspace).resolve() == DATA_WORKSPACE:
        raise SystemExit("error: the tools never act on data/workspace itself; give another folder or none")
    _usable_trace(args.trace)
    run_id = check_run_id(args.run_id) if args.run_id is not None else uuid.uuid4().hex[:12]
    with _owner(args.state_dir, run_id) as args.lock:  # (the run checks at every step that it still holds it)
        if args.state_dir and state_path(args.state_dir, run_id).exists():
            raise SystemExit(f"error: run {run_id} already exists in {visible(args.state_dir)}; continue it with "
                             f"`resume {run_id} --state-dir {visible(args.state_dir)}`, or give another --run-id")
        into = Path(args.state_dir) / f"{run_id}.workspace" if args.state_dir and not args.workspace else None
        if into is not None and os.path.lexists(into):  # (a link there too, dangling or not)
            raise SystemExit(f"error: {visible(into)} already exists (left by an earlier run {run_id}?); "
                             f"move it away or give another --run-id")
        apply_seam(args)  # LLM_* and flags: the endpoint, the model's name, the prices, the turn cap
        with _reserve(args.state_dir, run_id), _unless_saved(args, run_id):
            workspace = _workspace(args, run_id)
            state = new_run(SYSTEM_PROMPT, args.task, args.model or args.scenario, run_id=run_id)
            state.config = {name: getattr(args, name) for name in SAVED}
            state.meta.update(scenario=args.scenario or args.model, workspace=str(workspace.root))
            if args.state_dir:
                ledger.bind(args.state_dir, state)
            label = (args.scenario or args.model) + _cap_label(args.max_turns) + \
                (f", budget ${args.budget:g}" if args.budget else "")
            if args.pricing != CHAPTER_PRICES:
                print(f"{visible(label)}: {visible(args.model)} at {visible(args.base_url)}; "
                      f"{args.pricing.describe()}; {args.timeout:g} s a model call attempt"
                      + ("" if args.max_turns else "; no turn cap"), file=sys.stderr)
            state, wall_ms, heard = _go(state, workspace, args, args.state_dir)
    return _finish(state, args, wall_ms, label, heard)


def _changes(state: RunState, args) -> dict:
    """The options given to ``resume`` that differ from the run's: {name: {"old", "new"}}."""
    if getattr(args, "max_turns", None) == 0:
        args.max_turns = None  # --max-turns none (or 0): the cap removed, explicitly
    return {name: {"old": state.config.get(name), "new": getattr(args, name)} for name in SAVED
            if hasattr(args, name) and getattr(args, name) != state.config.get(name)}


def _stays_scripted(state: RunState, base_url: str) -> None:
    """A run made on the scripted provider continues only on a scripted provider: its model is a script's
    name and its turns were priced at the chapter's made-up prices, so moved to a real model it would send
    that name and go on costing what no one charges. Refused before anything is saved."""
    from .scripted.scripts import SCRIPTS  # the command line knows both sides of the wire
    if state.model not in SCRIPTS:
        return
    models = served_models(base_url, os.environ.get("LLM_API_KEY") or "not-needed")
    if models and all(m.get("owned_by") == "scripted" for m in models):
        return
    raise SystemExit(f"error: run {state.run_id} was made on the scripted provider (model {state.model!r}, the "
                     f"chapter's prices) and continues only there (no --base-url, or one `serve` gives); "
                     f"{visible(base_url)} is not one: start a new run against it")


def _price_past_turns(state: RunState, pricing: Pricing) -> None:
    """A run made without a price is given one: its turns so far cost what the new prices say (counted as
    $0 they made the total, and any budget given now, understate what was spent)."""
    for t in state.per_turn:
        t["cost_usd"] = pricing.cost(t["prompt_tokens"], t["completion_tokens"])
    state.own_cost_usd = add(*(t["cost_usd"] for t in state.per_turn))
    if state.per_turn:
        print(f"   the run's {len(state.per_turn)} turn(s) so far, made without a price, are priced at "
              f"{pricing.describe()}: ${state.own_cost_usd:.6f}", file=sys.stderr)


def cmd_resume(args) -> int:
    with _owner(args.state_dir, check_run_id(args.run_id)) as args.lock:
        state = load(args.state_dir, args.run_id)
        if not state.continuable:
            raise SystemExit(f"error: run {state.run_id} is {state.status}; only a run that stopped at a cap, "
                             f"a budget or an interruption (or whose process died) can be resumed")
        made_by_cli, state.config = bool(state.config), saved_config(state.config)
        if args.approve:
            approve(state, args.approve)
        elif args.reject:
            reject(state, args.reject, args.reason, silent=args.silent)
        # The operator's record first: what follows compares the options given here with the run's latest.
        ledger.check(args.state_dir, state, saved_config, given=args.approve, saved_options=made_by_cli)
        changes = _changes(state, args)
        new = {**state.config, **{name: change["new"] for name, change in changes.items()}}
        moved_to = getattr(args, "local_base_url", None) or (new["base_url"] if "base_url" in changes else None)
        if moved_to:
            _stays_scripted(state, moved_to)
        if (new["price_in"] is None) != (new["price_out"] is None):
            raise SystemExit("error: give both --price-in and --price-out (dollars per million tokens)")
        if new["price_in"] is None and new["base_url"] is None:  # a run made in-process on the scripted provider
            new["price_in"], new["price_out"] = CHAPTER_PRICES.per_million_prices()
        args.pricing = _pricing(new["price_in"], new["price_out"], new["budget"])
        _strict_can_act(new, args.pricing)  # before the change is saved: a run must never be left unresumable
        _usable_trace(getattr(args, "trace", None) or state.config["trace"])
        # (a run made in-process without a workspace of its own gets a fresh copy, as it would in-process)
        workspace = Workspace(state.meta["workspace"]) if state.meta.get("workspace") else Workspace.copy_of()
        with _reserve(args.state_dir, state.run_id):
            if args.approve or args.reject:  # in the ledger before the state file says it
                ledger.append(args.state_dir, state, "decision", callId=args.approve or args.reject,
                              verdict="approve" if args.approve else "reject")
            if changes:
                if state.config["price_in"] is None and state.config["base_url"] and args.pricing.known:
                    _price_past_turns(state, args.pricing)
                state.config.update({name: change["new"] for name, change in changes.items()})
                ledger.append(args.state_dir, state, "config", config=state.config)
                if state.config["trace"]:
                    Trace(state.config["trace"]).emit(state.run_id, "config_changed", changes=changes)
            save(state, args.state_dir)  # the decision and the options, on disk before anything runs
            label = f"{state.meta.get('scenario', state.model)}, resumed"
            state, wall_ms, heard = _go(state, workspace, args, args.state_dir)
    return _finish(state, args, wall_ms, label, heard)


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
    """``command(args)`` with ``--base-url`` pointing at a local model server started for it."""
    from . import local
    if getattr(args, "base_url", None):
        raise SystemExit("error: --local-model starts its own server; it is not allowed with --base-url")
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    if getattr(args, "model", None) is None:
        args.model = local.MODEL_NAME
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with local.LocalModel(progress=say) as lm:
        args.prompts = lm.prompts if args.show_prompt else None
        if args.command == "run":
            args.base_url = lm.base_url
        else:  # not a change of the run's options: the same local model, on this process's port
            args.local_base_url = lm.base_url
        code = command(args)
        if lm.died:
            say(f"error: the local model server died during the run: {lm.died}" +
                (f"\n  the run's state is saved in {args.state_dir}" if args.state_dir else ""))
    return code


def _wants_local(args) -> bool:
    """``run --local-model``; ``resume`` of a run made with it (unless told --base-url), or told it."""
    if args.command == "run" or hasattr(args, "local_model"):
        return getattr(args, "local_model", False)
    if args.command != "resume":
        return False
    if getattr(args, "base_url", None):  # moved to another server: no longer the local model
        args.local_model = False
        return False
    try:
        return load(args.state_dir, args.run_id).config.get("local_model") is True
    except StateFileError:
        return False  # cmd_resume says what is wrong with it


def cmd_serve_local(args) -> int:
    from . import local
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with local.LocalModel(port=args.port, ready_timeout_s=args.ready_timeout, progress=say) as lm:
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
        if not args.live:  # the chapter is the chapter: a reader's server is used only when asked
            for name in SEAM:
                os.environ.pop(name, None)
        from .chapter.report import main as chapter_main
        return chapter_main(json_out=args.json, execute=args.execute)
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
