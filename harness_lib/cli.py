"""The command line: ``python -m harness_lib serve | run | resume | chapter``.

Exit code 0 for any of the five exits (a stop is an answer, not a crash); 2 for a usage error or a
state file that cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

import httpx

from .loop import DEDUPE, POLICIES, Options, run
from .pricing import CHAPTER_PRICES, UNPRICED, Pricing
from .state import DecisionError, RunState, StateFileError, approve, load, new_run, reject, state_path
from .trace import Trace
from .workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace


def summary(state: RunState, scenario: str, wall_ms: float, priced: bool = True) -> dict:
    """``priced=False`` (no price given for a real endpoint): ``cost_usd`` is None, never a made-up cost."""
    return {
        "run_id": state.run_id, "scenario": scenario, "status": state.status, "interruption": state.interruption,
        "turns": state.turns, "tool_runs": state.tool_runs, "prompt_tokens": state.prompt_tokens,
        "completion_tokens": state.completion_tokens,
        "cost_usd": round(state.total_cost_usd, 6) if priced else None,
        "tokens_estimated": any(t.get("estimated") for t in state.per_turn),
        "wall_ms": round(wall_ms, 1), "answer": state.output,
        "per_turn_prompt_tokens": [t["prompt_tokens"] for t in state.per_turn], "error": state.error,
    }


def chapter_line(s: dict, label: str) -> str:
    """The chapter's own line format."""
    lines = [f"{label:<15} turns={s['turns']}  tools={s['tool_runs']}  in={s['prompt_tokens']:,}  "
             f"out={s['completion_tokens']:,}  {_cost(s)}  ms={s['wall_ms']:.0f}  status={s['status']}"]
    if s["answer"] is not None:
        lines.append(f"   answer: {json.dumps(s['answer'], ensure_ascii=False)}")
    i = s["interruption"]
    if i and i["type"] == "approval":
        lines.append(f"   stopped at turn {s['turns']}: interrupted / approval -> "
                     f"{i['toolName']}({json.dumps(i['args'], separators=(',', ':'))})  [call {i['callId']}]")
    elif i:
        lines.append(f"   stopped: {s['status']} / {i['type']}" + (f" ({i['reason']})" if i.get("reason") else ""))
    if s["error"]:
        lines.append(f"   error: {s['error']}")
    lines.append("   per-turn prompt tokens: " + ", ".join(str(p) for p in s["per_turn_prompt_tokens"]))
    return "\n".join(lines)


def _cost(s: dict) -> str:
    est = " (tokens estimated)" if s.get("tokens_estimated") else ""
    if s["cost_usd"] is None:
        return f"cost=unknown (no price given){est}"
    return f"cost=${s['cost_usd']:.6f}" + (" (estimated)" if est else "")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


DEFAULT_MAX_TURNS = 50  # a runaway stops here unless told otherwise; the anchors use 10 to 50
SEAM = ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY")


def _turn_cap(text: str) -> int:
    """A turn cap: a whole number; 0 or ``none`` removes the cap (the default is DEFAULT_MAX_TURNS)."""
    if text.strip().lower() in ("none", "0"):
        return 0
    return _positive_int(text)


def _price(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of dollars of at least 0, got {text}")
    return value


def _timeout(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def endpoint_options(q):
    """Options for pointing the harness at a real server (issue 10). All plain values."""
    q.add_argument("--price-in", type=_price, metavar="USD", help="dollars per million input tokens "
                   "(default: the chapter's $2 for the scripted provider, unknown for any other endpoint)")
    q.add_argument("--price-out", type=_price, metavar="USD", help="dollars per million output tokens "
                   "(default: the chapter's $12 for the scripted provider, unknown for any other endpoint)")
    q.add_argument("--timeout", type=_timeout, default=60.0, metavar="SECONDS",
                   help="deadline of one attempt of the model call, whole response included (default 60)")
    q.add_argument("--stream", action="store_true", help="stream the answer's text to the screen as it "
                   "arrives; earlier turns show one step line each")


def served_models(base_url: str, api_key: str) -> list[dict] | None:
    """What ``GET {base_url}/models`` lists (every server here answers it), or None if it cannot say."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", timeout=2.0, trust_env=False,
                      headers={"Authorization": f"Bearer {api_key}"})
        return [m for m in r.json()["data"] if isinstance(m, dict)] if r.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a server that cannot list its models is simply not asked
        return None


def apply_seam(args, command: str) -> None:
    """The environment seam, flags winning: LLM_BASE_URL, LLM_MODEL, LLM_API_KEY. Then the checks a real
    endpoint needs (a model name; a price before a budget), as usage errors, and the turn cap's default.
    A base URL that lists only the scripted provider's models (``owned_by: scripted``, e.g. ``serve``) is
    the scripted provider: the scenario is the model and the chapter's prices apply, as without a URL."""
    args.base_url = args.base_url or os.environ.get("LLM_BASE_URL") or None
    args.api_key = os.environ.get("LLM_API_KEY") or "not-needed"
    models = served_models(args.base_url, args.api_key) if args.base_url else None
    scripted = not args.base_url or (bool(models) and all(m.get("owned_by") == "scripted" for m in models))
    if command == "run":
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
    if args.price_in is not None:
        args.pricing = Pricing.per_million(args.price_in, args.price_out)
    else:
        args.pricing = CHAPTER_PRICES if scripted else UNPRICED
    if args.budget is not None and not args.pricing.known:
        raise SystemExit("error: --budget needs a price: this endpoint has none; give --price-in and "
                         "--price-out (dollars per million tokens), or cap the turns with --max-turns")
    args.max_turns = DEFAULT_MAX_TURNS if args.max_turns is None else (args.max_turns or None)


def _cap_label(args) -> str:
    if args.max_turns is None:
        return ", no cap"
    return f", cap {args.max_turns}"


class _Visible(Trace):
    """Retries and waits (a server loading its model) on stderr, always; with --stream also one line per turn
    and tool, so a long run is never silent."""

    def __init__(self, path, steps: bool):
        super().__init__(path)
        self.steps = steps

    def emit(self, run_id: str, type: str, **fields) -> dict:
        event = super().emit(run_id, type, **fields)
        line = None
        if type == "retry":
            line = (f"      {'waiting: the server is loading its model' if fields.get('loading') else 'retry'}: "
                    f"{fields['problem']} (next try in {fields['delay_s']} s)")
        elif self.steps and type == "turn":
            est = ", estimated" if fields.get("estimated") else ""
            line = (f"   step {fields['turn']}: {fields['prompt_tokens']:,} in, {fields['completion_tokens']:,} "
                    f"out{est} ({fields.get('finish')})")
        elif self.steps and type == "tool_start":
            line = f"      {fields['toolName']}({fields['args']})"
        if line:
            print(line, file=sys.stderr, flush=True)
        return event


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text}")
    return value


def _budget(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_lib", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the scripted provider in the foreground")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--latency-ms", type=float, default=0.0)

    def limits(q):
        q.add_argument("--max-turns", type=_turn_cap, metavar="N|none",
                       help=f"turn cap (default {DEFAULT_MAX_TURNS}; 0 or none: no cap)")
        q.add_argument("--budget", type=_budget, help="max spend in USD (overshoot: at most one turn)")
        q.add_argument("--strict-budget", action="store_true", help="with --budget: price each call before "
                       "making it (local token count, max_tokens), so the budget is never crossed")
        q.add_argument("--tool-errors", choices=POLICIES, default="descriptive")
        q.add_argument("--dedupe", choices=DEDUPE, default="off")
        q.add_argument("--trace", help="append the JSONL trace to this file")
        q.add_argument("--base-url", help="an OpenAI-compatible endpoint; default: start the scripted provider")
        q.add_argument("--latency-ms", type=_seconds, default=0.0, help="the scripted provider's latency")
        q.add_argument("--cancel-after", type=_seconds, help="press Stop after this many seconds")
        q.add_argument("--json", action="store_true", help="one JSON object on stdout")
        endpoint_options(q)

    r = sub.add_parser("run", help="run one scenario")
    r.add_argument("scenario", nargs="?", help="the scripted provider's scenario (plan, runaway, ...); "
                   "against a real endpoint, only a label")
    r.add_argument("--model", help="the model name to ask for (default: $LLM_MODEL; the scripted provider: "
                   "the scenario)")
    r.add_argument("--task", default=TASK)
    r.add_argument("--state-dir")
    r.add_argument("--workspace", help="the folder the tools act on (default: a fresh copy of data/workspace)")
    r.add_argument("--run-id")
    limits(r)

    z = sub.add_parser("resume", help="continue a saved run, optionally deciding a pending call")
    z.add_argument("run_id")
    z.add_argument("--state-dir", required=True)
    decide = z.add_mutually_exclusive_group()
    decide.add_argument("--approve", metavar="CALL_ID")
    decide.add_argument("--reject", metavar="CALL_ID")
    z.add_argument("--reason", help="with --reject: the words the model reads")
    z.add_argument("--silent", action="store_true", help="with --reject: leave the transcript slot empty")
    limits(z)

    c = sub.add_parser("chapter", help="every chapter figure, recomputed, beside the chapter's")
    c.add_argument("--json", action="store_true")
    c.add_argument("--execute", action="store_true", help="also execute the notebooks and write reports/")
    c.add_argument("--live", action="store_true", help="let notebook 12 use LLM_BASE_URL / LLM_MODEL / "
                   "LLM_API_KEY (otherwise they are ignored and the chapter's recorded run is shown)")
    return p


@contextlib.contextmanager
def endpoint(args):
    if args.base_url:
        yield args.base_url
    else:
        from .scripted import ScriptedProvider  # only the CLI knows both sides of the wire
        with ScriptedProvider(latency_ms=args.latency_ms) as provider:
            yield provider.base_url


async def _drive(state: RunState, workspace: Workspace, args, base_url: str) -> tuple[RunState, float]:
    screen = sys.stderr if args.json else sys.stdout

    def show(text: str):
        screen.write(text)
        screen.flush()

    trace = _Visible(args.trace, steps=args.stream)
    opts = Options(base_url=base_url, api_key=args.api_key,
                   max_turns=args.max_turns, max_budget_usd=args.budget, tool_errors=args.tool_errors,
                   strict_budget=args.strict_budget,
                   dedupe=args.dedupe, trace=trace, state_dir=args.state_dir, pricing=args.pricing,
                   timeout_s=args.timeout, stream=args.stream, on_text=show if args.stream else None)
    started = time.perf_counter()
    task = asyncio.ensure_future(run(state, workspace.tools(), opts))
    if args.cancel_after is not None:
        asyncio.get_running_loop().call_later(args.cancel_after, task.cancel, "user pressed Stop")
    state = await task
    if args.stream:
        show("\n")
    return state, (time.perf_counter() - started) * 1000


def _finish(state: RunState, args, wall_ms: float, label: str) -> int:
    s = summary(state, state.meta.get("scenario", state.model), wall_ms, priced=args.pricing.known)
    s["max_turns"] = args.max_turns  # the cap this process ran under (None: no cap)
    if args.json:
        print(json.dumps(s, ensure_ascii=False))
    else:
        print(chapter_line(s, label))
        if state.resumable and args.state_dir:
            print(f"   run {state.run_id} saved in {args.state_dir}: python -m harness_lib resume {state.run_id} "
                  f"--state-dir {args.state_dir}")
    return 0


def cmd_run(args) -> int:
    if args.workspace and Path(args.workspace).resolve() == DATA_WORKSPACE:
        raise SystemExit("error: the tools never act on data/workspace itself; give another folder or none")
    if args.run_id and args.state_dir and state_path(args.state_dir, args.run_id).exists():
        raise SystemExit(f"error: run {args.run_id} already exists in {args.state_dir}; continue it with "
                         f"`resume {args.run_id} --state-dir {args.state_dir}`, or give another --run-id")
    apply_seam(args, "run")
    workspace = Workspace(args.workspace) if args.workspace else Workspace.copy_of()
    if args.state_dir:
        workspace.keep()  # the saved run names this folder: resume acts on it
    state = new_run(SYSTEM_PROMPT, args.task, args.model or args.scenario, run_id=args.run_id)
    state.meta.update(scenario=args.scenario or args.model, workspace=str(workspace.root))
    label = (args.scenario or args.model) + _cap_label(args) + (f", budget ${args.budget:g}" if args.budget else "")
    if args.pricing is not CHAPTER_PRICES:
        print(f"{label}: {args.model} at {args.base_url}; {args.pricing.describe()}; "
              f"{args.timeout:g} s a model call attempt" + ("" if args.max_turns else "; no turn cap"),
              file=sys.stderr)
    with endpoint(args) as base_url:
        state, wall_ms = asyncio.run(_drive(state, workspace, args, base_url))
    return _finish(state, args, wall_ms, label)


def cmd_resume(args) -> int:
    apply_seam(args, "resume")
    state = load(args.state_dir, args.run_id)
    if not state.continuable:
        raise SystemExit(f"error: run {state.run_id} is {state.status}; only a run that stopped at a cap, "
                         f"a budget or an interruption (or whose process died) can be resumed")
    if args.approve:
        approve(state, args.approve)
    elif args.reject:
        reject(state, args.reject, args.reason, silent=args.silent)
    workspace = Workspace(state.meta["workspace"]) if state.meta.get("workspace") else Workspace.copy_of()
    with endpoint(args) as base_url:
        state, wall_ms = asyncio.run(_drive(state, workspace, args, base_url))
    return _finish(state, args, wall_ms, f"{state.meta.get('scenario', state.model)}, resumed")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
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
    except (StateFileError, DecisionError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
