"""The notebooks' support code: the plots, the small helpers the notebooks call, the executor, and the
shape of the notebooks themselves (their outputs are checked by nbval: see tests/sanitize.cfg)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from harness_lib.chapter import common, notebooks, plots
from harness_lib.chapter import s01_loop as s01
from harness_lib.chapter import s02_turn_cap as s02
from harness_lib.chapter import s03_budget as s03
from harness_lib.chapter import s09_cancellation as s09
from harness_lib.chapter import s10_trace as s10
from harness_lib.chapter import s11_latency as s11
from harness_lib.chapter import s12_local_model as s12
from harness_lib.chapter import s14_libraries as s14
from harness_lib.chapter import s15_what_is_left as s15
from harness_lib.chapter.figures import compare
from harness_lib.trace import read
from harness_lib.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PNG = b"\x89PNG\r\n\x1a\n"


def arun(coro):
    return asyncio.run(coro)


# -- the chapter modules' helpers ---------------------------------------------------------------
def test_request_parts_sum_to_the_billed_prompt_tokens(url):
    out, _, _ = arun(s01.loop_plan(url))
    parts = s01.request_parts(out.state, [t.schema() for t in out.workspace.tools()])
    assert parts.groupby("turn")["tokens"].sum().tolist() == [t["prompt_tokens"] for t in out.state.per_turn]
    assert parts.groupby("turn").size().tolist() == [3, 5, 7]  # schemas + 2, 4, 6 messages
    assert (parts["tokens"] > 0).all()


def test_request_parts_without_tools_has_no_schema_tokens(url):
    out, _, _ = arun(s01.loop_plan(url))
    parts = s01.request_parts(out.state, [])
    assert (parts[parts["role"] == "tool schemas"]["tokens"] == 0).all()


def test_trace_helpers_on_the_approval_run(url, tmp_path):
    _, events, _, measured = arun(s10.trace_demo(url, tmp_path, run_id="n1"))
    assert events == read(tmp_path / "trace.jsonl")
    assert {e["runId"] for e in events} == {"n1"} and measured == {"trace.lines": 6}
    lines = common.trace_lines(events).splitlines()
    assert len(lines) == 6 and '"ts"' not in "".join(lines) and lines[0].startswith('{"runId":"n1","type":"turn"')
    turns = s10.turn_costs(events, run_id="n1")
    assert turns["turn"].tolist() == [1, 2]
    assert turns["turn_cost_usd"].tolist() == [0.000684, 0.000886]
    assert s10.turn_costs(events, run_id="nobody").empty


def test_turn_costs_restart_per_run():
    events = [{"runId": r, "type": "turn", "turn": t, "prompt_tokens": 1, "completion_tokens": 1, "costUsd": c}
              for r, t, c in (("a", 1, 0.1), ("a", 2, 0.3), ("b", 1, 0.2))]
    assert s10.turn_costs(events)["turn_cost_usd"].tolist() == [0.1, 0.2, 0.2]


def test_local_summary_reproduces_the_chapter_total_line():
    summary = s12.local_summary(s12.recorded_local_model())
    table = compare(summary, section="12-local-model")
    assert (table["chapter"].str.removesuffix(" ms") == table["ours"].str.removesuffix(" ms")).all()


def test_history_shares_sum_to_what_each_request_was_billed(url):
    """Notebook 15's split of every request: the parts of each turn add up to the prompt tokens the provider
    billed, the schemas and the task are the same every turn, and only history grows."""
    tools = [t.schema() for t in Workspace.copy_of().tools()]
    left = arun(s15.what_is_left(url, caps=(8, 30)))
    for state in (left.plan, left.runs[30]):
        parts = s15.history_shares(state, tools)
        assert (parts["prompt"] == parts["billed"]).all() and len(parts) == state.turns
        assert parts["tool schemas"].nunique() == 1 and parts["the task"].nunique() == 1
        assert parts["history %"].is_monotonic_increasing and parts["history %"].iloc[0] == 0
    assert left.measured == {"left.in8": 3431, "runaway, cap 30: input tokens": left.runs[30].prompt_tokens,
                             "left.prompts": [204, 269, 342]}
    effect = s15.cap_effect(left.runs, s15.history_shares(left.runs[30], tools))
    assert effect["same turns as the longest run"].all() and effect.loc[8, "last prompt"] == 653


def test_the_last_reports_tally_or_one_line_saying_why_not(tmp_path):
    """Notebook 15 reads the report `make chapter` wrote: its tally as the report counts it, by section; a
    missing, damaged or foreign file is one line, never a traceback."""
    from harness_lib.chapter.figures import compare, tally

    table = compare({"plan.turns": 3, "plan.ms": 9, "left.in8": 3431, "runaway, cap 5: input tokens": 1})
    table.to_csv(tmp_path / "chapter.csv", index=False)
    counts, line = s15.report_tally(tmp_path / "chapter.csv")
    assert line == tally(table[table.match != "the chapter has no figure for this value"])
    assert counts.loc["01-loop", "figures"] == 2 and counts.loc["14-libraries", "not reproducible offline"] == 7
    assert list(counts.index) == ["01-loop", "12-local-model", "14-libraries", "15-what-is-left"]
    (tmp_path / "bad.csv").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    for name, says in (("none.csv", "no report yet"), ("bad.csv", "cannot be read"), ("other.csv", "not a report")):
        counts, line = s15.report_tally(tmp_path / name)
        assert counts is None and says in line and "\n" not in line, line


_SCENARIO = common.scenario


def _local_model_states(url, monkeypatch, **options):
    states, real = [], _SCENARIO

    async def recording(*args, **kwargs):
        out = await real(*args, **kwargs)
        states.append(out.state)
        return out
    monkeypatch.setattr(s12, "scenario", recording)
    table = arun(s12.local_model(url, model="plan", **options))  # the scripted provider plays the server
    return table, states


def test_a_real_endpoint_is_priced_as_unknown_unless_prices_are_given(url, monkeypatch):
    from harness_lib.pricing import CHAPTER_PRICES

    table, states = _local_model_states(url, monkeypatch)
    assert len(table) == len(states) == len(s12.LOCAL_TASKS) and (table["status"] == "completed").all()
    assert all(s.prompt_tokens > 0 and s.own_cost_usd == 0 for s in states)  # tokens counted, dollars unknown
    _, priced = _local_model_states(url, monkeypatch, pricing=CHAPTER_PRICES)
    assert [s.prompt_tokens for s in priced] == [s.prompt_tokens for s in states]
    assert all(s.own_cost_usd == pytest.approx(s.prompt_tokens * 2e-6 + s.completion_tokens * 12e-6) for s in priced)


def test_a_real_endpoint_needs_a_model_name_in_one_line(url):
    from harness_lib.chapter.params import ParameterError

    with pytest.raises(ParameterError) as info:
        arun(s12.local_model(url))  # conftest clears LLM_MODEL
    (line,) = info.value._render_traceback_()
    assert line.startswith("ParameterError: LLM_MODEL is not set") and url in line and "\n" not in line
    assert arun(s12.local_model(None)) is None  # no server configured: the recorded run is shown instead


# -- plots ------------------------------------------------------------------------------------------
def _prefix(n=12):
    turns = pd.DataFrame({"prompt_tokens": 204 + 64 * np.arange(n), "completion_tokens": [23] * n})
    turns["cost_usd"] = turns["prompt_tokens"] * 2e-6 + turns["completion_tokens"] * 12e-6
    prefix = pd.DataFrame({"prompt_tokens": turns["prompt_tokens"], "input_tokens": turns["prompt_tokens"].cumsum(),
                           "cost_usd": turns["cost_usd"].cumsum()})
    prefix.index = pd.RangeIndex(1, n + 1, name="cap")
    return prefix


def _figures():
    prefix = _prefix()
    parts = pd.DataFrame({"turn": [1, 1, 2, 2, 2], "part": ["tool schemas", "#0 system"] * 2 + ["#1 user"],
                          "role": ["tool schemas", "system"] * 2 + ["user"], "tokens": [163, 27, 163, 27, 14]})
    runs = pd.DataFrame({"cost_usd": prefix.loc[[4, 8], "cost_usd"]}, index=pd.Index([4, 8], name="cap"))
    budgets = pd.DataFrame({"budget_usd": [0.005], "turns": [5], "spent_usd": [prefix.loc[5, "cost_usd"]]})
    table = pd.DataFrame({"turns": [1, 4], "cost_usd": [0.0007, 0.0035]}, index=["fatal", "descriptive"])
    timelines = {"no Stop": pd.DataFrame({"t_ms": [500, 1000], "label": ["a", "b"]}),
                 "Stop, tool deaf": pd.DataFrame(columns=["t_ms", "label"])}
    turns = pd.DataFrame({"runId": ["a", "a", "b"], "turn": [1, 2, 1], "costUsd": [0.1, 0.3, 0.2],
                          "turn_cost_usd": [0.1, 0.2, 0.2]})
    latency = pd.DataFrame({"latency_ms": [0, 50, 100], "wall_ms": [5.0, 155.0, 305.0]})
    stopped = pd.DataFrame({"turns": [3, 3], "cost_usd": [prefix.loc[3, "cost_usd"]] * 2}, index=["x", "y"])
    shares = pd.DataFrame({"tool schemas": [163] * 4, "the task": [41] * 4, "old assistant turns": [0, 34, 67, 100],
                           "old tool results": [0, 31, 62, 93]}, index=pd.RangeIndex(1, 5, name="turn"))
    return {
        "request_parts": s01.request_parts_plot(parts),
        "quadratic_growth": s02.quadratic_growth_plot(prefix, np.polyfit(prefix.index, prefix["input_tokens"], 2)),
        "cost_vs_cap": s02.cost_vs_cap_plot(prefix, runs),
        "budget_stairs": s03.budget_stairs_plot(prefix, budgets),
        "bars": plots.bars(table, ["turns", "cost_usd"], formats=["{}", "${:.6f}"],
                           highlight=pd.Series([False, True]), highlight_label="answered"),
        "cancel_timeline": s09.cancel_timeline_plot(timelines, {"no Stop": 1050.0, "Stop, tool deaf": 3000.0}, 1.2),
        "turn_costs": s10.turn_costs_plot(turns),
        "latency_fit": s11.latency_fit_plot(latency, 3.0, 5.0),
        "stops_on_curve": s14.stops_on_curve_plot(prefix, stopped),
        "history_growth": s15.growth_plot(shares, shares.loc[[1, 2, 3]]),
        "window": s15.window_plot([204, 269, 333], [204, 269, 326]),
    }


@pytest.mark.slow
def test_every_plot_returns_a_figure_that_renders():
    for name, fig in _figures().items():
        assert isinstance(fig, Figure), name
        assert fig.axes, name
        assert plots.png(fig).startswith(PNG), name


def test_png_is_byte_identical_for_identical_figures():
    assert plots.png(s11.latency_fit_plot(pd.DataFrame({"latency_ms": [0, 1], "wall_ms": [1.0, 4.0]}), 3.0, 1.0)) == \
        plots.png(s11.latency_fit_plot(pd.DataFrame({"latency_ms": [0, 1], "wall_ms": [1.0, 4.0]}), 3.0, 1.0))


def test_dollar_labels_are_not_mathtext():
    fig = s03.budget_stairs_plot(_prefix(), pd.DataFrame({"budget_usd": [0.005], "turns": [5], "spent_usd": [0.0061]}))
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("$0.005" in t for t in texts)
    plots.png(fig)  # would raise on an unbalanced formula if "$...$" were parsed as math


def test_show_publishes_a_png_and_nothing_else(monkeypatch):
    import IPython.display

    published = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: published.append((obj, raw)))
    plots.show(s11.latency_fit_plot(pd.DataFrame({"latency_ms": [0, 1], "wall_ms": [1.0, 4.0]}), 3.0, 1.0))
    (bundle, raw), = published
    assert raw and list(bundle) == ["image/png"]
    assert base64.b64decode(bundle["image/png"]).startswith(PNG)


# -- the executor -----------------------------------------------------------------------------------
def test_strip_drops_volatile_metadata_and_keeps_outputs():
    nb = nbformat.v4.new_notebook()
    info = {"name": "python", "version": "3.12.1", "codemirror_mode": {"name": "ipython", "version": 3}}
    nb.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                        "language_info": dict(info), "widgets": {}})
    cell = nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    nb.cells = [cell]
    notebooks.strip(nb)
    # language_info is kept whole: JupyterLab rewrites a partial one on open and marks the notebook unsaved
    assert set(nb.metadata) == {"kernelspec", "language_info"} and nb.metadata.language_info == info
    assert "execution" not in nb.cells[0].metadata and nb.cells[0].outputs[0].text == "1\n"


@pytest.mark.slow
def test_execute_runs_a_notebook_in_place(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import asyncio\nawait asyncio.sleep(0)\nprint(6 * 7)")]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    times = notebooks.execute_all([path])
    assert list(times) == ["n.ipynb"]
    done = nbformat.read(path, as_version=4)
    assert done.cells[0].outputs[0].text == "42\n" and "execution" not in done.cells[0].metadata


def _fake_execute(monkeypatch, body):
    """``notebooks.execute`` replaced by ``body(path)``: execute_all's scheduling without kernels."""
    monkeypatch.setattr(notebooks, "execute", lambda path, timeout=600: body(Path(path)) or 1.0)


def test_notebooks_run_side_by_side_the_timed_ones_first(monkeypatch):
    """make chapter runs two notebooks at once (issue 23): both halves of a two-party barrier run at once (one
    after another, the first would time out), 09 and 11, whose figures are times, start first, and the times
    come back in the order asked for."""
    import threading
    barrier, started = threading.Barrier(2, timeout=10), []

    def body(path):
        started.append(path.name)
        if path.name in ("a.ipynb", "09-cancellation.ipynb"):
            barrier.wait()

    _fake_execute(monkeypatch, body)
    names = ["a.ipynb", "b.ipynb", "11-latency.ipynb", "09-cancellation.ipynb"]
    times = notebooks.execute_all(names, jobs=2)
    assert list(times) == names and sorted(started) == sorted(names)
    assert set(started[:2]) == {"09-cancellation.ipynb", "11-latency.ipynb"}


def test_a_failing_notebook_starts_no_other_and_raises(monkeypatch):
    import threading
    import time
    failed, started = threading.Event(), []

    def body(path):
        started.append(path.name)
        if path.name == "b.ipynb":
            failed.set()
            raise RuntimeError("a cell failed")
        if path.name == "a.ipynb":   # still running when b fails; its worker is free next
            failed.wait(10)
            time.sleep(0.2)

    _fake_execute(monkeypatch, body)
    with pytest.raises(RuntimeError, match="a cell failed"):
        notebooks.execute_all(["a.ipynb", "b.ipynb", "c.ipynb"], jobs=2)
    assert sorted(started) == ["a.ipynb", "b.ipynb"]   # c was never started


def test_ctrl_c_stops_the_kernels_running_and_starts_no_other(monkeypatch):
    """Ctrl-C while two notebooks run: their kernels are shut down, the third is never started, the call returns
    without waiting for the notebooks' threads (a client whose kernel died can wait on it for ever). One of the two
    kernels was still being started when Ctrl-C came (no process yet: nothing to stop), and its process began
    just after: it is stopped too (left running, it failed once the exit removed its sockets' folder, with a
    traceback on the reader's terminal)."""
    import signal
    import threading
    started, stopped = [], []
    both = threading.Barrier(3, timeout=10)
    pressed = threading.Event()

    class Kernel:
        def __init__(self, late: bool):
            self.down, self.up = threading.Event(), threading.Event()
            if late:   # its process begins a moment after Ctrl-C
                threading.Thread(target=self.begin, daemon=True).start()
            else:
                self.up.set()

        def begin(self):
            pressed.wait(10)
            time.sleep(0.3)
            self.up.set()

        @property
        def has_kernel(self) -> bool:
            return self.up.is_set() and not self.down.is_set()

        def shutdown_kernel(self, now=False):
            stopped.append(now)
            self.down.set()

    def body(path):
        started.append(path.name)
        km = Kernel(late=path.name == "b.ipynb")
        notebooks._RUNNING.add(km)
        try:
            both.wait()
            assert km.down.wait(10), "the kernel was not shut down"
        finally:
            notebooks._RUNNING.discard(km)

    handler = []

    def press():
        both.wait()
        handler.append(signal.getsignal(signal.SIGINT))   # said if the test fails: what the Ctrl-C met
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        pressed.set()

    _fake_execute(monkeypatch, body)
    # Ctrl-C as `make chapter`'s process takes it, Python's own handler, whatever an earlier test in this worker
    # left in place (under xdist a worker runs other modules' tests before this one, in no fixed order)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=press, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            try:
                notebooks.execute_all(["a.ipynb", "b.ipynb", "c.ipynb"], jobs=2)
            except AssertionError as e:
                raise AssertionError(f"{e} (SIGINT's handler when pressed: {handler})") from e
    finally:
        signal.signal(signal.SIGINT, before)
    assert sorted(started) == ["a.ipynb", "b.ipynb"] and stopped == [True, True]
    deadline = time.monotonic() + 10   # they heard their kernels end (the call waits 2 s at most, then leaves them)
    while notebooks._RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not notebooks._RUNNING


STOPPED_CLIENTS = r"""
import atexit, signal, sys, threading
import nbclient
from harness_lib.chapter import notebooks
from harness_lib.chapter.nbformat_fast import nbformat

class Client:   # nbclient's NotebookClient, as far as its cleanup at exit goes
    def __init__(self, nb, km=None, **kwargs):
        self.km = km

    def _cleanup_kernel(self):   # at exit: the kernel was stopped already (or died): nothing of it may run
        print("a stopped notebook's cleanup ran at exit", file=sys.stderr, flush=True)
        assert self.km is not None, "on a kernel manager let go of"

    def execute(self):
        atexit.register(self._cleanup_kernel)   # as nbclient's async_setup_kernel does, before the kernel starts
        if sys.argv[1] == "dies":   # the kernel died as it started (its manager shut it down: Ctrl-C): nbclient's
            self.km = None          # own cleanup ran, and the exception leaves its registration behind
            raise RuntimeError("Kernel died before replying to kernel_info")
        both.wait()                 # "stuck": deaf to its kernel's end, its thread outlives the Ctrl-C and the process
        threading.Event().wait()

both = threading.Barrier(3, timeout=10)
nbclient.NotebookClient = Client
path = sys.argv[2]
nbformat.write(nbformat.v4.new_notebook(), path)
signal.signal(signal.SIGINT, signal.default_int_handler)
if sys.argv[1] == "stuck":   # one Ctrl-C, once both notebooks run
    threading.Thread(target=lambda: (both.wait(), signal.pthread_kill(threading.main_thread().ident,
                                                                        signal.SIGINT)), daemon=True).start()
try:
    notebooks.execute_all([path, path], jobs=2)
except (KeyboardInterrupt, RuntimeError) as e:
    print(type(e).__name__, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["dies", "stuck"])
def test_a_stopped_notebooks_client_leaves_no_cleanup_to_fail_at_exit(tmp_path, how):
    """nbclient registers each client's kernel cleanup with atexit, and leaves it registered when the kernel dies as
    it starts, or while the client's thread is still running when Ctrl-C's handling returns; at exit it then failed
    on a kernel manager the client had let go of: `make chapter` stopped with Ctrl-C printed an AssertionError's
    traceback (seen in the clone test of tests/test_executed.py). execute drops its client's cleanup however it ends,
    and execute_all those of the clients still running when it stops them: a process that ends then prints none."""
    import subprocess
    import sys

    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_CLIENTS)
    done = subprocess.run([sys.executable, str(script), how, str(tmp_path / "n.ipynb")], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    said = "RuntimeError" if how == "dies" else "KeyboardInterrupt"
    assert done.stdout == said + "\n" and done.stderr == "" and done.returncode == 0, (done.stdout, done.stderr)


@pytest.mark.parametrize("value, jobs", [("", None), ("1", 1), ("3", 3), ("0", ValueError), ("two", ValueError),
                                         ("-1", ValueError)])
def test_the_number_of_notebooks_run_at_once(monkeypatch, value, jobs):
    monkeypatch.setenv(notebooks.JOBS_ENV, value)
    if jobs is ValueError:
        with pytest.raises(ValueError, match="HARNESS_CHAPTER_JOBS="):
            notebooks.default_jobs()
    else:
        assert notebooks.default_jobs() == (jobs or min(2, os.cpu_count() or 1))


@pytest.mark.slow
def test_two_kernels_run_at_once(tmp_path):
    """Two real notebooks, each waiting for the other's mark: they can only both see it side by side."""
    for me, other in (("a", "b"), ("b", "a")):
        code = (f"import asyncio, pathlib, time\npathlib.Path('{me}.mark').touch()\nt0 = time.monotonic()\n"
                f"while not pathlib.Path('{other}.mark').exists() and time.monotonic() - t0 < 30:\n"
                "    await asyncio.sleep(0.05)\n"
                f"print(pathlib.Path('{other}.mark').exists())")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), tmp_path / f"{me}.ipynb")
    times = notebooks.execute_all([tmp_path / "a.ipynb", tmp_path / "b.ipynb"], jobs=2)
    assert list(times) == ["a.ipynb", "b.ipynb"]
    for name in times:
        assert nbformat.read(tmp_path / name, as_version=4).cells[0].outputs[0].text == "True\n"


@pytest.mark.slow
def test_reading_notebooks_compiles_no_grammar():
    """make chapter's two processes and the translations' build import nbformat, whose jsonschema compiled 38
    lark grammars (rfc3987_syntax) on the way, 1.5-2 s of CPU each (issue 23): now hidden while nbformat is
    imported, and importable again afterwards."""
    import subprocess
    import sys
    code = ("import sys\nimport harness_lib.chapter.notebooks, harness_lib.chapter.translations\n"
            "from harness_lib.chapter.notebooks import nbformat\n"
            "nbformat.validate(nbformat.read('notebooks/01-loop.ipynb', as_version=4))\n"
            "print(sorted(m for m in ('lark', 'rfc3987_syntax') if m in sys.modules))\n"
            "import rfc3987_syntax\nprint('rfc3987_syntax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"], out


# -- the notebooks as files -------------------------------------------------------------------------
def test_there_is_one_notebook_per_section_in_chapter_order():
    """00 to 15, one per section of the chapter, then 16, the capstone: the reader's harness, the whole chapter."""
    names = [p.stem for p in NOTEBOOKS]
    assert [int(n[:2]) for n in names] == list(range(17)) and names[-1] == "16-your-harness"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shape(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(f"# {path.stem[:2]} ")
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell holds the parameters"
    setup_cell = code[1]
    setup = setup_cell.source
    assert "figure_formats = ['png']" in setup
    # the provider lives as long as the kernel: no cell stops it, so every cell can be re-run
    assert "ScriptedProvider.shared()" in setup
    assert not any("provider.stop()" in c.source for c in code)
    for cell in code:
        # a cell that builds a section's mechanism reads at a glance up to 40 lines (issue 18); any other, 12
        # (nbgrader's solution markers, which an exercise notebook does not show, are not counted)
        longest = 40 if "build" in cell.metadata.get("tags", []) else 12
        lines = [line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION",
                                                                                    "### END SOLUTION")]
        assert cell is setup_cell or len(lines) <= longest, f"a long cell: {cell.source[:60]!r}"
        for out in cell.get("outputs", []):
            assert out.output_type != "error", cell.source
            assert not (out.output_type == "stream" and out.name == "stderr"), out.text
            assert "text/plain" not in out.get("data", {}) or "<Figure" not in out.data["text/plain"]
            assert "image/svg+xml" not in out.get("data", {})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_names_the_kernel_the_environment_installed(path):
    """JupyterLab rewrites any other kernelspec or language_info on opening: the notebook would open unsaved."""
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.kernelspec == notebooks.kernelspec()
    assert {"version", "codemirror_mode", "pygments_lexer"} <= set(nb.metadata.language_info)


def test_notebooks_print_no_temporary_paths_or_random_ids():
    for path in NOTEBOOKS:
        text = path.read_text()
        assert "/tmp/" not in text and "harness-ws-" not in text, path.name
        assert not re.search(r"chatcmpl-[0-9a-f]{8}", text), path.name



def test_a_build_cell_that_runs_something_is_refused(tmp_path, monkeypatch):
    """tests/built loads a notebook's build cells by executing them: a cell that calls or awaits something at
    its top level would run it in every test, so the loader refuses it, naming the notebook, cell and line."""
    import built_cells

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import json\nX = 1\n\ndef f():\n    return X", metadata={"tags": ["build"]}),
                nbformat.v4.new_code_cell("print('ran')", metadata={"tags": ["build"]})]
    nbformat.write(nb, tmp_path / "99-x.ipynb")
    monkeypatch.setattr(built_cells, "NOTEBOOKS", tmp_path)
    with pytest.raises(ValueError, match=r"99-x, build cell 2, line 1: a build cell only defines"):
        built_cells.load("99-x")
    nb.cells = nb.cells[:1]
    nbformat.write(nb, tmp_path / "99-x.ipynb")
    assert built_cells.load("99-x")["f"]() == 1
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, tmp_path / "99-x.ipynb")
    with pytest.raises(LookupError, match="no cell tagged 'build'"):
        built_cells.load("99-x")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_builds_its_piece_and_a_test_holds_it_to_the_library(path):
    """Issue 18: the reader builds each section's mechanism in cells tagged build, and tests/built runs them
    beside harness_lib. A notebook without either teaches by calling hidden functions again."""
    import built_cells

    assert built_cells.build_cells(path.stem), f"{path.name} has no cell tagged 'build'"
    (test,) = (ROOT / "tests" / "built").glob(f"test_{path.stem[:2]}_*.py")
    assert f'"{path.stem}"' in test.read_text(), f"{test.name} does not load {path.stem}'s build cells"


@pytest.mark.slow
def test_executing_a_notebook_is_quiet_and_leaves_no_kernel(tmp_path, capfd, monkeypatch):
    """`make chapter` said "Kernel is running over TCP without encryption" once a notebook (issue 22 item 8): its
    kernels talk over local sockets now, and each is shut down, its socket folder gone, when its notebook ends."""
    import glob
    import tempfile

    path = tmp_path / "tiny.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os; print(os.getpid())")])
    nbformat.write(nb, path)
    # a temporary folder of the test's own: another test's kernels (make test runs two at once) are not ours
    # (a short path: the kernel's sockets are files in it, and a socket's path is at most 107 bytes)
    own = tempfile.mkdtemp(prefix="hk-")
    monkeypatch.setattr(tempfile, "tempdir", own)
    before = set(glob.glob(f"{tempfile.gettempdir()}/harness-kernel-*"))
    lines = []
    notebooks.execute_all([path], say=lines.append)
    out, err = capfd.readouterr()
    assert "without encryption" not in out + err and "WARNING" not in err, err
    assert len(lines) == 1 and lines[0].startswith("tiny.ipynb")
    pid = int(nbformat.read(path, as_version=4).cells[0].outputs[0].text)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # shut down, not left to notice its parent is gone
    assert set(glob.glob(f"{tempfile.gettempdir()}/harness-kernel-*")) == before
    monkeypatch.undo()
    shutil.rmtree(own)
