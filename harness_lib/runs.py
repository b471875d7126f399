"""Operating a run: start it, resume it, approve or reject the call it waits on, as an operator does.

    out = await runs.start("plan", state_dir="runs", run_id="r1", options={"max_turns": 20})
    out = await runs.resume("runs", "r1")                        # with the options it was started with
    out = await runs.approve("runs", "r2", "c2")                 # decided, recorded, then continued
    out = await runs.resume("runs", "r1", options={"max_budget_usd": 0.05})   # a recorded change

What ``loop.run`` does not do, and an operator needs, is here: one process owns a run at a time (``lock.py``,
held from before the state is read until after it is saved); what ``resume`` is asked to do is checked
against the run's ledger first (``ledger.py``), so an edited state file cannot raise its own limits or
approve its own calls; the run carries its options (``config.py``: saved by ``start``, continued by
``resume``, a change validated, recorded in the ledger and traced as ``config_changed``); room is set aside
beside the state for the saves a full disk would refuse; and the run can be stopped gracefully from
outside (``watch``: the command line ties it to Ctrl-C and SIGTERM, since a process's signals are its
owner's, not a library's). The command line (``cli.py``) only parses, calls these and prints; a notebook
calls them as they are.

Every refusal is one line: ``RunError`` (what was asked cannot be done), ``EnvironmentProblem`` (a folder or
file the run needs cannot be used), or the state, ledger, lock and decision errors of the modules below.
Nothing here prints: what an operator should hear as it happens goes to ``say``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

from . import budget, config, ledger
from . import state as states
from .lock import RunLock, RunLockError
from .pricing import CHAPTER_PRICES, Pricing, add
from .state import RunState, check_run_id, load, make_reserve, new_run, reserve_path, save, state_path
from .stops import Stop
from .terminal import visible
from .trace import Trace
from .workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK, Workspace

if TYPE_CHECKING:
    import asyncio

# asyncio, httpx and the loop are imported where a run starts, not here: the command line's `--help`, a usage
# error and `serve` never pay for them (python -m benchmarks.coldstart).

GRACE_S = 10.0  # after the first request to stop, how long the step in flight may take before it is cancelled
RESERVE_MIN = 1 << 20  # bytes set aside beside a state (see ``state.save``): room for the last saves


class RunError(RuntimeError):
    """What was asked cannot be done: one line that says what to do instead (``error: ...``, exit 2)."""


class EnvironmentProblem(RuntimeError):
    """A folder or file the run needs cannot be used: one line that says what to fix."""


def _silent(line: str) -> None:
    pass


@dataclass
class Outcome:
    """Where a run stands after ``start`` or ``resume``: the state as saved, what it is called on a run line,
    how long this process ran it, whether its cost is known, and what stopped it from outside (``stopped_by``,
    the reasons given to ``GracefulStop.request``, first first)."""
    state: RunState
    label: str
    wall_ms: float
    priced: bool
    stopped_by: list[str] = field(default_factory=list)


class GracefulStop:
    """A run stopped from outside, without losing what it paid for: the first ``request`` stops it at its next
    step boundary (the reply or tool result in flight is saved first); a second one, or ``grace_s`` after the
    first, cancels the step in flight; any more are ignored. Called on the run's event loop."""

    def __init__(self, grace_s: float = GRACE_S):
        self.grace_s = grace_s
        self.reasons: list[str] = []
        self.task: asyncio.Future | None = None

    def request(self, reason: str) -> bool:
        """Ask the run to stop; True if this request is the one that stops it at the next step boundary."""
        import asyncio
        self.reasons.append(reason)
        task = self.task
        if task is None or task.done() or len(self.reasons) > 2:
            return False
        if len(self.reasons) == 1:
            asyncio.get_running_loop().call_later(
                self.grace_s, lambda: task.done() or task.cancel(f"{reason} (step cut short)"))
            return True
        task.cancel(self.reasons[0])
        return False

    def condition(self, state: RunState) -> Stop | None:  # a stop condition of the run (``Options.stops``)
        return Stop("interrupted", {"type": "cancelled", "reason": self.reasons[0]}) if self.reasons else None


# -- the endpoint -----------------------------------------------------------------------------------------------
def served_models(base_url: str, api_key: str) -> list[dict] | None:
    """What ``GET {base_url}/models`` lists (every server here answers it), or None if it cannot say."""
    import httpx

    from .client import tls_for
    try:
        url = base_url.rstrip("/") + "/models"
        r = httpx.get(url, timeout=2.0, trust_env=False, verify=tls_for(url),
                      headers={"Authorization": f"Bearer {api_key}"})
        return [m for m in r.json()["data"] if isinstance(m, dict)] if r.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a server that cannot list its models is simply not asked
        return None


def _scripted(models: list[dict] | None) -> bool:
    """A server that lists only the scripted provider's models (``owned_by: scripted``, e.g. ``serve``)."""
    return bool(models) and all(m.get("owned_by") == "scripted" for m in models or [])


@contextlib.contextmanager
def endpoint(base_url: str | None, latency_ms: float):
    """The run's endpoint: ``base_url``, or without one the scripted provider, started here for the run."""
    if base_url:
        yield base_url
    else:
        from .scripted import ScriptedProvider  # operating a run knows both sides of the wire
        with ScriptedProvider(latency_ms=latency_ms) as provider:
            yield provider.base_url


def scenario_tools(state: RunState, workspace: Workspace, base_url: str, pricing: Pricing = CHAPTER_PRICES,
                   api_key: str = "not-needed") -> list:
    """The workspace's four tools; ``delegate`` also gets its research subagent. The child asks for the
    scripted ``plan`` when the run asks for the scripted ``delegate``, else for the run's own model."""
    tools = workspace.tools()
    if state.meta.get("scenario") == "delegate":
        from .subagent import research_tool
        child = "plan" if state.model == "delegate" else state.model
        tools = [research_tool(workspace.tools(), base_url, child, api_key=api_key, pricing=pricing), *tools]
    return tools


def _pricing(price_in, price_out, max_budget_usd) -> Pricing:
    """The run's prices (None, None: unknown), and the refusal a budget without a price is."""
    from .pricing import UNPRICED
    pricing = UNPRICED if price_in is None else Pricing.per_million(price_in, price_out)
    if max_budget_usd is not None and not pricing.known:
        raise RunError("--budget needs a price: this endpoint has none; give --price-in and "
                       "--price-out (dollars per million tokens), or cap the turns with --max-turns")
    return pricing


def _strict_can_act(options: dict, pricing: Pricing) -> None:
    """A strict budget needs a budget (and a price): refused now, before anything is saved."""
    try:
        budget.check_options(options["strict_budget"], 0.0, options["max_budget_usd"], pricing)
    except ValueError as e:
        raise RunError(f"--strict-budget: {e}") from None


def cap_label(max_turns: int | None) -> str:
    return ", no cap" if max_turns is None else f", cap {max_turns}"


# -- the environment: folders that can hold a run ----------------------------------------------------------------
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


def _workspace(workspace, state_dir, run_id: str) -> Workspace:
    if workspace:
        return Workspace(workspace)
    if not state_dir:
        return Workspace.copy_of()
    into = Path(state_dir) / f"{run_id}.workspace"  # the run's own copy lives with the run
    try:
        return Workspace.copy_of(into=into)
    except OSError as e:
        shutil.rmtree(into, ignore_errors=True)
        raise EnvironmentProblem(f"cannot copy the workspace into {visible(into)}: "
                                 f"{e.strerror or 'the copy failed'}; free some space, then try again") from None


@contextlib.contextmanager
def _unless_saved(state_dir, workspace, run_id: str):
    """If ``start`` stops before its first save (a refusal, a signal, a full disk), nothing was paid:
    remove the workspace copy it made, so the same command can simply be given again."""
    try:
        yield
    except BaseException:
        copy = Path(state_dir or "") / f"{run_id}.workspace"
        if state_dir and not workspace and not state_path(state_dir, run_id).exists():
            shutil.rmtree(copy, ignore_errors=True)
            with contextlib.suppress(OSError):
                ledger.ledger_path(state_dir, run_id).unlink()
        raise


# -- start, resume, approve, reject ------------------------------------------------------------------------------
View = Callable[[dict, str], "tuple[Callable[[dict], None] | None, Callable[[str], None] | None]"]


async def start(scenario: str | None = None, *, model: str | None = None, task: str = TASK,
                run_id: str | None = None, state_dir: str | Path | None = None, workspace: str | Path | None = None,
                options: dict | None = None, api_key: str = "not-needed", view: View | None = None,
                watch: Callable[[GracefulStop], ContextManager] | None = None, cancel_after: float | None = None,
                say: Callable[[str], None] = _silent) -> Outcome:
    """Start a run of ``scenario`` (the scripted provider's, without ``options["base_url"]``; against another
    endpoint, ``model`` names the model and ``scenario`` is only a label) and drive it to one of its five
    exits. ``options``: the run's saved options by their names (``config.SAVED``; the rest take their
    defaults), saved with it, in its ledger too when it has a ``state_dir``. ``view(options, run_id)`` returns
    the ``on_event`` and ``on_text`` that show the run as it goes; ``watch(stop)`` is entered while the run
    goes (the command line hangs its signal handlers there); ``cancel_after`` presses Stop after so many
    seconds."""
    given = config.given(options or {})
    if workspace and Path(workspace).resolve() == DATA_WORKSPACE:
        raise RunError("the tools never act on data/workspace itself; give another folder or none")
    _usable_trace(given["trace"])
    run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex[:12]
    with _owner(state_dir, run_id) as lock:  # (the run checks at every step that it still holds it)
        if state_dir and state_path(state_dir, run_id).exists():
            raise RunError(f"run {run_id} already exists in {visible(state_dir)}; continue it with "
                           f"`resume {run_id} --state-dir {visible(state_dir)}`, or give another --run-id")
        into = Path(state_dir) / f"{run_id}.workspace" if state_dir and not workspace else None
        if into is not None and os.path.lexists(into):  # (a link there too, dangling or not)
            raise RunError(f"{visible(into)} already exists (left by an earlier run {run_id}?); "
                           f"move it away or give another --run-id")
        base_url = given["base_url"]
        models = served_models(base_url, api_key) if base_url else None
        scripted = not base_url or _scripted(models)  # the scenario is the model and the chapter's prices apply
        if base_url and scripted and not model:
            model = scenario
        if base_url and not model:
            names = ", ".join(str(m.get("id")) for m in models or [])[:300]
            raise RunError(f"against {base_url}, give the model's name: --model NAME or LLM_MODEL"
                           + (f" (this server lists: {names})" if names else " (e.g. qwen2.5:0.5b for Ollama)")
                           + "; see docs/servers.md")
        if not base_url and not scenario:
            raise RunError("give a scenario for the scripted provider (plan, runaway, ...), or a "
                           "server: --base-url URL (or LLM_BASE_URL) with --model NAME (or LLM_MODEL)")
        if (given["price_in"] is None) != (given["price_out"] is None):
            raise RunError("give both --price-in and --price-out (dollars per million tokens), or neither")
        if given["price_in"] is None and scripted:  # saved with the run as what it is: the chapter's prices
            given["price_in"], given["price_out"] = CHAPTER_PRICES.per_million_prices()
        pricing = _pricing(given["price_in"], given["price_out"], given["max_budget_usd"])
        _strict_can_act(given, pricing)
        name = str(scenario or model)
        label = name + cap_label(given["max_turns"]) + \
            (f", budget ${given['max_budget_usd']:g}" if given["max_budget_usd"] else "")
        with _reserve(state_dir, run_id), _unless_saved(state_dir, workspace, run_id):
            ws = _workspace(workspace, state_dir, run_id)
            state = new_run(SYSTEM_PROMPT, task, str(model or scenario), run_id=run_id)
            state.config = given
            state.meta.update(scenario=name, workspace=str(ws.root))
            if state_dir:
                ledger.bind(state_dir, state)
            if pricing != CHAPTER_PRICES:
                where = f"{visible(model)} at {visible(base_url)}" if base_url else "the scripted provider"
                say(f"{visible(label)}: {where}; {pricing.describe()}; {given['timeout_s']:g} s a model call attempt"
                    + ("" if given["max_turns"] else "; no turn cap"))
            return await _go(state, ws, state_dir, lock, pricing, label, api_key, view, watch, cancel_after)


async def resume(state_dir: str | Path, run_id: str, *, approve: str | None = None, reject: str | None = None,
                 reason: str | None = None, silent: bool = False, options: dict | None = None,
                 local_base_url: str | None = None, api_key: str = "not-needed", view: View | None = None,
                 watch: Callable[[GracefulStop], ContextManager] | None = None, cancel_after: float | None = None,
                 say: Callable[[str], None] = _silent) -> Outcome:
    """Continue a saved run with the options it was started with, after deciding its pending call (``approve``
    or ``reject`` it, with the ``reason`` the model reads, or ``silent``ly). ``options``: the ones to change,
    by their names, each validated, recorded in the ledger and traced (``config_changed``) before the run
    goes on. ``local_base_url``: where this process serves the run's local model (``local_model``; its
    address is no option of the run). The rest as for ``start``."""
    if approve and reject:
        raise RunError("approve or reject a call, not both")
    given = config.given(options or {}, partial=True)
    with _owner(state_dir, check_run_id(run_id)) as lock:
        state = load(state_dir, run_id)
        if not state.continuable:
            raise RunError(f"run {state.run_id} is {state.status}; only a run that stopped at a cap, "
                           f"a budget or an interruption (or whose process died) can be resumed")
        made_by_cli, state.config = bool(state.config), config.read(state.config)
        if approve:
            states.approve(state, approve)
        elif reject:
            states.reject(state, reject, reason, silent=silent)
        # The operator's record first: what follows compares the options given here with the run's latest.
        ledger.check(state_dir, state, given=approve, saved_options=made_by_cli)
        changes = {name: {"old": state.config.get(name), "new": given[name]} for name in config.SAVED
                   if name in given and given[name] != state.config.get(name)}
        new = {**state.config, **{name: change["new"] for name, change in changes.items()}}
        moved_to = local_base_url or (new["base_url"] if "base_url" in changes else None)
        if moved_to:
            _stays_scripted(state, moved_to, api_key)
        if (new["price_in"] is None) != (new["price_out"] is None):
            raise RunError("give both --price-in and --price-out (dollars per million tokens)")
        if new["price_in"] is None and new["base_url"] is None:  # a run made in-process on the scripted provider
            new["price_in"], new["price_out"] = CHAPTER_PRICES.per_million_prices()
        pricing = _pricing(new["price_in"], new["price_out"], new["max_budget_usd"])
        _strict_can_act(new, pricing)  # before the change is saved: a run must never be left unresumable
        _usable_trace(given.get("trace") or state.config["trace"])
        # (a run made in-process without a workspace of its own gets a fresh copy, as it would in-process)
        workspace = Workspace(state.meta["workspace"]) if state.meta.get("workspace") else Workspace.copy_of()
        with _reserve(state_dir, state.run_id):
            if approve or reject:  # in the ledger before the state file says it
                ledger.append(state_dir, state, "decision", callId=approve or reject,
                              verdict="approve" if approve else "reject")
            if changes:
                if state.config["price_in"] is None and state.config["base_url"] and pricing.known:
                    _price_past_turns(state, pricing, say)
                state.config.update({name: change["new"] for name, change in changes.items()})
                ledger.append(state_dir, state, "config", config=state.config)
                if state.config["trace"]:
                    Trace(state.config["trace"]).emit(state.run_id, "config_changed", changes=changes)
            save(state, state_dir)  # the decision and the options, on disk before anything runs
            label = f"{state.meta.get('scenario', state.model)}, resumed"
            return await _go(state, workspace, state_dir, lock, pricing, label, api_key, view, watch, cancel_after,
                             local_base_url)


async def approve(state_dir: str | Path, run_id: str, call_id: str, **how) -> Outcome:
    """Approve the call the run waits on, and continue it (``resume``'s other arguments in ``how``)."""
    return await resume(state_dir, run_id, approve=call_id, **how)


async def reject(state_dir: str | Path, run_id: str, call_id: str, reason: str | None = None, *,
                 silent: bool = False, **how) -> Outcome:
    """Reject the call the run waits on (the model reads ``reason``; ``silent``: nothing), and continue it."""
    return await resume(state_dir, run_id, reject=call_id, reason=reason, silent=silent, **how)


def _stays_scripted(state: RunState, base_url: str, api_key: str) -> None:
    """A run made on the scripted provider continues only on a scripted provider: its model is a script's
    name and its turns were priced at the chapter's made-up prices, so moved to a real model it would send
    that name and go on costing what no one charges. Refused before anything is saved."""
    from .scripted.scripts import SCRIPTS
    if state.model not in SCRIPTS or _scripted(served_models(base_url, api_key)):
        return
    raise RunError(f"run {state.run_id} was made on the scripted provider (model {state.model!r}, the "
                   f"chapter's prices) and continues only there (no --base-url, or one `serve` gives); "
                   f"{visible(base_url)} is not one: start a new run against it")


def _price_past_turns(state: RunState, pricing: Pricing, say: Callable[[str], None]) -> None:
    """A run made without a price is given one: its turns so far cost what the new prices say (counted as
    $0 they made the total, and any budget given now, understate what was spent)."""
    for t in state.per_turn:
        t["cost_usd"] = pricing.cost(t["prompt_tokens"], t["completion_tokens"])
    state.own_cost_usd = add(*(t["cost_usd"] for t in state.per_turn))
    if state.per_turn:
        say(f"   the run's {len(state.per_turn)} turn(s) so far, made without a price, are priced at "
            f"{pricing.describe()}: ${state.own_cost_usd:.6f}")


# -- driving the loop ---------------------------------------------------------------------------------------------
async def _go(state: RunState, workspace: Workspace, state_dir, lock: RunLock | None, pricing: Pricing, label: str,
              api_key: str, view: View | None, watch, cancel_after: float | None,
              local_base_url: str | None = None) -> Outcome:
    import asyncio

    from .loop import Options, run
    cfg = state.config
    stop = GracefulStop()

    def lock_lost(s: RunState):  # the run's lock file gone or replaced: another process may own the run
        why = lock.lost() if lock is not None else None
        return Stop("interrupted", {"type": "cancelled", "reason": why}) if why else None

    on_event, on_text = view(cfg, state.run_id) if view else (None, None)
    # (a local model: this process's own server, wherever the saved base_url pointed when it was made)
    with endpoint(local_base_url or cfg["base_url"], cfg["latency_ms"]) as base_url:
        opts = Options(base_url=base_url, api_key=api_key, max_turns=cfg["max_turns"],
                       max_budget_usd=cfg["max_budget_usd"], stops=[stop.condition, lock_lost],
                       strict_budget=cfg["strict_budget"], strict_margin=cfg["strict_margin"],
                       tool_errors=cfg["tool_errors"], dedupe=cfg["dedupe"],
                       trace=Trace(cfg["trace"], on_event=on_event), state_dir=state_dir, pricing=pricing,
                       timeout_s=cfg["timeout_s"], stream=cfg["stream"], on_text=on_text if cfg["stream"] else None)
        started = time.perf_counter()
        stop.task = task = asyncio.ensure_future(run(state, scenario_tools(state, workspace, base_url, pricing,
                                                                           api_key), opts))
        with watch(stop) if watch else contextlib.nullcontext():
            if cancel_after is not None:
                asyncio.get_running_loop().call_later(cancel_after, task.cancel, "user pressed Stop")
            try:
                state = await task
            except asyncio.CancelledError:
                if (me := asyncio.current_task()) is not None and (me.cancelling() if hasattr(me, "cancelling")
                                                                   else True):   # (3.10: no Task.cancelling)
                    raise  # this call was cancelled (a cell's Stop), not only its run: which stopped and saved
                # (else a second stop while the run was closing its connection: the run had stopped and saved)
        wall_ms = (time.perf_counter() - started) * 1000
    if state_dir and state.status != "running":  # where this process left it: a state may not forget it
        with contextlib.suppress(OSError):
            ledger.append(state_dir, state, "spent", turns=state.turns, costUsd=state.own_cost_usd,
                          totalCostUsd=state.total_cost_usd)
    return Outcome(state, label, wall_ms, pricing.known, list(stop.reasons))
