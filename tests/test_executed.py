"""`make chapter` never writes a tracked file (issue 34): the reader's run goes to executed/ (ignored by git),
`make lab` opens it, and the committed notebooks and report are refreshed only by the maintainer's `make notebooks`,
which keeps notebook 12's recorded live section unless the local model ran.

The fast tests here drive ``harness_lib.chapter.executed`` and the report without kernels; the slow one is the issue's
own: a fresh clone, `make chapter`, Ctrl-C halfway through a second, a third to the end, `git status` empty after each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_kernels

from harness_lib.chapter import executed, lab, report
from harness_lib.chapter import notebooks as notebooks_module
from harness_lib.chapter import s12_local_model as s12
from harness_lib.chapter import s15_what_is_left as s15
from harness_lib.chapter.nbformat_fast import nbformat

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path, names=("01-loop.ipynb", "02-turn-cap.ipynb")) -> Path:
    (tmp_path / "notebooks" / "bg").mkdir(parents=True)
    for name in names:
        shutil.copy(ROOT / "notebooks" / name, tmp_path / "notebooks" / name)
    (tmp_path / "notebooks" / "bg" / "glossary.md").write_text("речник\n")
    return tmp_path


def _contents(folder: Path) -> dict:
    """Every file under ``folder`` and its bytes, but the lock's (its holder's pid and time: information only)."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != executed.LOCK}


def _run_once(project: Path, change=None, summary: str = "a tally") -> list[Path]:
    """One run of ``executed.run`` in ``project``: ``change(stage)`` plays the notebooks' execution; installed."""
    with executed.run(project) as stage:
        (stage.root / "reports" / "chapter.md").write_text(summary + "\n")
        if change:
            change(stage)
        return executed.install(stage, summary)


# -- the run's folder ------------------------------------------------------------------------------------------
def test_a_run_goes_to_executed_and_leaves_the_committed_notebooks_as_they_were(tmp_path):
    project = _project(tmp_path)
    before = {p: p.read_bytes() for p in (project / "notebooks").rglob("*") if p.is_file()}

    def execute(stage):
        assert stage.root == project / "executed" / ".staging"
        (stage.root / "notebooks" / "01-loop.ipynb").write_text("executed 01")

    assert _run_once(project, execute) == []
    assert {p: p.read_bytes() for p in (project / "notebooks").rglob("*") if p.is_file()} == before
    assert (project / "executed" / "notebooks" / "01-loop.ipynb").read_text() == "executed 01"
    assert (project / "executed" / "notebooks" / "bg" / "glossary.md").read_text() == "речник\n"
    assert (project / "executed" / "reports" / "chapter.md").read_text() == "a tally\n"
    record = json.loads((project / "executed" / "run.json").read_text())
    assert record["summary"] == "a tally" and set(record["written"]) == {
        "notebooks/01-loop.ipynb", "notebooks/02-turn-cap.ipynb", "notebooks/bg/glossary.md", "reports/chapter.md"}
    assert record["sources"]["notebooks/01-loop.ipynb"] == executed.sha256(project / "notebooks" / "01-loop.ipynb")
    assert not (project / "executed" / ".staging").exists()


def test_what_the_reader_changed_or_made_in_executed_is_kept(tmp_path):
    """A notebook edited and saved in JupyterLab since `make chapter` wrote it is kept beside the new one, a notebook
    the reader made is left alone, and one the project no longer has goes (unless the reader changed it)."""
    project = _project(tmp_path, names=("01-loop.ipynb", "02-turn-cap.ipynb", "03-budget.ipynb"))
    _run_once(project)
    mine = project / "executed" / "notebooks"
    (mine / "01-loop.ipynb").write_text("the reader's edits")
    (mine / "Untitled.ipynb").write_text("the reader's own notebook")
    (mine / ".ipynb_checkpoints").mkdir()
    (mine / ".ipynb_checkpoints" / "01-loop-checkpoint.ipynb").write_text("a checkpoint")
    (project / "notebooks" / "03-budget.ipynb").unlink()   # gone from the project (a git pull)
    kept = _run_once(project, summary="the second run")
    assert kept == [(mine / "01-loop.ipynb", mine / "01-loop.edited.ipynb")]
    assert (mine / "01-loop.edited.ipynb").read_text() == "the reader's edits"
    assert (mine / "01-loop.ipynb").read_bytes() == (project / "notebooks" / "01-loop.ipynb").read_bytes()
    assert (mine / "Untitled.ipynb").read_text() == "the reader's own notebook"
    assert (mine / ".ipynb_checkpoints" / "01-loop-checkpoint.ipynb").exists()
    assert not (mine / "03-budget.ipynb").exists()
    # a third run: the edited copy is the reader's now (not written by a run), and stays; a second edit gets -2
    (mine / "01-loop.ipynb").write_text("edited again")
    assert _run_once(project) == [(mine / "01-loop.ipynb", mine / "01-loop.edited-2.ipynb")]
    assert (mine / "01-loop.edited.ipynb").read_text() == "the reader's edits"


def test_make_chapter_says_which_of_the_readers_edits_it_kept(tmp_path, monkeypatch, capsys):
    project = _project(tmp_path)
    monkeypatch.chdir(project)

    def chapter_in(root, keep_recorded_live=False, languages=()):
        (root / "reports" / "chapter.md").write_text("the report\n")
        return None, "1 of 1 chapter figures reproduced exactly"
    monkeypatch.setattr(report, "chapter_in", chapter_in)
    assert report.main(execute=True) == 0
    (project / "executed" / "notebooks" / "02-turn-cap.ipynb").write_text("the reader's edits")
    capsys.readouterr()
    assert report.main(execute=True) == 0
    assert capsys.readouterr().out.splitlines() == [
        "executed/notebooks/02-turn-cap.ipynb: changed since `make chapter` wrote it: your version is kept beside it, "
        "as 02-turn-cap.edited.ipynb",
        "executed/notebooks: the notebooks as this run executed them, in English; in Bulgarian and Hungarian as "
        "committed (`make chapter LANGUAGES='bg hu'` runs them too). `make lab` opens them; notebooks/ keeps the "
        "committed ones, unchanged",
        "executed/reports/chapter.md: 1 of 1 chapter figures reproduced exactly"]
    assert (project / "executed" / "notebooks" / "02-turn-cap.edited.ipynb").read_text() == "the reader's edits"


def test_a_run_that_fails_or_is_stopped_leaves_the_last_run_as_it_was(tmp_path):
    project = _project(tmp_path)
    _run_once(project, summary="the first run")
    first = _contents(project / "executed")
    for stop in (KeyboardInterrupt, RuntimeError("a notebook failed")):
        def failing(stage, stop=stop):
            (stage.root / "notebooks" / "01-loop.ipynb").write_text("half done")
            raise stop
        with pytest.raises(type(stop) if isinstance(stop, BaseException) else stop):
            _run_once(project, failing, summary="the stopped run")
        assert _contents(project / "executed") == first
        assert not (project / "executed" / ".staging").exists()
    # a run killed outright leaves its staging folder: the next run removes it first
    (project / "executed" / ".staging" / "notebooks").mkdir(parents=True)
    (project / "executed" / ".staging" / "notebooks" / "99-stale.ipynb").write_text("{}")
    _run_once(project)
    assert not (project / "executed" / "notebooks" / "99-stale.ipynb").exists()


def test_a_full_disk_stops_the_run_before_any_file_moves(tmp_path, monkeypatch):
    project = _project(tmp_path)
    _run_once(project, summary="the first run")
    first = _contents(project / "executed")
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == f".{executed.RECORD}.tmp":
            raise OSError(28, "No space left on device", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        _run_once(project, lambda stage: (stage.root / "notebooks" / "01-loop.ipynb").write_bytes(b"new"))
    assert _contents(project / "executed") == first
    monkeypatch.setattr(executed.shutil, "copytree", lambda *a, **k: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        _run_once(project)
    assert not (project / "executed" / ".staging").exists()


def test_ctrl_c_while_the_files_move_waits_until_they_all_have(tmp_path, monkeypatch):
    """The renames that make a run the reader's are not left half-done: Ctrl-C during them is acted on after."""
    project = _project(tmp_path)
    real, moved = os.replace, []

    def replace(src, dst):
        if not moved:
            signal.raise_signal(signal.SIGINT)   # the reader's Ctrl-C, as the first file moves
        moved.append(dst)
        return real(src, dst)
    monkeypatch.setattr(executed.os, "replace", replace)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _run_once(project)
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(moved) == 5   # four files and the record, every one of them
    assert json.loads((project / "executed" / "run.json").read_text())["summary"] == "a tally"


def test_a_second_run_at_once_is_refused_in_one_line_naming_the_first(tmp_path):
    project = _project(tmp_path)
    with executed.run(project):
        with pytest.raises(OSError) as info:
            with executed.run(project):
                pass
        assert info.value.filename == str(project / "executed" / ".lock")
        assert info.value.strerror.startswith(f"another `make chapter` is running in this folder (pid {os.getpid()}")
        assert (project / "executed" / ".staging").exists()   # the first run's copy is not the second's to remove
    with executed.run(project):   # free again
        pass


def test_make_chapter_beside_another_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    from harness_lib import cli

    project = _project(tmp_path)
    monkeypatch.chdir(project)
    with executed.run(Path(".")):
        assert cli.main(["chapter", "--execute"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: cannot use executed/.lock: another `make chapter` is running in this "
                                        f"folder (pid {os.getpid()}, since ") and len(err.splitlines()) == 1


# -- what make lab opens, and what notebook 15 reads ----------------------------------------------------------
def test_make_lab_opens_the_readers_executed_copies_and_says_so(tmp_path):
    project = _project(tmp_path)
    shutil.copytree(ROOT / "lab", project / "lab")
    folder, line = lab.opens(project)
    assert folder == project / "notebooks"
    assert line.startswith("JupyterLab opens notebooks/: the notebooks as committed")
    assert "`make chapter` writes them" in line
    _run_once(project)
    folder, line = lab.opens(project)
    assert folder == project / "executed" / "notebooks"
    assert line.startswith("JupyterLab opens executed/notebooks/: the notebooks as your `make chapter` of ")
    assert "changed since" not in line and "the committed ones are in notebooks/" in line
    (project / "notebooks" / "02-turn-cap.ipynb").write_text("{}")   # a git pull changed it
    folder, line = lab.opens(project)
    assert folder == project / "executed" / "notebooks"
    assert "the committed notebooks changed since (02-turn-cap.ipynb): run `make chapter` again" in line


def test_notebook_15_reads_the_report_beside_the_notebooks_it_runs_with(tmp_path):
    project = _project(tmp_path)
    for folder in (project / "reports", project / "executed" / "reports"):
        folder.mkdir(parents=True)
        (folder / "chapter.csv").write_text("section,id,match\n")
    (project / "executed" / "notebooks" / "bg").mkdir(parents=True)
    assert s15.report_path(project / "notebooks") == project / "reports" / "chapter.csv"
    assert s15.report_path(project / "notebooks" / "bg") == project / "reports" / "chapter.csv"
    assert s15.report_path(project / "executed" / "notebooks") == project / "executed" / "reports" / "chapter.csv"
    assert s15.report_path(project / "executed" / "notebooks" / "bg") == \
        project / "executed" / "reports" / "chapter.csv"
    assert s15.report_path(tmp_path / "a" / "b" / "notebooks") == s15.REPORT


# -- notebook 12's recorded live section ----------------------------------------------------------------------
def _not_run(nb):
    """Notebook 12 as a machine without the `local` extra executes it: the live section says so and shows nothing."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cells = s12.live_cells(nb)
    cells[0].outputs = [nbformat.v4.new_output("stream", text="Not run here: the local model is not installed\n")]
    for cell in cells[1:]:
        cell.outputs = []
    return nb


def test_the_recorded_live_run_of_notebook_12_is_kept_unless_the_model_ran(tmp_path):
    committed = (ROOT / "notebooks" / s12.NOTEBOOK).read_text(encoding="utf-8")
    recorded = nbformat.reads(committed, as_version=4)
    assert s12.ran_live(recorded), "the committed notebook 12 holds no run of the local model"
    assert len(s12.live_cells(recorded)) >= 5
    path = tmp_path / s12.NOTEBOOK
    nbformat.write(_not_run(recorded), path)
    assert s12.keep_recorded_live(path, committed) is True
    kept = nbformat.read(path, as_version=4)
    assert [c.outputs for c in s12.live_cells(kept)] == [c.outputs for c in s12.live_cells(recorded)]
    # the model ran now: its run is the new record
    ran = nbformat.reads(committed, as_version=4)
    s12.live_cells(ran)[0].outputs[0]["text"] = "turns=2 tools=1 a new run\n"
    nbformat.write(ran, path)
    assert s12.keep_recorded_live(path, committed) is False
    assert s12.live_cells(nbformat.read(path, as_version=4))[0].outputs[0]["text"] == "turns=2 tools=1 a new run\n"


def test_the_maintainers_refresh_rewrites_the_committed_files_and_keeps_the_recorded_run(tmp_path, monkeypatch):
    """`make notebooks` on a machine without the local model: the notebooks are executed in a copy (here: a line
    changed, 12's live section emptied, as such a machine executes them), then put over the committed ones, the
    report with them and the translations rebuilt from them; 12 keeps the recorded run, its translations too."""
    names = ("01-loop.ipynb", s12.NOTEBOOK)
    project = _project(tmp_path, names)
    shutil.rmtree(project / "notebooks" / "bg")
    for language in ("bg", "hu"):
        (project / "notebooks" / language).mkdir()
        for name in [*names, "glossary.md"]:
            shutil.copy(ROOT / "notebooks" / language / name, project / "notebooks" / language / name)
    shutil.copytree(ROOT / "locale", project / "locale")
    monkeypatch.chdir(project)

    def executing(paths, said):   # as a machine without the local model executes them: 12's live section empty
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            if path.name == s12.NOTEBOOK:
                nb = _not_run(nb)
            else:
                [c for c in nb.cells if c.cell_type == "code"][-1].outputs = [
                    nbformat.v4.new_output("stream", text=said(path))]
            nbformat.write(nb, path)

    def executed_notebooks(timings, paths):
        executing(paths, lambda path: "executed again\n")
        return {}, set()

    async def measure(base_url, skip=()):
        return {"plan.turns": 3}

    def execute_all(paths, say=None, jobs=1):   # the translated ones, each in its language (here: said so)
        executing(paths, lambda path: f"executed again, in {path.parent.name}\n")

    monkeypatch.setattr(report, "executed_notebooks", executed_notebooks)
    monkeypatch.setattr(report, "measure_all", measure)
    monkeypatch.setattr(report, "section_12_live", lambda: None)
    monkeypatch.setattr(notebooks_module, "execute_all", execute_all)
    assert report.main(execute=True, reference=True) == 0
    def last_code(path):
        return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"][-1]
    assert last_code(project / "notebooks" / "01-loop.ipynb").outputs[0]["text"] == "executed again\n"
    for folder in ("notebooks", "notebooks/bg", "notebooks/hu"):
        twelve = nbformat.read(project / folder / s12.NOTEBOOK, as_version=4)
        assert s12.ran_live(twelve), folder
        said = "executed again\n" if folder == "notebooks" else f"executed again, in {folder[-2:]}\n"
        assert last_code(project / folder / "01-loop.ipynb").outputs[0]["text"] == said
    tally = (project / "reports" / "chapter.md").read_text().splitlines()[-1]
    assert tally.startswith("1 of ") and tally.endswith("4 not reproducible here, 7 not reproducible offline, 0 differ")
    assert not (project / "executed" / "notebooks").exists()   # the reader's folder is not the maintainer's
    # a translated notebook whose English is gone: removed with it
    (project / "notebooks" / "01-loop.ipynb").unlink()
    assert report.main(execute=True, reference=True) == 0
    assert not (project / "notebooks" / "bg" / "01-loop.ipynb").exists()
    assert (project / "notebooks" / "bg" / s12.NOTEBOOK).exists()
    assert (project / "notebooks" / "bg" / "glossary.md").exists()


def test_make_chapter_runs_the_translations_asked_for_and_keeps_the_others_as_committed(tmp_path, monkeypatch,
                                                                                          capsys):
    """`make chapter LANGUAGES=bg`: the Bulgarian notebooks executed (in Bulgarian), the Hungarian ones those of the
    clone, unchanged; the line naming the folder says which is which. A language it does not know: one line."""
    project = _project(tmp_path, ("01-loop.ipynb",))
    shutil.rmtree(project / "notebooks" / "bg")
    for language in ("bg", "hu"):
        (project / "notebooks" / language).mkdir()
        for name in ("01-loop.ipynb", "glossary.md"):
            shutil.copy(ROOT / "notebooks" / language / name, project / "notebooks" / language / name)
    shutil.copytree(ROOT / "locale", project / "locale")
    monkeypatch.chdir(project)
    ran = []

    def execute_all(paths, say=None, jobs=1):
        ran.extend(Path(p).relative_to(executed.FOLDER / executed.STAGING).as_posix() for p in paths)

    monkeypatch.setattr(report, "executed_notebooks", lambda timings, paths: ({}, set()))
    monkeypatch.setattr(report, "measure_all", lambda base_url, skip=(): _measured())
    monkeypatch.setattr(report, "section_12_live", lambda: None)
    monkeypatch.setattr(notebooks_module, "execute_all", execute_all)
    monkeypatch.setenv(report.LANGUAGES_ENV, "bg")
    assert report.main(execute=True) == 0
    assert ran == ["notebooks/bg/01-loop.ipynb"]
    said = capsys.readouterr().out
    assert "in English and Bulgarian; in Hungarian as committed (`make chapter LANGUAGES=hu` runs it too)." in said
    hu = project / executed.FOLDER / "notebooks" / "hu" / "01-loop.ipynb"
    assert hu.read_bytes() == (ROOT / "notebooks" / "hu" / "01-loop.ipynb").read_bytes()
    monkeypatch.setenv(report.LANGUAGES_ENV, "bg de")
    assert report.main(execute=True) == 2
    assert "error: LANGUAGES=bg de: the notebooks are in en, bg, hu; not de" in capsys.readouterr().err


async def _measured():
    return {"plan.turns": 3}


def test_the_refresh_outside_the_project_or_stopped_is_one_line(tmp_path, monkeypatch, capsys):
    from harness_lib.chapter import refresh

    monkeypatch.chdir(tmp_path)
    assert refresh.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: the notebooks, the report and the translations: cannot use: no "
                                        "notebooks in ") and len(err.splitlines()) == 1
    monkeypatch.setitem(refresh.STEPS, "the notebooks, the report and the translations",
                        lambda: (_ for _ in ()).throw(KeyboardInterrupt))
    assert refresh.main([]) == 130
    err = capsys.readouterr().err
    assert err.startswith("stopped by Ctrl-C during the notebooks") and len(err.splitlines()) == 1


# -- the issue's own test: a fresh clone, make chapter, Ctrl-C halfway, make chapter ---------------------------
def _clone(into: Path) -> Path:
    """A fresh clone of this tree as it is (its tracked files, uncommitted changes included): git init, add,
    commit."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    git = ["git", "-c", "user.name=reader", "-c", "user.email=reader@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=into, check=True)
    subprocess.run([*git, "add", "-A"], cwd=into, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a fresh clone"], cwd=into, check=True)
    return into


# `make chapter` here, as a reader's runs it, but for two things:
# - the local model switched off (HARNESS_LOCAL_MODEL=off): with the `local` extra, each run here would also run the
#   local model's six tasks (about 20 s of CPU, three times), which tells nothing about what make chapter writes; the
#   model is run by its own tests and notebook 12's reader session (tests/test_parameters.py). Notebook 12 says the
#   model was not run, as on a reader's machine without the extra;
# - in `make chapter`'s own process, the notebooks' kernels forked from a warm server, as the tests' own kernels are
#   (``warm_kernels.site``): about 1 s of CPU less a kernel, 17 kernels a run. What the test checks is what make
#   chapter writes, and where.
def _environment(clone: Path) -> dict:
    site = warm_kernels.site(clone.parent / "site", per_kernel=("HARNESS_CHAPTER_COLLECT",))  # (the report's, a run's)
    path = os.pathsep.join(filter(None, (str(clone), site.pop("PYTHONPATH", ""))))
    return {**os.environ, **site, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "HARNESS_LOCAL_MODEL": "off"}


def _make_chapter(clone: Path) -> subprocess.Popen:
    """`make chapter` in ``clone``, with this environment (``-o``: the install is not remade; ``BIN``: this
    environment's python, the clone's own package first on its path; ``_environment``), in a session of its own as
    a terminal runs it."""
    env = _environment(clone)
    command = ["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={Path(sys.executable).parent}",
               "chapter"]
    return subprocess.Popen(command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` still running (the process table's word; a zombie does not run)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry))
    return found


def _status(clone: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_make_chapter_in_a_fresh_clone_leaves_git_status_empty_even_when_stopped(tmp_path):
    clone = _clone(tmp_path / "clone")
    committed = {p: p.read_bytes() for p in (clone / "notebooks").rglob("*.ipynb")}
    first = _make_chapter(clone)
    out, _ = first.communicate(timeout=900)
    assert first.returncode == 0, out
    lines = out.splitlines()
    assert lines[-1].startswith("executed/reports/chapter.md: ") and " chapter figures reproduced exactly" in lines[-1]
    assert lines[-2].startswith("executed/notebooks: the notebooks as this run executed them"), lines[-2]
    assert _status(clone) == ""
    assert len(list((clone / "executed" / "notebooks").rglob("*.ipynb"))) == len(committed)
    record = json.loads((clone / "executed" / "run.json").read_text())

    # Ctrl-C halfway: once half the notebooks have said their line, to the whole session, as a terminal sends it
    second = _make_chapter(clone)
    said = []
    while len([line for line in said if ".ipynb" in line]) < 8:
        line = second.stdout.readline()
        assert line, f"make chapter ended before half its notebooks ran: {said}"
        said.append(line)
    os.killpg(second.pid, signal.SIGINT)
    rest, _ = second.communicate(timeout=60)
    assert second.returncode != 0 and "Traceback" not in rest, rest
    assert "executed/: as the last complete `make chapter` left it; nothing else changed" in rest, rest
    assert _status(clone) == ""
    assert not (clone / "executed" / ".staging").exists()
    assert json.loads((clone / "executed" / "run.json").read_text()) == record   # the first run's, as it was
    deadline = time.monotonic() + 10
    while _group(second.pid):
        assert time.monotonic() < deadline, f"processes of the stopped make chapter still run: {_group(second.pid)}"
        time.sleep(0.2)

    third = _make_chapter(clone)
    out, _ = third.communicate(timeout=900)
    assert third.returncode == 0, out
    assert out.splitlines()[-1].startswith("executed/reports/chapter.md: ")
    assert _status(clone) == ""
    assert {p: p.read_bytes() for p in (clone / "notebooks").rglob("*.ipynb")} == committed
    assert json.loads((clone / "executed" / "run.json").read_text())["finished"] >= record["finished"]
    if warm_kernels.enabled():
        # Forked where the launcher can (this environment's python is the kernelspec's: not through a symlink to
        # the environment, say), else fresh: a kernel for every notebook either way, in each whole run (the
        # stopped one's counted too).
        runs = warm_kernels.counted(tmp_path / "site")
        notebooks = len(list((clone / "notebooks").glob("*.ipynb")))
        assert len(runs) == 3 and sum(runs[0]) == sum(runs[2]) == notebooks, runs
