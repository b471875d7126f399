"""`make chapter`'s report takes the figures the notebooks measured instead of measuring them again
(``chapter.collected``), and the experiments return named records whose ``.measured`` the report reads."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness_lib.chapter import collected, report
from harness_lib.chapter import s01_loop as s01
from harness_lib.chapter import s03_budget as s03
from harness_lib.chapter import s07_approval as s07
from harness_lib.chapter import s12_local_model as s12
from harness_lib.chapter.figures import beside_the_chapter, compare, relabel
from harness_lib.chapter.s12_local_model import LOCAL_EXTRA

ROOT = Path(__file__).resolve().parents[1]


def arun(coro):
    return asyncio.run(coro)


def test_nothing_is_written_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(collected.ENV, raising=False)
    assert collected.record({"plan.turns": 3}, "01-loop") is False
    beside_the_chapter({"plan.turns": 3}, section="01-loop")  # a reader's notebook: no file anywhere
    assert list(tmp_path.iterdir()) == []


def test_records_read_back_as_written_numpy_and_tuples_included(monkeypatch, tmp_path):
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv(collected.ENV, str(path))
    figures = {"plan.turns": np.int64(3), "plan.cost": np.float64(0.00247), "plan.prompts": (204, 269, 342),
               "plan.status": "completed", "plan.answer": None}
    assert collected.record(figures, "01-loop") and collected.record({}, "12-local-model")
    [(section, got), (other, empty)] = collected.read(path)
    assert (section, other, empty) == ("01-loop", "12-local-model", {})
    assert got == {"plan.turns": 3, "plan.cost": 0.00247, "plan.prompts": [204, 269, 342],
                   "plan.status": "completed", "plan.answer": None}
    assert type(got["plan.turns"]) is int and type(got["plan.cost"]) is float
    # rendered against the chapter, the read-back figures judge as the originals do
    assert compare(got)["match"].tolist() == compare(figures)["match"].tolist()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), {"a": 1}])
def test_a_figure_json_cannot_hold_is_refused_and_nothing_written(monkeypatch, tmp_path, value):
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv(collected.ENV, str(path))
    with pytest.raises(collected.CollectError):
        collected.record({"plan.ms": value}, "01-loop")
    assert collected.read(path) == []


@pytest.mark.parametrize("text", ['{"section": "01-loop"}\n', "not json\n", '["01-loop", {}]\n',
                                  '{"section": 1, "measured": {}}\n'])
def test_a_damaged_file_is_an_error_not_an_empty_report(tmp_path, text):
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    with pytest.raises(collected.CollectError, match="line 1"):
        collected.read(path)


def test_whole_sections_only(url):
    plan = arun(s01.loop_plan(url)).measured
    budget = arun(s03.budget_table(url)).measured     # the $0.005 and $0.050 runs are labels: dropped
    partial = {k: v for k, v in plan.items() if k != "plan.ms"}
    measured, done = report.whole_sections([("01-loop", plan), ("03-budget", budget), ("06-dedupe", {}),
                                            ("07-approval", relabel(arun(s07.approval(url)).measured, "x"))])
    assert done == {"01-loop", "03-budget"}
    assert measured == {**plan, **{k: v for k, v in budget.items() if " " not in k}}
    assert report.whole_sections([("01-loop", partial)]) == ({}, set())
    # section 12: the reader's own server (cell 7) never counts; the local extra's run does, whole
    local = s12.local_summary(s12.recorded_local_model())
    assert report.whole_sections([("12-local-model", local)]) == ({}, set())
    assert report.whole_sections([(LOCAL_EXTRA, local)]) == (local, {LOCAL_EXTRA})


def test_measure_all_skips_what_the_notebooks_measured(url):
    assert arun(report.measure_all(url, skip=set(report.EXPERIMENTS))) == {}
    only = arun(report.measure_all(url, skip=set(report.EXPERIMENTS) - {"06-dedupe"}))
    assert sorted(only) == sorted(compare(only, section="06-dedupe")["id"]) and len(only) == 9


def test_an_executed_notebook_hands_the_report_what_it_would_have_measured(url, tmp_path):
    """Notebook 01, executed as `make chapter` does (a copy, so the committed one is untouched): its
    figures reach the report, and judge exactly as the report's own run of the same experiment."""
    shutil.copy(ROOT / "notebooks" / "01-loop.ipynb", tmp_path)
    timings: dict = {}
    measured, done = report.executed_notebooks(timings, [tmp_path / "01-loop.ipynb"])
    assert done == {"01-loop"} and list(timings) == ["notebook 01-loop.ipynb"]
    own = arun(report.measure_all(url, skip=set(report.EXPERIMENTS) - {"01-loop"}))
    assert set(measured) == set(own)
    assert compare(measured)["match"].tolist() == compare(own)["match"].tolist()
    assert collected.ENV not in __import__("os").environ  # the variable does not outlive the execution


def test_a_callers_own_collection_survives_the_reports(monkeypatch, tmp_path):
    """An in-process caller collecting into its own file keeps it: the report sets the variable for its
    kernels, then puts back what was there (it removed it)."""
    import os
    mine = tmp_path / "mine.jsonl"
    monkeypatch.setenv(collected.ENV, str(mine))
    monkeypatch.setattr("harness_lib.chapter.notebooks.execute_all", lambda paths, say=None, jobs=1: {})
    report.executed_notebooks({}, [])
    assert os.environ.get(collected.ENV) == str(mine)


def test_every_experiment_names_its_figures_measured(url):
    """The report reads ``.measured`` and nothing else; the records still unpack in field order."""
    for section, experiment in report.EXPERIMENTS.items():
        if section in ("08-resume", "09-cancel", "11-latency"):
            continue  # the slow ones: their records are read in test_figures.py
        result = arun(experiment(url))
        assert isinstance(result.measured, dict) and result.measured
        assert tuple(result)[-1] is result.measured and result._fields[-1] == "measured"


def test_notebook_15_runs_after_the_report_it_reads(monkeypatch, tmp_path, capsys):
    """Notebook 15 closes on the report's tally (chapter.csv): `make chapter` runs every other notebook, writes the
    report beside them, then runs 15, so that what 15 shows is the report written beside it; the report measures
    section 15 itself, and names 15's time too. All of it in the run's own copy (executed/.staging), moved into
    executed/ at the end: the committed notebooks and reports/ are not touched."""
    monkeypatch.chdir(tmp_path)
    names = ["00-scripted-provider.ipynb", "14-libraries.ipynb", "15-what-is-left.ipynb"]
    (tmp_path / "notebooks").mkdir()
    for name in names:
        shutil.copy(ROOT / "notebooks" / name, tmp_path / "notebooks" / name)
    shutil.copytree(ROOT / "locale", tmp_path / "locale")
    staging = tmp_path / "executed" / ".staging"
    calls = []

    def executed(timings, paths):
        calls.append(([p.name for p in paths], {p.parent for p in paths},
                      (staging / "reports" / "chapter.csv").exists()))
        timings.update({f"notebook {p.name}": 0.1 for p in paths})
        return {}, set()

    async def measure(base_url, skip=()):
        assert "15-what-is-left" not in skip
        return {"left.in8": 3431, "plan.turns": 3}

    monkeypatch.setattr(report, "executed_notebooks", executed)
    monkeypatch.setattr(report, "measure_all", measure)
    monkeypatch.setattr(report, "section_12_live", lambda: None)
    from harness_lib.chapter import notebooks as notebooks_module  # the translations, written, not executed here
    monkeypatch.setattr(notebooks_module, "execute_all", lambda paths, say=None, jobs=1: {})
    before = {p: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()}
    assert report.main(execute=True) == 0
    copy = staging.relative_to(tmp_path) / "notebooks"
    assert calls == [(names[:2], {copy}, False), (names[2:], {copy}, True)]
    text = (tmp_path / "executed" / "reports" / "chapter.md").read_text()
    assert "| notebook 15-what-is-left.ipynb |" in text and text.index("notebook 15") < text.index("| total |")
    assert "2 of 13 chapter figures reproduced exactly (1 of them repeats of earlier figures)" in text
    assert not (tmp_path / "reports").exists() and not staging.exists()
    assert {p: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "executed" / "notebooks" / "bg").iterdir()) == names
    # What `make chapter` prints (issue 22 item 8): a line a step (the notebooks' are theirs), the translations,
    # where the run went and, last, the tally; no table.
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["figures", "bg:", "hu:", "executed/notebooks:",
                                                  "executed/reports/chapter.md:"], out
    assert out[-1].startswith("executed/reports/chapter.md: 2 of 13 chapter figures reproduced exactly"), out


def test_the_report_counts_section_14_without_a_notebook_measuring_it(url):
    """Section 14's figures are never measured (a registry's history): no record makes the section whole, and
    the report lists them anyway."""
    assert report.whole_sections([("14-libraries", {})]) == ({}, set())
    assert "14-libraries" not in report.EXPERIMENTS
    table = compare({})
    assert (table.section == "14-libraries").sum() == 7
