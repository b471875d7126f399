"""16, the capstone: the reader's own harness recomputes the chapter, as ``make chapter`` does through the library.

The reader's harness is a kit of plain functions over a run held as a dict (notebook 16 builds it from the
pieces of sections 2 to 10): ``new_state(run_id, model, task)``, ``save(state, folder)``, ``load(folder, run_id)``,
``approve(state, call_id)``, ``reject(state, call_id, reason=None, silent=False)`` and ``harness(url, state, tools,
max_turns=, max_budget_usd=, folder=, trace=, tool_errors=, dedupe=, on_progress=)``, which returns the run with
``status``, ``interruption``, ``turns``, ``tool_runs``, ``in``, ``out``, ``cost_usd``, ``prompts`` (each turn's prompt
tokens), ``answer`` and ``messages``. ``recompute(kit)`` drives it through every experiment behind the chapter's 60
exact figures (the plan run, the caps, the budget, the policies, the repeats, the verdicts across a restart, the
crash and resume, Stop during the scan, the trace) and returns figure id -> value. ``LIBRARY`` is the same kit over
``harness_lib``, so both columns come from one driver. ``await capstone(new_state=..., ..., harness=...)`` shows them
side by side with the chapter's, the line "your harness reproduces N of the 60 exact figures", and the first
difference explained; ``sections_plot`` draws the same, section by section.

Each experiment runs the reader's code in a process of its own under a deadline (``sandbox``): one that raises,
hangs or is not written yet costs its own figures, never the others'. Nothing here is recorded for the report:
``make chapter``'s figures are the library's.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from . import figures, params, sandbox
from .checking import NOT_WRITTEN, QUICK_SCAN, _code_files, _stubs, after_lines, ending, outcome_line, warm
from .language import N_, Text, _, ngettext
from .plain import plain
from .plots import BLUE, ORANGE, _figure, style
from .s10_trace import chapter_trace
from .stop_button import whole

PARAMETERS = {"DEADLINE_S": params.Number(1, 60, closed=True, unit=" s")}  # an experiment's time, then it is stopped
PIECES = ("new_state", "save", "load", "approve", "reject", "harness")

REASON = "I only asked which file mentions a timeout; do not delete anything."
DEADLINE_S = 10.0                              # an experiment's own time (the runaway's four caps: about 1 s)
FIELDS = ("status", "interruption", "turns", "tool_runs", "in", "out", "cost_usd", "prompts", "answer", "messages")
# The runs' labels, in the table of runs beside the library's (a label is also the key the two sides share)
# TRANSLATORS: a run's label: "runaway, cap 8": the script and its turn cap
CAPPED = N_("{script}, cap {cap}")
# TRANSLATORS: a run's label: "repeat, dedupe read-only": the script and its dedupe policy, as the code names it
DEDUPED = N_("{script}, dedupe {dedupe}")

# What each section's figures stand for: said beside the first figure that differs.
POINTS = {
    "01-loop": N_("section 1: three turns, every turn's tokens added up from the replies' usage, the answer kept"),
    "02-turn-cap": N_("section 2: the cap checked before each turn is paid for, `turns >= max_turns`"),
    "03-budget": N_("section 3: the budget checked before each call, `cost >= max_budget_usd`, so a run overshoots by "
                    "one turn at most"),
    "05-tool-errors": N_("section 5: `fatal` ends the run, `generic` says only that it failed, `descriptive` returns "
                         "the error's own words; the cap checked before what is owed runs"),
    "06-dedupe": N_("section 6: only read-only calls are answered from the cache, keyed on the tool and its arguments"),
    "07-approval": N_("section 7: a call that needs approval stops the run; the verdict, kept across a restart, fills "
                      "the call's slot in words"),
    "08-resume": N_("section 8: every step saved before the next is paid for; a resume answers what is owed first, "
                    "pays no turn twice and runs no finished call again"),
    "09-cancel": N_("section 9: Stop cancels the run's task, the tool hears it, the run ends interrupted with the "
                    "reason"),
    "10-trace": N_("section 10: one line per event, each with the run id, each turn's tokens and running cost, "
                   "run_stopped with its reason"),
    "15-what-is-left": N_("section 15: the same figures as sections 1 and 2, every turn resending the ones before it"),
}


# The words the reader's kit must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('run_id', 'model', 'messages', 'status', 'interruption', 'error', 'turns', 'tool_runs', 'in', 'out',
            'cost_usd', 'prompts', 'answer', 'approved', 'rejected', 'seen', 'max_turns', 'max_budget', 'approval',
            'cancelled', 'callId', 'toolName', 'args', 'reason', 'turn', 'prompt_tokens', 'completion_tokens',
            'total_tokens', 'costUsd', 'finish', 'tool_start', 'tool_progress', 'label', 'tool_result', 'ms', 'ok',
            'approval_required', 'run_stopped')


# -- the library as a kit ---------------------------------------------------------------------------------
def _library_kit() -> SimpleNamespace:
    from .. import state as hs
    from ..loop import Options, run
    from ..trace import Trace
    from ..workspace import SYSTEM_PROMPT

    async def harness(url, state, tools, max_turns=50, max_budget_usd=None, folder=None, trace=None,
                      tool_errors="descriptive", dedupe="off", on_progress=None):
        hook = None if trace is None else (lambda e: trace(e["runId"], e["type"], **{
            k: v for k, v in e.items() if k not in ("runId", "type")}))
        return await run(state, tools, Options(base_url=url, max_turns=max_turns, max_budget_usd=max_budget_usd,
                                               state_dir=folder, trace=Trace(timestamps=False, on_event=hook),
                                               tool_errors=tool_errors, dedupe=dedupe, on_progress=on_progress))

    return SimpleNamespace(new_state=lambda run_id, model, task: hs.new_run(SYSTEM_PROMPT, task, model, run_id),
                           save=hs.save, load=hs.load, approve=hs.approve,
                           reject=lambda s, call_id, reason=None, silent=False: hs.reject(s, call_id, reason,
                                                                                          silent=silent),
                           harness=harness)


LIBRARY = _library_kit()


def view(state) -> dict:
    """The run's fields, from the reader's dict or the library's ``RunState``: a copy, since either harness goes on
    changing the run it returned when it is given it again."""
    if isinstance(state, dict):
        return copy.deepcopy({k: state.get(k) for k in FIELDS})
    return copy.deepcopy({"status": state.status, "interruption": state.interruption, "turns": state.turns,
                          "tool_runs": state.tool_runs, "in": state.prompt_tokens, "out": state.completion_tokens,
                          "cost_usd": state.own_cost_usd, "prompts": [t["prompt_tokens"] for t in state.per_turn],
                          "answer": state.output or "", "messages": state.messages})


# -- the experiments ----------------------------------------------------------------------------------------
def _workspace():
    from ..workspace import Workspace
    return Workspace.copy_of()


def record(kit, label: str, run: dict, workspace=None) -> dict:
    """Keep a run's fields (and the files it deleted) under ``label``, to be laid beside the library's same run."""
    runs = getattr(kit, "runs", None)
    if runs is not None:
        runs[label] = {**run, **({"deleted": list(workspace.delete_runs)} if workspace is not None else {})}
    return run


def record_trace(kit, label: str, events: list[dict]) -> None:
    """Keep a run's trace lines under ``label``: each line's type and the fields the chapter's trace prints for it
    (the run id and times aside), a progress line's tool and label."""
    shown = {e["type"]: [k for k in e if k not in ("runId", "ms")] for e in chapter_trace()}
    shown["tool_progress"] = ["type", "toolName", "label"]
    runs = getattr(kit, "runs", None)
    if runs is not None:
        runs[label] = {"trace": [{k: e.get(k) for k in shown.get(e["type"], ["type"])} for e in events]}


async def _fresh(kit, url, model, label=None, run_id="capstone", workspace=None, scan=None, **options):
    from ..workspace import TASK
    workspace = workspace or _workspace()
    state = await kit.harness(url, kit.new_state(run_id, model, TASK), workspace.tools(**(scan or QUICK_SCAN)),
                              **options)
    run = view(state)
    return (record(kit, label, run, workspace) if label else run), workspace


async def loop_and_caps(kit, url) -> dict:
    plan, _ = await _fresh(kit, url, "plan", Text(CAPPED, script="plan", cap=20), max_turns=20)
    m = {"plan.turns": plan["turns"], "plan.tools": plan["tool_runs"], "plan.in": plan["in"], "plan.out": plan["out"],
         "plan.cost": plan["cost_usd"], "plan.status": plan["status"], "plan.answer": plan["answer"],
         "plan.prompts": plan["prompts"], "left.prompts": plan["prompts"]}
    ins, costs = {}, {}
    for cap in (8, 20, 50, 100):
        run, _ = await _fresh(kit, url, "runaway", Text(CAPPED, script="runaway", cap=cap), max_turns=cap)
        ins[cap], costs[cap] = run["in"], run["cost_usd"]
    m.update({"cap.in8": ins[8], "cap.in50": ins[50], "cap.in100": ins[100], "cap.cost20": float(costs[20]),
              "cap.cost_ratio": float(costs[100] / costs[50]), "cap.in_ratio": float(ins[100] / ins[50]),
              "left.in8": ins[8], "left.in100": ins[100]})
    return m


async def budget(kit, url) -> dict:
    run, _ = await _fresh(kit, url, "runaway", Text(N_("{script}, budget {budget}"), script="runaway",
                                                    budget="$0.010"), max_turns=None, max_budget_usd=0.010)
    await _fresh(kit, url, "runaway", Text(N_("{script}, budget {budget}: one turn's price, reached exactly"),
                                           script="runaway", budget="$0.000684"), max_turns=None,
                 max_budget_usd=0.000684)
    return {"budget.spent": float(run["cost_usd"]), "budget.turns": run["turns"], "budget.status": run["status"]}


async def tool_errors(kit, url) -> dict:
    runs = {p: (await _fresh(kit, url, "recover", f"recover, {p}", max_turns=20, tool_errors=p))[0]
            for p in ("fatal", "generic", "descriptive")}
    perm, _ = await _fresh(kit, url, "forbidden", Text(CAPPED, script="forbidden", cap=12), max_turns=12,
                           tool_errors="descriptive")
    return {"errors.ratio": float(runs["descriptive"]["cost_usd"] / runs["fatal"]["cost_usd"]),
            "errors.answers": ", ".join(p for p, r in runs.items() if "errors.log" in (r["answer"] or "")),
            "perm.turns": perm["turns"], "perm.toolruns": perm["tool_runs"], "perm.in": perm["in"],
            "perm.cost": perm["cost_usd"], "perm.status": perm["status"], "perm.answer": perm["answer"],
            "perm.ratio": float(perm["cost_usd"] / runs["descriptive"]["cost_usd"])}


async def _approving(kit, url, model, **options):
    from ..workspace import TASK
    workspace = _workspace()
    state = kit.new_state("capstone", model, TASK)
    while True:
        state = await kit.harness(url, state, workspace.tools(**QUICK_SCAN), **options)
        seen = view(state)
        if seen["status"] != "interrupted" or (seen["interruption"] or {}).get("type") != "approval":
            label = Text(N_("{script}, dedupe {dedupe}, every stop approved"), script=model,
                         dedupe=options.get("dedupe"))
            return record(kit, label, seen, workspace), workspace
        kit.approve(state, seen["interruption"]["callId"])


async def dedupe(kit, url) -> dict:
    base, _ = await _fresh(kit, url, "direct", "direct", max_turns=20, dedupe="off")
    again, _ = await _fresh(kit, url, "repeat", Text(DEDUPED, script="repeat", dedupe="off"), max_turns=20,
                            dedupe="off")
    cached, _ = await _fresh(kit, url, "repeat", Text(DEDUPED, script="repeat", dedupe="read-only"), max_turns=20,
                             dedupe="read-only")
    extra = again["cost_usd"] - base["cost_usd"]
    m = {"repeat.extra": round(extra, 6), "repeat.increase": round(100 * extra / base["cost_usd"]),
         "repeat.cache_saves": round(again["cost_usd"] - cached["cost_usd"], 6)}
    for key, mode in (("naive", "all"), ("gate", "read-only")):
        run, ws = await _approving(kit, url, "delete_twice", max_turns=20, dedupe=mode)
        m.update({f"{key}.turns": run["turns"], f"{key}.runs": run["tool_runs"], f"{key}.deleted": ws.delete_runs})
    return m


def stop_line(run: dict) -> str:
    i = run["interruption"] or {}
    args = json.dumps(i.get("args"), separators=(",", ":"), ensure_ascii=False)
    return f"turn {run['turns']}: {run['status']} / {i.get('type')} -> {i.get('toolName')}({args})"


async def approval(kit, url) -> dict:
    """destructive stops to ask; each verdict is given to the run as a restart finds it: saved, loaded, decided."""
    from ..workspace import TASK
    m: dict = {}
    verdicts = (("approve", "approve"), ("reject", "reject"), ("silent", "silent"),
                ("unsaid", Text(N_("reject without a reason"))))   # the last: a run beside the library's, no figure
    for key, verdict in verdicts:
        workspace, folder = _workspace(), Path(tempfile.mkdtemp(prefix="harness-capstone-"))
        try:
            stopped = await kit.harness(url, kit.new_state("verdict", "destructive", TASK),
                                        workspace.tools(**QUICK_SCAN), max_turns=20)
            seen = record(kit, N_("destructive, stopped to ask"), view(stopped), workspace)
            m.update({"approval.stop": stop_line(seen), "approval.deleted_before": list(workspace.deleted)})
            kit.save(stopped, folder)
            state = kit.load(folder, "verdict")   # the process that asked may be gone: the verdict comes later
            call_id = (seen["interruption"] or {}).get("callId")
            if verdict == "approve":
                kit.approve(state, call_id)
            else:
                kit.reject(state, call_id, **({"reason": REASON} if verdict == "reject" else
                                              {"silent": True} if verdict == "silent" else {}))
            # TRANSLATORS: a run's label: "destructive, approve after a restart"; approve, reject and silent are
            # the names in the code
            done = record(kit, Text(N_("destructive, {verdict} after a restart"), verdict=verdict),
                          view(await kit.harness(url, state, workspace.tools(**QUICK_SCAN), max_turns=20)), workspace)
            m.update({f"{key}.turns": done["turns"], f"{key}.deleted": list(workspace.deleted),
                      f"{key}.answer": done["answer"]})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    for key in ("silent.turns", "unsaid.turns", "unsaid.deleted", "unsaid.answer"):   # the chapter printed none
        m.pop(key)
    return m


async def resume(kit, url) -> dict:
    """The plan run dies while its third turn is in flight (held by the provider): what its folder held at that
    moment is restored, and a resume finishes it; the tools run across both 'processes' come from the trace."""
    from ..scripted import ScriptedProvider
    from ..workspace import TASK
    folder = Path(tempfile.mkdtemp(prefix="harness-capstone-"))
    workspace, events = _workspace(), []

    def trace(run_id, type, **fields):
        events.append({"type": type, **fields})

    def tool_runs() -> list[str]:
        return [e["toolName"] + (":" + json.loads(e.get("args") or "{}").get("path", "")
                                 if json.loads(e.get("args") or "{}").get("path") else "")
                for e in events if e["type"] == "tool_start"]

    def saved_results() -> int:
        try:
            return sum(m.get("role") == "tool" for m in view(kit.load(folder, "resume-demo"))["messages"])
        except Exception:  # noqa: BLE001 - nothing saved yet, or half: the run has not got there
            return 0

    try:
        with ScriptedProvider() as held:
            held.inject("slow:0", "slow:0", "slow:30")   # the third request is held: the process dies meanwhile
            task = asyncio.ensure_future(kit.harness(held.base_url, kit.new_state("resume-demo", "plan", TASK),
                                                     workspace.tools(**QUICK_SCAN), max_turns=20, folder=folder,
                                                     trace=trace))
            for _ in range(500):   # up to 5 s for the second result to be saved
                if saved_results() >= 2 or task.done():
                    break
                await asyncio.sleep(0.01)
            disk = Path(tempfile.mkdtemp(prefix="harness-capstone-disk-"))
            shutil.copytree(folder, disk / "runs")   # what a SIGKILL would have left
            task.cancel("killed")
            await asyncio.gather(task, return_exceptions=True)
        shutil.rmtree(folder)
        shutil.copytree(disk / "runs", folder)
        shutil.rmtree(disk, ignore_errors=True)
        restored = kit.load(folder, "resume-demo")
        before = record(kit, N_("plan, as restored from disk"), view(restored))
        m = {"resume.restored_turns": before["turns"], "resume.restored_cost": round(before["cost_usd"], 6),
             "resume.restored_messages": len(before["messages"]), "resume.restored_status": before["status"]}
        finished = record(kit, N_("plan, resumed"), view(await kit.harness(url, restored,
                                                                          workspace.tools(**QUICK_SCAN),
                                                                          max_turns=20, folder=folder, trace=trace)))
        record(kit, N_("plan, resumed, as its folder holds it at the end"), view(kit.load(folder, "resume-demo")))
        record_trace(kit, N_("plan, killed and resumed: its trace"), events)
        m.update({"resume.turns": finished["turns"], "resume.cost": finished["cost_usd"],
                  "resume.status": finished["status"], "resume.tool_runs": ", ".join(tool_runs())})
        return m
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def cancel(kit, url) -> dict:
    events: list[dict] = []
    plain, _ = await _fresh(kit, url, "slow", "slow", max_turns=20,
                            trace=lambda run_id, type, **fields: events.append({"type": type, **fields}))
    record_trace(kit, N_("slow: its trace"), events)
    pressed: list = []

    def stop_at_the_first_tick(label):   # Stop pressed at an event of the run, never at a time of the clock
        if not pressed:
            pressed.append(label)
            run.cancel("user pressed Stop")

    run = asyncio.ensure_future(_fresh(kit, url, "slow", N_("slow, Stop at the first tick"), max_turns=20,
                                       on_progress=stop_at_the_first_tick))
    try:
        stopped, _ = await run
    except asyncio.CancelledError:
        if ending():   # the check's own deadline, or the cell's Stop
            raise
        stopped = {"status": _("(the cancel went through the harness)"), "interruption": None}   # never ended the run
    return {"cancel.full_status": plain["status"], "cancel.stop_status": stopped["status"],
            "cancel.reason": (stopped["interruption"] or {}).get("reason")}


async def trace_lines(kit, url) -> dict:
    from .s10_trace import trace_figures
    events: list[dict] = []
    await _fresh(kit, url, "destructive", run_id="n1", max_turns=20,
                 trace=lambda run_id, type, **fields: events.append({"runId": run_id, "type": type, **fields}))
    record_trace(kit, N_("destructive: its trace"), events)
    return trace_figures(events)


EXPERIMENTS = {  # experiment -> the sections whose figures it gives
    loop_and_caps: ("01-loop", "02-turn-cap", "15-what-is-left"), budget: ("03-budget",),
    tool_errors: ("05-tool-errors",), dedupe: ("06-dedupe",), approval: ("07-approval",), resume: ("08-resume",),
    cancel: ("09-cancel",), trace_lines: ("10-trace",),
}


def exact_figures() -> pd.DataFrame:
    table = figures.chapter_figures()
    return table[~table.kind.isin(("time", "machine", "unreproducible", "registry"))].reset_index(drop=True)


async def recompute(kit, url: str, deadline: float = DEADLINE_S, after: list | None = None,
                    trusted: bool = False, sections_of: dict | None = None) -> tuple[dict, dict, dict]:
    """Every experiment through ``kit``: (figure id -> value, section -> one line saying why its figures are
    missing: not written yet, raised, or still running at the deadline, run label -> the run's fields). Each
    experiment runs in a process of its own (``sandbox``), what it measured coming back as plain data; ``after``
    gets the lines saying what the kit left behind (threads or processes ended, output not shown). The lines and
    labels read as their English, and are said in the language spoken through ``_()`` where they are shown."""
    warm()
    files = frozenset(_code_files({name: getattr(kit, name) for name in PIECES}))
    stubs = _stubs({name: getattr(kit, name) for name in PIECES})
    kit = SimpleNamespace(**{name: getattr(kit, name) for name in PIECES}, runs={})
    measured: dict = {}
    missing: dict = {}
    runs: dict = {}
    printed, left, wrote = sandbox.Printed(), [], []
    for experiment, sections in EXPERIMENTS.items():
        step = functools.partial(_measuring, experiment, kit, url)
        if trusted:   # the library's own kit: run here, its answer made plain
            outcome = sandbox.Outcome("ok", value=plain(await step()))
        else:
            try:
                outcome = await sandbox.run(step, deadline, files, printed)
            finally:
                sandbox.reap()
        left, wrote = left + outcome.left, wrote + outcome.wrote
        if outcome.kind == "ok":
            measured.update(outcome.value["figures"])
            runs.update(outcome.value["runs"])
            if sections_of is not None:   # which sections' figures each run stands behind
                sections_of.update({label: sections for label in outcome.value["runs"]})
            continue
        error = outcome.error or {}
        if outcome.kind == "hung":
            why = Text(N_("still running after {seconds:g} s: stopped"), seconds=deadline)
        elif error.get("stub") and error.get("frames") and error["frames"][-1][1] in stubs:
            why = Text(N_("not written yet: `{name}`"), name=error["frames"][-1][1])
        elif outcome.kind == "raised" and error.get("frames") and not error.get("not_plain"):
            why = Text(N_("raised {error} (line {line} of `{name}`)"), error=error["line"],
                       line=error["frames"][-1][0], name=error["frames"][-1][1])
        elif outcome.kind == "raised" and not error.get("not_plain") and error.get("shape") is None:
            why = Text(N_("raised {error}"), error=error["line"])
        else:
            why = outcome_line(outcome, deadline)
        missing.update({section: why for section in sections})
    if after is not None:
        after += after_lines(left, wrote, printed)
    return measured, missing, runs


async def _measuring(experiment, kit, url) -> dict:
    """One experiment, in its process: its figures and the runs it recorded."""
    kit.runs = {}
    figures = await experiment(kit, url)
    return {"figures": figures, "runs": kit.runs}


# In the order a reader checks them: how it ended, what it counted, what it did; the transcript before the tokens,
# which follow from it (a slot left empty costs fewer tokens: the slot is the cause)
RUN_FIELDS = ("status", "interruption", "turns", "tool_runs", "deleted", "messages", "answer", "in", "out", "cost_usd",
              "prompts", "trace")


def differing_field(library: dict, yours: dict | None) -> str | None:
    """The first field of a run of yours that differs from the library's same run (None: none does)."""
    from .checking import close, same

    if yours is None:
        return "run"
    return next((key for key in RUN_FIELDS if not (close if key == "cost_usd" else same)(library.get(key),
                                                                                          yours.get(key))), None)


def run_difference(library: dict, yours: dict | None) -> str | None:
    """How a run of yours differs from the library's same run, in one line (None: it does not): the first field
    that differs, in the order a reader checks them, long values cut."""
    from .checking import _plain, _transcript_difference

    key = differing_field(library, yours)
    if key is None:
        return None
    if key == "run":
        return _("not run: its experiment did not finish")
    want, got = library.get(key), yours.get(key)
    if key == "messages" and isinstance(want, list):
        return _transcript_difference(want, got)
    if key == "trace" and isinstance(want, list) and isinstance(got, list):
        n = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        if n < min(len(want), len(got)):
            return _("trace line {n}: the library's {library}, yours {yours}").format(
                n=n + 1, library=json.dumps(want[n]), yours=json.dumps(got[n]))
        return ngettext("the trace has {yours} line, the library's {library}",
                        "the trace has {yours} lines, the library's {library}", len(got)).format(
            yours=len(got), library=len(want))
    # TRANSLATORS: "turns: the library's 3, yours 4": a field of the run, as the code names it
    return _("{key}: the library's {library}, yours {yours}").format(
        key=key, library=_plain(want) if not isinstance(want, str) else repr(want),
        yours=_plain(got) if not isinstance(got, str) else repr(got))


_LIBRARY_FIGURES: dict = {}
_LIBRARY_RUNS: dict = {}
_LIBRARY_SECTIONS: dict = {}   # run label -> the sections whose figures it stands behind


class Capstone:
    """What ``await capstone(...)`` shows: section, figure, chapter, yours, library, match; then each run of the
    experiments beside the library's same run; the tally; the first difference explained. Before a line of the
    harness is written, one line saying so."""

    def __init__(self, table: pd.DataFrame, missing: dict, runs: pd.DataFrame | None = None,
                 after: list[str] | None = None):
        self.table, self.missing, self.after = table, missing, after or []
        self.runs = runs if runs is not None else pd.DataFrame(columns=["run", "differs", "field", "sections"])
        unwritten = [why for why in missing.values() if why.startswith("not written yet")]
        self.line = None
        if unwritten and len(missing) == len(set(self.table.section)):
            self.line = _(NOT_WRITTEN).format(name=unwritten[0].split("`")[1])

    @property
    def matches(self) -> pd.Series:
        """Per figure: did your harness compute it, and is it the chapter's (an empty answer is a figure too)."""
        return self.table["yours"].notna() & (self.table["yours"] == self.table["chapter"])

    @property
    def reproduced(self) -> int:
        return int(self.matches.sum())

    @property
    def total(self) -> int:
        return len(self.table)

    @property
    def same_runs(self) -> int:
        return int(self.runs["differs"].isna().sum())

    @property
    def ok(self) -> bool:
        """Every figure reproduced and every run the library's: what a check's report calls every case passing."""
        return self.line is None and self.reproduced == self.total and self.same_runs == len(self.runs)

    @property
    def library(self) -> int:
        return int((self.table["library"] == self.table["chapter"]).sum())

    def lines(self) -> list[str]:
        if self.line is not None:
            return [self.line]
        n = len(self.table)
        out = [_("your harness reproduces {reproduced} of the {n} exact figures (the library: {library} of {n}), and "
                 "{same} of its {runs} runs are the library's, field by field").format(
            reproduced=self.reproduced, n=n, library=self.library, same=self.same_runs, runs=len(self.runs))]
        first = next((r for r, ok in zip(self.table.itertuples(), self.matches) if not ok), None)
        if first is not None:
            why = self.missing.get(first.section)
            got = (_("not computed: {why}").format(why=_(why)) if why else
                   _("yours {value}").format(value=first.yours or _("(nothing)")))
            # TRANSLATORS: "first figure that differs: <the figure> (chapter 3, yours 4, the library 3)."
            said = _("first figure that differs: {figure} (chapter {chapter}, {got}, the library {library}).").format(
                figure=first.figure, chapter=first.chapter, got=got, library=first.library)
            out.append(said + " " + self._why(first.section, computed=not why))
        elif self.same_runs < len(self.runs):
            run = self.runs[self.runs["differs"].notna()].iloc[0]
            out.append(_("first run that differs from the library's: {run} ({differs}). The chapter's figures do not "
                         "show it; the next run that leans on it may.").format(run=_(run["run"]),
                                                                              differs=run["differs"]))
        return out + self.after

    def _why(self, section: str, computed: bool) -> str:
        """Why a figure of ``section`` differs: the first run behind it that differs from the library's, in its own
        words (what the run-level difference shows), then the lesson of the section it breaks."""
        point = _(POINTS.get(section, "")) + "."
        behind = self.runs[self.runs["differs"].notna() & self.runs["sections"].map(lambda s: section in (s or ()))] \
            if computed and "sections" in self.runs else self.runs.iloc[0:0]
        if behind.empty:
            return point
        run = behind.iloc[0]
        # TRANSLATORS: "The run behind it that differs first: runaway, cap 8 (turns: the library's 8, yours 9)."
        return _("The run behind it that differs first: {run} ({differs}).").format(
            run=_(run["run"]), differs=run["differs"]) + " " + point

    def frame(self) -> pd.DataFrame:
        shown = self.table.copy()
        shown["match"] = ["✓" if ok else "✗" for ok in self.matches]
        shown["yours"] = shown["yours"].fillna("—")
        shown["figure"] = shown["figure"].map(_)   # the chapter's labels, from data/chapter_figures.csv
        # TRANSLATORS: the capstone's table: section, figure, the chapter's value, yours, the library's, match
        headers = {"section": _("section"), "figure": _("figure"), "chapter": _("chapter"), "yours": _("yours"),
                   "library": _("library"), "match": _("match")}
        return shown[list(headers)].rename(columns=headers)

    def runs_frame(self) -> pd.DataFrame:
        shown = self.runs[["run", "differs"]].copy()
        shown["match"] = ["✓" if d is None or d != d else "✗" for d in shown["differs"]]
        shown["differs"] = shown["differs"].fillna("")
        shown["run"] = [_(label) for label in shown["run"]]
        # TRANSLATORS: the table of runs, yours beside the library's: the run's label, how it differs, match
        headers = {"run": _("run"), "differs": _("differs"), "match": _("match")}
        return shown.rename(columns=headers).set_index(headers["run"])

    def __repr__(self) -> str:
        if self.line is not None:
            return self.line
        return (self.frame().to_string(index=False) + "\n\n" + self.runs_frame().to_string() + "\n" +
                "\n".join(self.lines()))

    def _repr_html_(self) -> str | None:
        if self.line is not None:
            return None
        import html

        from .params import table
        shown = self.frame()
        return (table(shown.set_index(shown.columns[0]))._repr_html_() + "\n<p>" + html.escape(
            _("The same runs, yours beside the library's, field by field (status, interruption, counts, dollars, each "
              "prompt, the answer, the files deleted, the transcript, the trace):"), quote=False) + "</p>\n" +
            table(self.runs_frame())._repr_html_() + "\n" +
            "".join(f"<p>{html.escape(line)}</p>" for line in self.lines()))


async def capstone(url: str | None = None, deadline: float = DEADLINE_S, **pieces) -> Capstone:
    """The chapter's 60 exact figures recomputed through the reader's harness (``new_state``, ``save``, ``load``,
    ``approve``, ``reject``, ``harness``, by name) and through the library, side by side; then every run of the
    experiments beside the library's same run."""
    deadline = PARAMETERS["DEADLINE_S"].check("DEADLINE_S", deadline)
    for name in PIECES:
        if not callable(pieces.get(name)):
            raise params.ParameterError(_("capstone needs `{name}`, a function: run the cell above that defines "
                                          "it").format(name=name))
    if url is None:
        from .checking import provider_url
        url = provider_url()
    return await whole(_capstone(SimpleNamespace(**{k: pieces[k] for k in PIECES}), url, deadline))


async def _capstone(kit, url: str, deadline: float) -> Capstone:
    if not _LIBRARY_FIGURES:
        library, _, runs = await recompute(LIBRARY, url, trusted=True, sections_of=_LIBRARY_SECTIONS)
        _LIBRARY_FIGURES.update(library)
        _LIBRARY_RUNS.update(runs)
    after: list[str] = []
    yours, missing, runs = await recompute(kit, url, deadline, after)
    rows = []
    for f in exact_figures().itertuples():
        rows.append({"section": f.section, "id": f.id, "figure": f.figure, "chapter": f.value,
                     "yours": figures.render(yours.get(f.id), f.value) if f.id in yours else None,
                     "library": figures.render(_LIBRARY_FIGURES.get(f.id), f.value)})
    compared = pd.DataFrame([{"run": label, "differs": run_difference(theirs, runs.get(label)),
                              "field": differing_field(theirs, runs.get(label)),
                              "sections": _LIBRARY_SECTIONS.get(label, ())}
                             for label, theirs in _LIBRARY_RUNS.items()],
                            columns=["run", "differs", "field", "sections"])
    return Capstone(pd.DataFrame(rows), missing, compared, after)


def sections_plot(result: Capstone):
    """Section by section: how many of its exact figures your harness and the library reproduce, of how many."""
    t = result.table
    per = pd.DataFrame({"figures": t.groupby("section").size(),
                        "yours": result.matches.groupby(t.section).sum(),
                        "library": (t.library == t.chapter).groupby(t.section).sum()}).iloc[::-1]
    fig, (ax,) = _figure(7.5, 3.8)
    y = list(range(len(per)))
    with style():
        ax.barh([i + 0.2 for i in y], per["library"], height=0.4, color=BLUE, label="harness_lib")
        ax.barh([i - 0.2 for i in y], per["yours"], height=0.4, color=ORANGE, label=_("your harness"))
        ax.scatter(per["figures"], y, marker="|", s=300, color="black", label=_("the chapter's exact figures"))
        ax.set_yticks(y, per.index)
        ax.set_xlabel(_("exact figures reproduced"))
        ax.set_title(_("The chapter through your harness, section by section"))
        ax.legend(loc="lower right", fontsize=8)
    return fig


__all__ = ["Capstone", "LIBRARY", "PARAMETERS", "capstone", "recompute", "sections_plot"]
