"""``python -m harness_lib chapter``: every chapter figure, recomputed, beside the chapter's.

With ``--execute`` (what ``make chapter`` runs) it executes every notebook, takes the figures they measured on the
way (``collected``) instead of measuring them again, writes the report (``chapter.md``, ``chapter.csv``) and builds
the translated notebooks from the English ones just executed; notebook 15, which closes on that report's tally,
runs last, once the report is written (the report measures its section itself). All of it happens in a copy, and
goes to ``executed/`` (``harness_lib.chapter.executed``, ignored by git): the reader's run never writes a tracked
file. The maintainer's refresh (``make notebooks``, ``harness_lib.chapter.refresh``) runs the same in the project's
own ``notebooks/`` and ``reports/``, the committed reference, keeping notebook 12's recorded live section unless the
local model ran. Either way it ends with one line: how many figures were reproduced exactly, how many within
tolerance, how many are times of another machine measured here, how many cannot be reproduced here or offline
(``figures.tally``); the reader's run says on the line before where its notebooks went.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from ..scripted import ScriptedProvider
from . import collected, executed
from . import s01_loop as s01
from . import s02_turn_cap as s02
from . import s03_budget as s03
from . import s05_tool_errors as s05
from . import s06_dedupe as s06
from . import s07_approval as s07
from . import s08_resume as s08
from . import s09_cancellation as s09
from . import s10_trace as s10
from . import s11_latency as s11
from . import s15_what_is_left as s15
from .figures import ALWAYS_LISTED, chapter_figures, compare, is_label, tally
from .s12_local_model import LOCAL_EXTRA, section_12_live

# Relative: written in the folder the command runs in (make chapter: the project's), never in the package.
REPORTS = Path("reports")


# Each section of the report and the experiment that measures it (the section a notebook names in its
# ``beside_the_chapter`` call).
EXPERIMENTS = {"01-loop": s01.loop_plan, "02-turn-cap": s02.cap_table, "03-budget": s03.budget_table,
               "05-tool-errors": s05.tool_errors, "06-dedupe": s06.dedupe, "07-approval": s07.approval,
               "08-resume": s08.resume_after_kill, "09-cancel": s09.cancellation, "10-trace": s10.trace_demo,
               "11-latency": s11.latency, "15-what-is-left": s15.what_is_left}
# Notebooks that read the report itself (15 closes on its tally): executed once the report is written, so that
# what they show is the report beside them. The report measures their sections itself (EXPERIMENTS).
AFTER_THE_REPORT = ("15-what-is-left.ipynb",)


def chapter_only(measured: dict) -> dict:
    """The chapter's figures only: values it printed none for (the $0.005 and $0.050 budgets) are the
    notebooks' business."""
    return {k: v for k, v in measured.items() if not is_label(k)}


async def measure_all(base_url: str, skip=()) -> dict:
    """Run every experiment (but those of the sections in ``skip``) once: the chapter's figures they measure."""
    measured: dict = {}
    for section, experiment in EXPERIMENTS.items():
        if section not in skip:
            result = await (experiment() if experiment is s11.latency else experiment(base_url))
            measured.update(result.measured)
    return chapter_only(measured)


def executed_notebooks(timings: dict, paths=None) -> tuple[dict, set[str]]:
    """Execute every notebook (or those in ``paths``; their timings into ``timings``), two at once on two cores
    (``notebooks.execute_all``), a line for each as it ends, and return what they measured on the way
    (``whole_sections``)."""
    from .notebooks import default_jobs, execute_all
    with tempfile.TemporaryDirectory(prefix="harness-chapter-") as tmp:
        path = Path(tmp) / "measured.jsonl"
        before = os.environ.get(collected.ENV)
        os.environ[collected.ENV] = str(path)   # the kernels inherit it
        try:
            say = lambda line: print(line, flush=True)  # noqa: E731
            for name, seconds in execute_all(paths, say=say, jobs=default_jobs()).items():
                timings[f"notebook {name}"] = seconds
        finally:  # as it was: a caller's own collection goes on
            if before is None:
                os.environ.pop(collected.ENV, None)
            else:
                os.environ[collected.ENV] = before
        return whole_sections(collected.read(path))


def whole_sections(records: list[tuple[str, dict]]) -> tuple[dict, set[str]]:
    """(the chapter's figures, the sections of EXPERIMENTS measured whole) from the notebooks' records.
    Section 12 counts only from the local extra's run with the report's parameters (``LOCAL_EXTRA``), what
    ``section_12_live`` measures. A section measured under other parameters (its figures relabelled) or in
    part is not whole: the report measures it again, with the chapter's."""
    figures = chapter_figures()
    measured: dict = {}
    done = set()
    for section in [*EXPERIMENTS, LOCAL_EXTRA]:
        ids = set(figures.id[figures.section == section.split(",")[0]])
        if section != LOCAL_EXTRA:
            ids &= set(figures.id[~figures.kind.isin(ALWAYS_LISTED)])
        got = chapter_only({k: v for s, m in records if s == section for k, v in m.items()})
        if ids and ids <= set(got):
            measured.update(got)
            done.add(section)
    return measured, done


def write_reports(table: pd.DataFrame, line: str, timings: dict, folder: Path = REPORTS) -> None:
    folder.mkdir(exist_ok=True)
    table.to_csv(folder / "chapter.csv", index=False)
    lines = ["# The chapter's figures, recomputed", "",
             "Generated by `make chapter` (`python -m harness_lib chapter --execute`: your run, in `executed/`) or "
             "by `make notebooks` (the committed reference, `reports/`). Token counts, turns, "
             "statuses and outcomes must match exactly; dollars and ratios at the chapter's printed precision; "
             "a time the design sets (a progress tick, the scan, Stop at 1.2 s) within the tolerance in "
             "`data/chapter_figures.csv`. A time of the chapter's machine and runtime (Node 22 there, "
             "CPython here) is measured here and shown beside it, never matched (\"measured here, another "
             "machine\"); section 12's local model needs the chapter's machine and model (\"not reproducible "
             "here\"), section 14's figures the npm registry's history (\"not reproducible offline\"): listed, "
             "counted, never left out. A figure the chapter prints twice is compared in each of its sections, "
             "and the last line says how many are such repeats.", ""]
    for section, rows in table.groupby("section", sort=False):
        lines += [f"## {section}", "", "| figure | chapter | ours | tolerance | match |", "|---|---|---|---|---|"]
        lines += [f"| {r.figure} | {r.chapter} | {r.ours} | {r.tolerance} | {r.match} |" for r in rows.itertuples()]
        lines.append("")
    if timings:
        lines += ["## How long it took on this machine", "", "| step | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in timings.items()]
        lines.append("")
    lines += [line, ""]
    (folder / "chapter.md").write_text("\n".join(lines))


def recompute(measured: dict, done: set, timings: dict, say=None) -> pd.DataFrame:
    """The comparison table: the figures the notebooks measured (``measured``, the sections ``done`` whole), and
    those no notebook measured, measured here (and section 12's live model, with the `local` extra)."""
    t0 = time.perf_counter()
    if set(EXPERIMENTS) - done:
        with ScriptedProvider() as provider:
            measured.update(asyncio.run(measure_all(provider.base_url, skip=done)))
        label = "figures recomputed" if not done else "figures no notebook measured"
        timings[label] = time.perf_counter() - t0
        if say:
            say(label, timings[label])
    t0 = time.perf_counter()
    if LOCAL_EXTRA not in done and (local_figures := section_12_live()):  # only with the `local` extra
        measured.update(local_figures)
        timings[label := "section 12, live local model"] = time.perf_counter() - t0
        if say:
            say(label, timings[label])
    return compare(measured)


class ChapterError(Exception):
    """The chapter cannot be run as asked: one line, said by ``main``."""


LANGUAGE_NAMES = {"bg": "Bulgarian", "hu": "Hungarian"}
LANGUAGES_ENV = "HARNESS_CHAPTER_LANGUAGES"   # `make chapter LANGUAGES=bg`: the languages run besides English


def chapter_languages(value: str | None = None) -> tuple[str, ...]:
    """The translations a run executes besides the English notebooks (which it always runs: the report is theirs):
    ``HARNESS_CHAPTER_LANGUAGES`` (``make chapter LANGUAGES="bg hu"``), none by default."""
    from .translations import LANGUAGES

    words = (os.environ.get(LANGUAGES_ENV, "") if value is None else value).replace(",", " ").split()
    unknown = [w for w in words if w not in (*LANGUAGES, "en")]
    if unknown:
        raise ChapterError(f"LANGUAGES={' '.join(words)}: the notebooks are in en, {', '.join(LANGUAGES)}; "
                           f"not {', '.join(unknown)}")
    return tuple(dict.fromkeys(w for w in words if w != "en"))


def chapter_in(root: Path, keep_recorded_live: bool = False,
               languages: tuple[str, ...] = ()) -> tuple[pd.DataFrame, str]:
    """Execute every notebook of ``root/notebooks`` in place, write ``root/reports``, then run the notebooks that
    read the report, and execute the translated notebooks of ``languages`` (``root/notebooks/bg``, ``hu``) in their
    language; those of the other languages are kept as committed (built again only if they are not what the English
    and the catalogues make). (the table, its tally line). ``keep_recorded_live``: notebook 12's live section,
    recorded when the local model last ran, is kept as it was unless the model ran now (the maintainer's
    refresh)."""
    from .notebooks import every_notebook, timing_line
    from .s12_local_model import NOTEBOOK as NOTEBOOK_12
    from .s12_local_model import keep_recorded_live as keep_12
    from .translations import TranslationError, build, summary

    started = time.perf_counter()
    timings: dict[str, float] = {}
    every = every_notebook(root / "notebooks")
    after = [p for p in every if p.name in AFTER_THE_REPORT]
    twelve = [p for p in every if p.name == NOTEBOOK_12]
    recorded = twelve[0].read_text(encoding="utf-8") if keep_recorded_live and twelve else None
    measured, done = executed_notebooks(timings, [p for p in every if p not in after])
    if recorded is not None and keep_12(twelve[0], recorded):
        print(f"{twelve[0].relative_to(root)}: the local model did not run here: its recorded live section kept",
              flush=True)
    table = recompute(measured, done, timings, say=lambda label, s: print(timing_line(label, s), flush=True))
    line = tally(table)
    timings["total"] = time.perf_counter() - started
    write_reports(table, line, timings, root / REPORTS)
    if after:  # they read the report just written; what they measure, the report has measured itself
        del timings["total"]
        executed_notebooks(timings, after)
        timings["total"] = time.perf_counter() - started
        write_reports(table, line, timings, root / REPORTS)
    from .translations import LANGUAGES as TRANSLATED

    say = lambda line: print(line, flush=True)  # noqa: E731
    try:
        done = build(root / "notebooks", languages=languages, again=True, say=say) if languages else {}
        done.update(build(root / "notebooks", languages=[x for x in TRANSLATED if x not in languages], say=say))
        print(summary({x: done[x] for x in TRANSLATED}, brief=True), flush=True)
    except TranslationError as e:
        raise ChapterError(str(e)) from None
    return table, line


def main(json_out: bool = False, execute: bool = False, reference: bool = False) -> int:
    """The report. With ``execute``, the notebooks run first and the figures they measured are the report's;
    only what no notebook measured is run again here. The reader's run goes to ``executed/``; with ``reference``
    (the maintainer's refresh) the committed notebooks and ``reports/`` are rewritten in place."""
    if not execute:
        table = recompute({}, set(), {})
        line = tally(table)
        if json_out:
            print(json.dumps({"figures": table.to_dict(orient="records"), "summary": line}, ensure_ascii=False))
            return 0
        with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 60):
            print(table[["id", "chapter", "ours", "tolerance", "match"]].to_string(index=False))
        print(line)
        return 0
    from .notebooks import every_notebook
    every_notebook()   # outside the project: said before anything is made
    try:
        if reference:
            from .translations import LANGUAGES as TRANSLATED
            with executed.run() as stage:
                table, line = chapter_in(stage.root, keep_recorded_live=True, languages=tuple(TRANSLATED))
                changed = executed.install_reference(stage)
            where = [f"{len(changed)} committed files rewritten: {', '.join(str(p) for p in changed[:4])}"
                     f"{', ...' if len(changed) > 4 else ''}" if changed else "no committed file changed",
                     f"{REPORTS / 'chapter.md'}: {line}"]
        else:
            try:
                languages = chapter_languages()
                with executed.run() as stage:
                    table, line = chapter_in(stage.root, languages=languages)
                    kept = executed.install(stage, line)
            except BaseException as e:
                if not isinstance(e, Exception):   # Ctrl-C, SIGTERM: said here, then as the command line says it
                    print(f"{executed.FOLDER}/: as the last complete `make chapter` left it; nothing else changed",
                          file=sys.stderr, flush=True)
                raise
            folder = executed.FOLDER
            where = [f"{path}: changed since `make chapter` wrote it: your version is kept beside it, as {aside.name}"
                     for path, aside in kept]
            ran = " and ".join(["English", *(LANGUAGE_NAMES[x] for x in languages)])
            kept_as = [x for x in LANGUAGE_NAMES if x not in languages]
            also = (f"; in {' and '.join(LANGUAGE_NAMES[x] for x in kept_as)} as committed (`make chapter "
                    f"LANGUAGES={' '.join(kept_as) if len(kept_as) == 1 else repr(' '.join(kept_as))}` runs "
                    f"{'it' if len(kept_as) == 1 else 'them'} too)" if kept_as else "")
            where += [f"{folder / executed.NOTEBOOKS}: the notebooks as this run executed them, in {ran}{also}. "
                      "`make lab` opens them; notebooks/ keeps the committed ones, unchanged",
                      f"{folder / executed.REPORTS / 'chapter.md'}: {line}"]
    except ChapterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if json_out:
        print(json.dumps({"figures": table.to_dict(orient="records"), "summary": line}, ensure_ascii=False))
    else:
        print("\n".join(where))
    return 0
